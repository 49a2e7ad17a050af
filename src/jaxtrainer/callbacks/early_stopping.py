"""EarlyStopping: stop when a monitored metric stops improving."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.monitor import check_mode, is_finite, warn_unseen

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class EarlyStopping(Callback):
    """Set ``trainer.should_stop`` when ``monitor`` has not improved for
    ``patience`` checks, crossed a threshold, or became NaN/Inf.

    A monitor that never appears in a fit's metrics warns (``UserWarning``) at the
    end of training, listing the names there were.

    A check happens whenever ``monitor`` is in the metrics of a log boundary
    (``on_train_steps_end``) or of an evaluation (``on_evaluation_end``), i.e.
    every ``log_every_n_steps`` training steps for a training metric and every
    ``eval_every_n_steps`` for an ``eval/...`` metric. Boundaries where the metric
    is missing (e.g. no episode finished yet) are not checks. Training then ends
    at that boundary: ``on_train_end`` runs once, a :class:`ModelCheckpoint`
    with ``save_last`` saves it. The reason is in ``trainer.stop_reason``.

    An ``eval/...`` monitor is checked only at evaluations, where the Trainer
    holds the state anyway, so such an EarlyStopping lets the Trainer fuse the log
    intervals in between into one compiled call (``needs_state`` is False); any
    other monitor asks for the state at every log boundary.

    Args:
      monitor: metric name, e.g. ``"eval/episode_return"``.
      mode: ``"max"`` (higher is better) or ``"min"``; ``None`` warns and uses ``"min"`` for
        a loss or an error, ``"max"`` for other metrics (as ModelCheckpoint).
      patience: checks without an improvement of more than ``min_delta`` after
        which training stops (as in Lightning and Keras: ``patience=3`` stops at
        the third such check in a row; ``0`` and ``1`` at the first).
      min_delta: smallest change (in the metric's units) counted as an improvement.
      stopping_threshold: stop as soon as the metric is at least this good
        (``>=`` in max mode, ``<=`` in min mode).
      divergence_threshold: stop as soon as the metric is this bad or worse
        (``<=`` in max mode, ``>=`` in min mode).
      check_finite: stop when the metric is NaN or infinite.

    Raises:
      ValueError: a negative ``patience`` or ``min_delta``, or a bad ``mode``.
    """

    writes_run_dir = False  # it reads metrics only

    def __init__(self, monitor: str, mode: str | None = None, patience: int = 3, min_delta: float = 0.0,
                 stopping_threshold: float | None = None, divergence_threshold: float | None = None,
                 check_finite: bool = True) -> None:
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"patience={patience!r}: expected an int >= 0")
        if not min_delta >= 0:
            raise ValueError(f"min_delta={min_delta!r}: expected a number >= 0")
        self.monitor = monitor
        self.mode = check_mode("EarlyStopping", monitor, mode)
        self.patience = patience
        self.min_delta = float(min_delta)
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_finite = check_finite
        self.best_score: float | None = None
        self.wait_count = 0
        self.stopped_step: int | None = None
        self._seen: set[str] = set()  # metric names of this fit's checks

    @property
    def state_key(self) -> str:
        """Distinct for EarlyStoppings that differ in any argument (two on one
        metric with different ``patience`` each keep their own counter)."""
        return self._key_of(monitor=self.monitor, mode=self.mode, patience=self.patience,
                            min_delta=self.min_delta, stopping_threshold=self.stopping_threshold,
                            divergence_threshold=self.divergence_threshold,
                            check_finite=self.check_finite)

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return not self.monitor.startswith("eval/")

    def _better(self, a: float, b: float, delta: float = 0.0) -> bool:
        return a > b + delta if self.mode == "max" else a < b - delta

    def _check(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        self._seen.update(metrics)
        if self.monitor not in metrics or trainer.should_stop:
            return
        value = float(metrics[self.monitor])
        reason = None
        if self.check_finite and not is_finite(value):
            reason = f"{self.monitor}={value} is not finite"
        elif self.stopping_threshold is not None and not self._better(self.stopping_threshold, value):
            reason = f"{self.monitor}={value:g} reached stopping_threshold={self.stopping_threshold:g}"
        elif self.divergence_threshold is not None and not self._better(value, self.divergence_threshold):
            reason = f"{self.monitor}={value:g} diverged past divergence_threshold={self.divergence_threshold:g}"
        elif self.best_score is None or self._better(value, self.best_score, self.min_delta):
            self.best_score, self.wait_count = value, 0
        elif not math.isnan(value):
            self.wait_count += 1
            if self.wait_count >= self.patience:  # Lightning's and Keras's count
                reason = (f"{self.monitor} did not improve by more than {self.min_delta:g} over "
                          f"{self.wait_count} checks (best {self.best_score:g})")
        if reason is not None:
            self.stopped_step = trainer.global_step
            trainer.request_stop(f"EarlyStopping: {reason}")

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """A new run: forget what an earlier ``fit`` left (a resume then loads the checkpoint's)."""
        self.best_score, self.wait_count, self.stopped_step = None, 0, None

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        self._seen: set[str] = set()

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        warn_unseen(f"EarlyStopping(monitor={self.monitor!r})", [self.monitor], self._seen)

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._check(trainer, metrics)

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._check(trainer, metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"best_score": self.best_score, "wait_count": self.wait_count,
                "stopped_step": self.stopped_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_score = state_dict.get("best_score")
        self.wait_count = int(state_dict.get("wait_count", 0))
        self.stopped_step = state_dict.get("stopped_step")
