"""Where the host loop stops: log intervals, the calls that fuse them, run-ahead.

Plain Python, no JAX: the Trainer asks this planner how many training steps each
log interval holds and which consecutive intervals one compiled call runs.

- **Log intervals** end on multiples of ``log_every_n_steps`` and at the
  budget, so a resumed run logs at the same steps as an uninterrupted one.
  An evaluation never cuts one: with ``log_every_n_steps=2`` and
  ``eval_every_n_steps=3`` training rows come at steps 2, 4, 6, ... each the
  mean of 2 steps, and evaluation rows at 3, 6, ...
- **Segments.** A compiled call runs *segments*: the steps between consecutive
  points of either grid (log or evaluation) or the budget, so the host holds
  the state at each evaluation step. The call's metrics buffer has one row per
  segment; the host pools the rows of one log interval
  (:func:`jaxtrainer.metrics.merge_rows`) and reports them at its end
  (:meth:`IntervalPlanner.logs_at`). Segment lengths are traced values: every
  mix of lengths (the gcd/lcm pattern of the two grids) runs one compiled
  program, compiled once before the first step.
- **Fused segments.** A call runs consecutive segments up to the first
  boundary where the host must hold the state (the budget's end, an evaluation,
  or something the Trainer reports: a stop request, a signal, a callback whose
  ``needs_state`` is True), about ``sync_every_n_seconds`` of device time at the
  last measured speed, and ``max_intervals`` (the rows of the compiled call's
  metrics buffer). One segment per call while no speed was measured yet, or
  when fusing is off (``sync_every_n_seconds`` 0, or no ``jit``).
- **Run-ahead.** The call after a boundary may be enqueued before that
  boundary's hooks when nothing needs the state there (see :meth:`can_run_ahead`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class IntervalPlanner:
    """Interval and call planning for one ``fit``.

    Attributes:
      max_steps: the budget, in training steps.
      log_every_n_steps: training steps per log interval.
      eval_every_n_steps: evaluate every this many steps (``None``: never).
      sync_every_n_seconds: target device time (seconds) of one fused call;
        ``0`` for one call per interval.
      fuse: whether calls may fuse intervals at all (False without ``jit``).
      max_intervals: log intervals one compiled call can run, at most.
    """

    max_steps: int
    log_every_n_steps: int
    eval_every_n_steps: int | None = None
    sync_every_n_seconds: float = 0.0
    fuse: bool = True
    max_intervals: int = 128

    def interval_length(self, start: int) -> int:
        """Steps of the segment starting at step ``start``: up to the next
        multiple of ``log_every_n_steps`` or ``eval_every_n_steps``, or the
        budget (``>= 1`` while ``start < max_steps``)."""
        n = min(self.log_every_n_steps - start % self.log_every_n_steps, self.max_steps - start)
        if self.eval_every_n_steps:
            n = min(n, self.eval_every_n_steps - start % self.eval_every_n_steps)
        return n

    def logs_at(self, step: int) -> bool:
        """Whether a log interval ends at ``step``: a multiple of
        ``log_every_n_steps``, or the budget's end."""
        return step % self.log_every_n_steps == 0 or step >= self.max_steps

    def evaluates_at(self, step: int) -> bool:
        """Whether a scheduled evaluation runs at the boundary of ``step``."""
        return bool(self.eval_every_n_steps) and step % self.eval_every_n_steps == 0

    def boundary_due(self, step: int) -> bool:
        """Whether the budget or an evaluation makes ``step`` a boundary where
        the host must hold the state (the Trainer adds stops, signals and
        callbacks' ``needs_state``)."""
        return step >= self.max_steps or self.evaluates_at(step)

    def plan(self, start: int, seconds_per_step: float | None,
             needs_state: Callable[[int], bool]) -> list[int]:
        """Lengths of the log intervals that the call starting at ``start`` runs.

        Args:
          start: the first step of the call.
          seconds_per_step: device seconds per training step measured on the
            previous call (``None``: nothing measured yet; one interval).
          needs_state: whether the host must hold the state at a boundary step
            (checked after each interval; the budget and evaluations count
            without asking).

        Returns:
          ``[]`` when the budget is spent, else at least one interval length.
        """
        lengths: list[int] = []
        step = start
        while step < self.max_steps and len(lengths) < self.max_intervals:
            n = self.interval_length(step)
            lengths.append(n)
            step += n
            if not self.fuse or self.sync_every_n_seconds <= 0 or seconds_per_step is None:
                break
            if self.boundary_due(step) or needs_state(step):
                break
            if (step - start) * seconds_per_step >= self.sync_every_n_seconds:
                break
        return lengths

    def can_run_ahead(self, boundary: int, enabled: bool, needs_state: Callable[[int], bool]) -> bool:
        """Whether the call after ``boundary`` may be enqueued before the hooks of
        ``boundary`` run: run-ahead is ``enabled`` and nothing needs the state
        of step ``boundary`` (no budget end, evaluation or ``needs_state``)."""
        return enabled and not self.boundary_due(boundary) and not needs_state(boundary)


def stop_reason(global_step: int, max_steps: int, should_stop: bool, reason: str | None) -> str | None:
    """Why training ended: the reason a callback gave with ``should_stop``, the
    spent budget, or ``None`` when neither (an exception ended it)."""
    if should_stop:
        return reason or "a callback set trainer.should_stop"
    if global_step >= max_steps:
        return f"the budget of {max_steps} training steps is done"
    return reason
