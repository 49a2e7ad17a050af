"""RichProgressBar: a terminal progress bar drawn with rich."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from jaxtrainer.callbacks.base import Callback

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class RichProgressBar(Callback):
    """Show global steps (or env steps when the module has them), training
    steps per second, the latest ``train/episode_return`` and the ETA.

    Only the global-zero process draws. Updated once per log interval, so it
    adds no host synchronisation of its own.

    Args:
      metric: the metric shown beside the bar.
      refresh_per_second: redraws per second of the rich live display.
    """

    def __init__(self, metric: str = "train/episode_return", refresh_per_second: float = 4) -> None:
        self.metric = metric
        self.refresh_per_second = refresh_per_second
        self._progress = None
        self._task = None
        self._use_env_steps = False

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._stop()  # a bar an earlier ``fit`` left open (it raised before teardown)

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        if not trainer.is_global_zero:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._use_env_steps = trainer.env_steps_per_step > 0
        unit = "env steps" if self._use_env_steps else "steps"
        total = trainer.max_steps * (trainer.env_steps_per_step if self._use_env_steps else 1)
        done = trainer.env_steps if self._use_env_steps else trainer.global_step
        self._progress = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
            TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[value]}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            refresh_per_second=self.refresh_per_second, transient=False)
        self._progress.start()
        self._task = self._progress.add_task("train", total=total, completed=done, rate="", value="")
        self._t0 = time.perf_counter()

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False  # metrics only: the next interval may run meanwhile

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        if self._progress is None:
            return
        sps = metrics.get("steps_per_second")
        rate = f"{sps:,.1f} steps/s" if sps is not None else ""
        value = metrics.get(self.metric)
        shown = f"{self.metric.rsplit('/', 1)[-1]}={value:.1f}" if value is not None else ""
        done = trainer.env_steps if self._use_env_steps else trainer.global_step
        self._progress.update(self._task, completed=done, rate=rate, value=shown)

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        self._stop()

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        self._stop()

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._stop()
