"""ModelCheckpoint: save the training state with orbax."""

from __future__ import annotations

import math
import os
import time
import warnings
from typing import TYPE_CHECKING, Any

from jaxtrainer import checkpoint as ckpt
from jaxtrainer.callbacks.base import Callback

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class ModelCheckpoint(Callback):
    """Save the module state, trainer counters, root PRNG key and every
    callback's ``state_dict()`` to ``<log_dir>/checkpoints/<step>``.

    Saves happen at log-interval boundaries (after ``on_train_steps_end``), so a
    checkpoint at step N records the metrics of the interval ending at N (F23).

    Args:
      dirpath: checkpoint directory; default ``<trainer.log_dir>/checkpoints``.
      every_n_steps: save when the global step crosses a multiple of this
        (training steps); ``None`` = not by step count.
      every_n_seconds: save when this much wall time passed since the last save.
      monitor: metric name ranking checkpoints for ``save_top_k``.
      mode: ``"max"`` or ``"min"``; a ``monitor`` without ``mode`` warns and uses ``"max"``.
      save_top_k: keep the best ``k`` checkpoints by ``monitor`` (``-1`` = all);
        without ``monitor`` keep the newest ``k``.
      save_last: also save when training ends (always kept).
      save_on_exception: save the last state when ``fit`` raises.
      async_save: write in a background thread (arrays are copied first).

    Raises:
      ValueError: a bad argument, naming it.
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, *, every_n_steps: int | None = None,
                 every_n_seconds: float | None = None, monitor: str | None = None,
                 mode: str | None = None, save_top_k: int = -1, save_last: bool = True,
                 save_on_exception: bool = False, async_save: bool = True) -> None:
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps={every_n_steps}: expected a positive int or None")
        if every_n_seconds is not None and every_n_seconds <= 0:
            raise ValueError(f"every_n_seconds={every_n_seconds}: expected a positive number or None")
        if mode not in (None, "max", "min"):
            raise ValueError(f"mode={mode!r}: expected 'max' or 'min'")
        if save_top_k < -1 or save_top_k == 0:
            raise ValueError(f"save_top_k={save_top_k}: expected -1 (keep all) or a positive int")
        if monitor is not None and mode is None:
            warnings.warn(f"ModelCheckpoint(monitor={monitor!r}) has no mode; assuming mode='max'",
                          UserWarning, stacklevel=2)
            mode = "max"
        self.dirpath = dirpath
        self.every_n_steps = every_n_steps
        self.every_n_seconds = every_n_seconds
        self.monitor = monitor
        self.mode = mode or "max"
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.save_on_exception = save_on_exception
        self.async_save = async_save
        self.best_model_score: float | None = None
        self.best_model_path: str | None = None
        self.last_model_path: str | None = None
        self._mgr = None
        self._last_time = 0.0
        self._last_saved_step = -1
        self._metrics: dict[str, float] = {}

    # ---------------------------------------------------------------------
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage != "fit":
            return
        self.dirpath = os.fspath(self.dirpath or os.path.join(trainer.log_dir, "checkpoints"))
        keep = None if self.save_top_k == -1 else self.save_top_k
        best_fn = None
        if self.monitor is not None:
            monitor = self.monitor
            best_fn = lambda m: m.get(monitor, -math.inf if self.mode == "max" else math.inf)  # noqa: E731
        self._mgr = ckpt.manager(self.dirpath, max_to_keep=keep, best_fn=best_fn,
                                 best_mode=self.mode, async_save=self.async_save)
        self._last_time = time.monotonic()

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        self._last_saved_step = trainer.global_step
        self._last_time = time.monotonic()

    def _due(self, trainer: Trainer) -> bool:
        step = trainer.global_step
        if self.every_n_steps and step // self.every_n_steps > self._last_saved_step // self.every_n_steps:
            return True
        return bool(self.every_n_seconds and time.monotonic() - self._last_time >= self.every_n_seconds)

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._metrics.update(metrics)
        if self._due(trainer):
            self.save(trainer, module)

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._metrics.update(metrics)

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        if self.save_last and self._last_saved_step != trainer.global_step:
            self.save(trainer, module)

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        if self.save_on_exception and trainer.state is not None and self._mgr is not None:
            if self._last_saved_step != trainer.global_step:
                self.save(trainer, module)

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        if self._mgr is not None:
            self._mgr.wait_until_finished()
            self._mgr.close()
            self._mgr = None

    # ---------------------------------------------------------------------
    def save(self, trainer: Trainer, module: Module) -> str:
        """Save now (every process takes part; orbax writes from process 0 for
        replicated arrays). Returns the step directory."""
        step = trainer.global_step
        metrics = dict(self._metrics)
        if self.monitor is not None and self.monitor in metrics:
            score = metrics[self.monitor]
            better = (self.best_model_score is None
                      or (score > self.best_model_score if self.mode == "max" else score < self.best_model_score))
            if better:
                self.best_model_score = score
                self.best_model_path = os.path.join(self.dirpath, str(step))
        trainer.save_checkpoint(self._mgr, metrics=metrics)
        self._last_saved_step = step
        self._last_time = time.monotonic()
        self.last_model_path = os.path.join(self.dirpath, str(step))
        return self.last_model_path

    def state_dict(self) -> dict[str, Any]:
        return {"best_model_score": self.best_model_score, "best_model_path": self.best_model_path,
                "last_model_path": self.last_model_path}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_model_score = state_dict.get("best_model_score")
        self.best_model_path = state_dict.get("best_model_path")
        self.last_model_path = state_dict.get("last_model_path")
