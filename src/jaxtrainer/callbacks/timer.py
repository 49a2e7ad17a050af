"""Timer: stop after a maximum wall time."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jaxtrainer.callbacks.base import Callback

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


def _parse_duration(duration: float | str) -> float:
    """Seconds from a number of seconds or ``"DD:HH:MM:SS"`` (leading fields optional).

    Raises:
      ValueError: not a positive duration.
    """
    if isinstance(duration, str):
        try:
            parts = [float(p) for p in duration.split(":")]
        except ValueError:
            raise ValueError(f"duration={duration!r}: expected seconds or 'DD:HH:MM:SS'") from None
        if not 1 <= len(parts) <= 4:
            raise ValueError(f"duration={duration!r}: expected seconds or 'DD:HH:MM:SS'")
        seconds = 0.0
        for part, unit in zip(reversed(parts), (1, 60, 3600, 86400)[:len(parts)], strict=True):
            seconds += part * unit
    elif isinstance(duration, bool) or not isinstance(duration, (int, float)):
        raise ValueError(f"duration={duration!r}: expected seconds or 'DD:HH:MM:SS'")
    else:
        seconds = float(duration)
    if not seconds > 0:
        raise ValueError(f"duration={duration!r}: expected a positive duration")
    return seconds


class Timer(Callback):
    """Stop training (``trainer.should_stop``) at the first log boundary after
    ``duration`` of training wall time.

    Time spent in ``fit`` from ``on_train_start`` (after compilation) counts;
    with ``ckpt_path`` the time of earlier runs is restored from the checkpoint,
    so a preempted and resumed job still stops after ``duration`` in total (a
    resume whose earlier runs already reached it trains no step, and says so).

    While more than two host syncs' worth of time is left (twice the larger of
    ``Trainer(sync_every_n_seconds)`` and the last measured time between host
    syncs), the Timer does not need the state at log boundaries, so the Trainer
    keeps fusing log intervals into one compiled call; closer to the limit it asks
    for every boundary, so the stop still lands on the first boundary after
    ``duration`` unless the training speed changes by more than 2x within a call.

    Args:
      duration: seconds (number) or ``"DD:HH:MM:SS"`` (e.g. ``"00:12:00:00"``).

    Raises:
      ValueError: not a positive duration.
    """

    writes_run_dir = False  # it reads metrics only

    def __init__(self, duration: float | str) -> None:
        self.duration = _parse_duration(duration)
        self._previous = 0.0
        self._start: float | None = None
        self._last_sync = 0.0
        self._sync_gap = 0.0  # seconds between the last two host syncs

    def time_elapsed(self) -> float:
        """Training wall time so far, seconds (earlier runs included)."""
        running = time.monotonic() - self._start if self._start is not None else 0.0
        return self._previous + running

    def time_remaining(self) -> float:
        return max(0.0, self.duration - self.time_elapsed())

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        margin = 2.0 * max(trainer.sync_every_n_seconds, self._sync_gap)
        return self.time_remaining() <= margin

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """A new run: forget what an earlier ``fit`` left (a resume then loads the checkpoint's)."""
        self._previous, self._start, self._sync_gap = 0.0, None, 0.0

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        if self._previous >= self.duration and not trainer.should_stop:  # a resume past it
            trainer.request_stop(f"Timer: the run's {self._previous:.1f} s of training had "
                                 f"reached the limit of {self.duration:g} s before this fit; "
                                 "give a longer duration to train on")
        self._start = self._last_sync = time.monotonic()
        self._sync_gap = 0.0

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        if not trainer.more_metrics_pending:  # the last row of a host sync
            now = time.monotonic()
            self._sync_gap, self._last_sync = now - self._last_sync, now
        elapsed = self.time_elapsed()
        if elapsed >= self.duration and not trainer.should_stop:
            trainer.request_stop(f"Timer: {elapsed:.1f} s of training reached the limit of "
                                 f"{self.duration:g} s")

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        self._previous, self._start = self.time_elapsed(), None

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": self.time_elapsed()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._previous = float(state_dict.get("time_elapsed", 0.0))
