"""The host loop of ``Trainer.fit``: plan -> run the program -> hooks.

Each turn plans the next compiled call (:mod:`jaxtrainer.trainer._planner`), enqueues it
(asynchronously; it donates the state), fetches its metrics in one host sync and
runs the callbacks once per log interval, in step order. With run-ahead the next
call is enqueued before a call's hooks, so the devices never wait for logging.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxtrainer import metrics as metrics_lib
from jaxtrainer.callbacks import model_checkpoint
from jaxtrainer.callbacks.model_checkpoint import ModelCheckpoint
from jaxtrainer.callbacks.progress import RichProgressBar
from jaxtrainer.distributed import keys
from jaxtrainer.rundir import run_layout
from jaxtrainer.runtime import _lost_process as lost_process
from jaxtrainer.runtime._signals import ACTIVITY, Preempted, SignalHandlers, signal_name
from jaxtrainer.trainer._planner import stop_reason

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.strategies._program import TrainProgram
    from jaxtrainer.trainer import Trainer


def checkpoint_dirs(trainer: Trainer) -> list[str]:
    """The directories ``trainer``'s checkpoints go to in this ``fit``: every
    :class:`ModelCheckpoint`'s ``dirpath`` (once set up) and the directory a
    preemption without one saves to (``<log_dir>/checkpoints``)."""
    found = [getattr(cb, "dirpath", None) for cb in trainer.callbacks
             if isinstance(cb, ModelCheckpoint)]
    if trainer.log_dir:
        found.append(os.path.join(trainer.log_dir, run_layout.CHECKPOINTS_DIR))
    return [os.fspath(d) for d in found if d]


def checkpoint_paths(trainer: Trainer) -> list[Path]:
    """:func:`checkpoint_dirs` as paths."""
    return [Path(d) for d in checkpoint_dirs(trainer)]


@contextlib.contextmanager
def signals_and_phases(trainer: Trainer) -> Iterator[None]:
    """The signal handlers of one ``fit`` (:class:`SignalHandlers`: a first
    signal checkpoints at the next boundary, a second ends the process), and
    phase lines on stderr from process 0 when ``trainer`` has a progress bar."""
    lines = trainer.is_global_zero and any(isinstance(cb, RichProgressBar)
                                           for cb in trainer.callbacks)
    handlers = SignalHandlers(  # only process 0 writes checkpoints, and only it cleans up
        lambda signum: setattr(trainer, "received_signal", signum), lambda: trainer.received_signal,
        trainer.is_global_zero, lambda: checkpoint_dirs(trainer) if trainer.is_global_zero else [])
    with ACTIVITY.showing(lines), handlers, \
            lost_process.fit_in_progress(lambda: checkpoint_paths(trainer)):
        ACTIVITY.enter("preparing the run")
        yield


def first_call_line(trainer: Trainer, plan: list[int]) -> str:
    """The phase line of the first training call of a ``fit``: the compile
    time and the steps it runs before the first progress line."""
    seconds = trainer.compile_seconds.get("train")
    compiled = "" if seconds is None else f" (compiled in {seconds:.1f} s)"
    start = trainer.global_step
    return (f"the training program is ready{compiled}; running "
            f"{steps_text(start, start + sum(plan))} of {trainer.max_steps} ...")


def steps_text(start: int, end: int) -> str:
    """``training step 5`` or ``training steps 5-8``: the steps after ``start`` up to ``end``."""
    return f"training step {end}" if end == start + 1 else f"training steps {start + 1}-{end}"


@dataclass(frozen=True)
class Call:
    """One enqueued training call: ``lengths[j]`` steps per log interval from
    step ``start``; its ``metrics`` are still being computed."""

    metrics: Any
    start: int
    lengths: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + sum(self.lengths)


class FitLoop:
    """Runs the training steps of one ``fit`` on ``trainer`` (its counters,
    state, callbacks and planner), from ``trainer.global_step`` to the budget or
    a stop.

    Attributes:
      seconds_per_step: device seconds per training step of the last call
        (``None`` before the first), which sizes the next fused call.
      partial: the metrics of the log interval in progress, pooled over the
        segments run since its start (``None`` at a log step).
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.seconds_per_step: float | None = None
        self.partial: dict[str, metrics_lib.Metric] | None = None

    def needs_state(self, module: Module, step: int) -> bool:
        """Whether the host must hold the state of ``step`` (beyond the budget
        and evaluations the planner knows): a stop or signal pending, or a
        callback whose :meth:`~jaxtrainer.Callback.needs_state` is True."""
        t = self.trainer
        return (t.should_stop or t.received_signal is not None
                or any(cb.needs_state(t, module, step) for cb in t.callbacks))

    def plan(self, module: Module, start: int) -> list[int]:
        t = self.trainer
        if start >= t.max_steps or t.should_stop:
            return []
        return t.planner.plan(start, self.seconds_per_step, lambda s: self.needs_state(module, s))

    def dispatch(self, program: TrainProgram, key: jax.Array, start: int, plan: list[int]) -> Call:
        """Enqueue one call running ``plan`` from step ``start`` (asynchronous;
        donates the state, and ``trainer.state`` becomes the call's result)."""
        lengths = np.zeros(program.max_intervals, np.int32)
        lengths[:len(plan)] = plan
        ACTIVITY.enter(f"running {steps_text(start, start + sum(plan))}")
        state, metrics = program.program(self.trainer.peek_state(), key, np.int32(start), lengths)
        self.trainer.state = state
        return Call(metrics, start, tuple(plan))

    def run_ahead_ok(self, module: Module, boundary: int) -> bool:
        t = self.trainer
        enabled = (t.strategy.jit and t.strategy.process_count == 1 and (
            t.run_ahead is True or (t.run_ahead == "auto" and t.strategy.devices[0].platform != "cpu")))
        return t.planner.can_run_ahead(boundary, enabled, lambda s: self.needs_state(module, s))

    def run(self, module: Module) -> None:
        """``on_train_start``, then plan -> run the program -> hooks until the
        budget is spent or training stops, then ``on_train_end``."""
        t = self.trainer
        train_key = keys.stream_key(t.root_key, keys.TRAIN_STREAM)
        program = t.programs.train(module, t.peek_state(), train_key)
        t.call_hook("on_train_start", module)
        t.unfinished_hooks.replay(t, module)  # a resume after an exception in a hook
        plan = self.plan(module, t.global_step)
        if plan:
            ACTIVITY.enter("training", first_call_line(t, plan))
        # the first interval's time starts before its dispatch: a program with
        # host work (an env stepped in Python, an ordered callback) runs inside
        # the dispatch itself, and its rates would otherwise count none of it
        t.programs.check_evaluation(module, wait=True)  # a broken evaluation_step: fail now
        if plan:  # compiles end at different times: the processes start the program together
            t.rendezvous("training")
        last_time = time.perf_counter()
        current = self.dispatch(program, train_key, t.global_step, plan) if plan else None
        t.programs.training_dispatched()
        while current is not None:
            ahead = None
            if self.run_ahead_ok(module, current.end):
                ahead = self.dispatch(program, train_key, current.end, self.plan(module, current.end))
            rows = metrics_lib.rows_to_host(current.metrics, len(current.lengths),  # host sync
                                            program.metrics, False)
            now = time.perf_counter()
            seconds, last_time = now - last_time, now
            self.seconds_per_step = seconds / (current.end - current.start)
            self.interval_hooks(module, current, rows, seconds, ahead is not None)
            t.programs.check_evaluation(module, wait=False)
            if ahead is not None:
                current = ahead  # its end handles a signal or a stop request
                continue
            plan = self.at_boundary(module, self.plan(module, t.global_step))
            current = self.dispatch(program, train_key, t.global_step, plan) if plan else None
        self.flush(module)
        t.stop_reason = stop_reason(t.global_step, t.max_steps, t.should_stop, t.stop_reason)
        if t.should_stop and t.is_global_zero:
            print(f"jaxtrainer: stopping at step {t.global_step}: {t.stop_reason}", flush=True)
        t.call_hook("on_train_end", module)
        model_checkpoint.save_due(t, module)  # save_last

    def interval_hooks(self, module: Module, call: Call, rows: list[dict[str, Any]],
                       seconds: float, ahead: bool) -> None:
        """Counters, evaluation and ``on_train_steps_end`` for each segment of a
        finished call, in step order. A segment's metrics (``rows``, host
        :class:`~jaxtrainer.metrics.Metric` values) are pooled into the log
        interval in progress (:attr:`partial`) and reported at the interval's end
        (:meth:`~jaxtrainer.trainer._planner.IntervalPlanner.logs_at`), so an evaluation
        between two log steps cuts no interval; the evaluation runs at its own step."""
        t = self.trainer
        steps = call.end - call.start
        t.global_step = call.start
        ends = np.cumsum(call.lengths) + call.start
        last_row = max((j for j, end in enumerate(ends) if t.planner.logs_at(int(end))), default=-1)
        for j, (n, row) in enumerate(zip(call.lengths, rows, strict=True)):
            t.more_metrics_pending = j < last_row
            t.state_ahead = ahead or j < len(call.lengths) - 1
            t.global_step += n
            t.env_steps = t.global_step * t.env_steps_per_step
            self.partial = row if self.partial is None else metrics_lib.merge_rows(self.partial, row)
            host = None
            if t.planner.logs_at(t.global_step):
                host = self.take_row(steps / seconds)
            if not t.state_ahead and t.planner.evaluates_at(t.global_step):
                ACTIVITY.enter(f"evaluating at step {t.global_step}")
                try:
                    t.run_evaluation(module)
                except BaseException:  # the step's row reached no callback
                    if host is not None:
                        t.unfinished_hooks.record("on_train_steps_end", host, t.callbacks)
                    raise
            if host is not None:
                self.report(module, host)
        t.state_ahead = t.more_metrics_pending = False

    def take_row(self, steps_per_second: float) -> dict[str, float]:
        """The log row of the interval in progress, ending at the current step:
        its pooled metrics as floats plus ``step``, ``env_steps`` and the
        throughput; :attr:`partial` starts afresh."""
        t = self.trainer
        host = metrics_lib.finish_row(self.partial or {})
        self.partial = None
        host.update(step=t.global_step, env_steps=t.env_steps, steps_per_second=steps_per_second,
                    env_steps_per_second=steps_per_second * t.env_steps_per_step)
        t.callback_metrics.update(host)
        return host

    def report(self, module: Module, host: dict[str, float]) -> None:
        """``on_train_steps_end`` with the log row ``host``, then the checkpoints
        due at this step (once every callback has seen it)."""
        t = self.trainer
        t.call_hook("on_train_steps_end", module, host)
        t.callback_metrics.update(host)  # with what callbacks added (lr, throughput)
        model_checkpoint.save_due(t, module)

    def flush(self, module: Module) -> None:
        """Report the log interval in progress when training ends between two
        log steps (a stop request or a signal at an evaluation step): its row,
        pooled over the steps it ran, at the current step."""
        if self.partial is not None and self.seconds_per_step:
            self.report(module, self.take_row(1.0 / self.seconds_per_step))

    def at_boundary(self, module: Module, plan: list[int]) -> list[int]:
        """Agree with the other processes on stopping, the signal and the next
        plan (cut to the shortest proposed: every process runs the same program
        and saves at the same boundary; one tiny all-gather per call, only with
        several processes); checkpoint and raise :class:`Preempted` when a
        signal arrived. Returns the plan to run."""
        t = self.trainer
        if t.strategy.process_count > 1:
            every = t.strategy.all_gather_host(np.array(
                [t.received_signal or 0, int(t.should_stop), len(plan)], np.int32))
            signals = every[every[:, 0] > 0, 0]
            if t.received_signal is None and signals.size:
                t.received_signal = int(signals[0])
            if every[:, 1].any() and not t.should_stop:
                t.should_stop = True
                t.stop_reason = t.stop_reason or "another process asked to stop"
            plan = plan[:int(every[:, 2].min())]
        if t.received_signal is None:
            return [] if t.should_stop else plan
        if t.global_step >= t.max_steps:  # the run is complete: finish normally
            if t.is_global_zero:
                print(f"jaxtrainer: {signal_name(t.received_signal)} arrived during the last "
                      f"steps; the budget of {t.max_steps} steps is done, finishing normally",
                      file=sys.stderr, flush=True)
            return []
        self.flush(module)
        ACTIVITY.enter(f"saving the checkpoint of step {t.global_step}")
        path = (model_checkpoint.save_now(t, module) if t.state_is_valid else
                "(none written: the state is not finite; the last good checkpoint stays)")
        raise Preempted(t.received_signal, t.global_step, path)
