"""ThroughputMonitor: env steps per second, updates per second, compile time."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from jaxtrainer.callbacks.base import Callback

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class ThroughputMonitor(Callback):
    """Add throughput metrics to every log boundary (before the loggers see
    them, ``order = -50``) and print a summary when training ends.

    Metrics (all Python floats):

    * ``throughput/updates_per_second``, ``throughput/env_steps_per_second``:
      this interval (device time of the fused steps, host sync included).
    * ``throughput/mean_updates_per_second``, ``throughput/mean_env_steps_per_second``:
      since ``on_train_start`` of this ``fit``, callback time included,
      compilation excluded.
    * ``throughput/compile_seconds``: seconds spent compiling the training
      (and evaluation, once compiled) programs, from ``trainer.compile_seconds``.

    Attributes:
      summary: the final numbers, set at ``on_train_end``.
    """

    writes_run_dir = False  # it reads metrics only

    order = -50

    def __init__(self) -> None:
        self.summary: dict[str, float] = {}
        self._t0 = 0.0
        self._step0 = 0

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """A new run: forget what an earlier ``fit`` left (a resume then loads the checkpoint's)."""
        self.summary = {}

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        self._t0, self._step0 = time.perf_counter(), trainer.global_step

    def _totals(self, trainer: Trainer) -> dict[str, float]:
        seconds = max(time.perf_counter() - self._t0, 1e-9)
        updates = trainer.global_step - self._step0
        return {"throughput/mean_updates_per_second": updates / seconds,
                "throughput/mean_env_steps_per_second": updates * trainer.env_steps_per_step / seconds,
                "throughput/compile_seconds": float(sum(trainer.compile_seconds.values())),
                "throughput/train_seconds": seconds}

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False  # metrics only: the next interval may run meanwhile

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        if "steps_per_second" in metrics:
            metrics["throughput/updates_per_second"] = float(metrics["steps_per_second"])
            metrics["throughput/env_steps_per_second"] = float(metrics.get("env_steps_per_second", 0.0))
        totals = self._totals(trainer)
        totals.pop("throughput/train_seconds")
        metrics.update(totals)

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        self.summary = self._totals(trainer)
        if trainer.is_global_zero:
            s = self.summary
            print(f"jaxtrainer: throughput {s['throughput/mean_updates_per_second']:,.1f} updates/s, "
                  f"{s['throughput/mean_env_steps_per_second']:,.0f} env steps/s over "
                  f"{s['throughput/train_seconds']:.1f} s; compile {s['throughput/compile_seconds']:.1f} s",
                  flush=True)
