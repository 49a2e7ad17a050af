"""ProfilerCallback: a ``jax.profiler`` trace of chosen training steps and a
summary of where a ``fit``'s wall time went."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.model_checkpoint import ModelCheckpoint
from jaxtrainer.rundir import run_layout

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer

PHASES = ("startup", "device compute", "host callbacks", "logging", "checkpointing", "profiler",
          "shutdown")
"""The phases of :attr:`ProfilerCallback.summary`, in the order printed."""


def _check_steps(steps: Any) -> tuple[int, int] | None:
    """``steps`` as ``(a, b)``: two ints, ``0 <= a < b``; ``None`` passes.

    Raises:
      ValueError: anything else, naming the value.
    """
    if steps is None:
        return None
    ok = (isinstance(steps, (list, tuple)) and len(steps) == 2
          and all(isinstance(s, int) and not isinstance(s, bool) for s in steps))
    if not ok or not 0 <= steps[0] < steps[1]:
        raise ValueError(f"steps={steps!r}: expected [a, b], two training steps with 0 <= a < b "
                         "(e.g. [10, 20]), or None (no trace)")
    return int(steps[0]), int(steps[1])


class ProfilerCallback(Callback):
    """Trace training steps ``a..b`` with ``jax.profiler`` and, at the end of
    ``fit``, print how its wall time divides into phases (as Lightning's
    ``SimpleProfiler``).

    **The trace.** ``jax.profiler.start_trace`` at the step boundary before the
    training call that runs step ``a`` (1-based: the ``a``-th ``training_step``),
    ``stop_trace`` at the first boundary at or after step ``b``. The Trainer
    fuses ``log_every_n_steps`` steps into one compiled call (and, with
    ``sync_every_n_seconds``, several log intervals), and a trace starts or
    stops only between calls: steps ``a..b`` therefore map to the whole calls
    covering them. From ``a - log_every_n_steps`` on, this callback asks for
    every log boundary (:meth:`needs_state`), so calls in the window are one
    log interval each; with ``log_every_n_steps=10``, ``steps=[10, 20]`` traces
    the calls of steps 1-10 and 11-20. The trace is written by process 0 under
    ``dirpath`` in TensorBoard's profile-plugin layout,
    ``<dirpath>/plugins/profile/<timestamp>/<host>.xplane.pb`` (``tensorboard
    --logdir <dirpath>``, Profile tab; ``pip install "jaxtrainer[profile]"``),
    with a ``<host>.trace.json.gz`` beside it that Perfetto (ui.perfetto.dev)
    opens. A run that ends (or resumes) past ``b`` before the trace started
    writes none and says so in one line.

    **The summary** (:attr:`summary`, printed by process 0 at ``teardown``):
    seconds from ``setup`` to ``teardown`` in these phases, which add up to
    ``wall``:

    * ``startup``: the Trainer's own time before training (building or
      restoring the state, compiling the programs);
    * ``device compute``: the Trainer's own time during training: dispatching
      the training (and evaluation) calls and waiting for their results, i.e.
      device compute plus the host sync;
    * ``host callbacks``, ``logging`` (:class:`~jaxtrainer.loggers.Logger`
      hooks), ``checkpointing`` (:class:`ModelCheckpoint` hooks): time inside
      callback hooks, from ``Trainer.hook_seconds``;
    * ``profiler``: this callback's own hooks (starting and writing the trace);
    * ``shutdown``: the Trainer's own time after training.

    ``compile`` (``trainer.compile_seconds``, included in ``startup`` or, for
    a program compiled in the background, overlapping other phases) is
    reported beside them, not summed. A PopulationTrainer's
    ``on_generation_end`` hooks are not timed separately (they count as
    ``device compute``).

    Args:
      steps: ``[a, b]``, training steps (global, counted from the run's start)
        to trace, ``0 <= a < b``; ``None`` (default): no trace, the summary only.
      dirpath: where the trace goes; default ``<run_dir>/tensorboard`` (beside
        the TensorBoardLogger's event files).

    Attributes:
      summary: ``{phase: seconds}`` for :data:`PHASES`, ``"wall"`` and
        ``"compile"`` (float seconds), set at ``teardown``.
      trace_dir: the ``plugins/profile/<timestamp>`` directory written, or ``None``.

    Raises:
      ValueError: ``steps`` is not two ints ``0 <= a < b``.
    """

    order = -1000  # first: its setup starts the clock before any other callback's setup

    def __init__(self, steps: list[int] | tuple[int, int] | None = None,
                 dirpath: str | os.PathLike | None = None) -> None:
        self.steps = _check_steps(steps)
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.summary: dict[str, float] = {}
        self.trace_dir: str | None = None
        self._reset()

    def _reset(self) -> None:
        self._marks: dict[str, tuple[float, float]] = {}  # hook -> (time, hook seconds so far)
        self._tracing: str | None = None  # the directory while a trace runs
        self._traced: tuple[int, int] | None = None
        self._done = self.steps is None
        self._before: set[str] = set()  # profile runs already in the directory
        self._hooks_before: dict[tuple[int, str], float] = {}  # hook seconds before this run

    # -- timing ----------------------------------------------------------------
    def _hooks_total(self, trainer: Trainer) -> float:
        return sum(self._hook_seconds(trainer).values())

    def _hook_seconds(self, trainer: Trainer) -> dict[tuple[int, str], float]:
        """Seconds per ``(id(callback), hook)`` since this run's ``setup``."""
        before = self._hooks_before
        return {k: s - before.get(k, 0.0) for k, s in trainer.hook_seconds.items()}

    def _mark(self, trainer: Trainer, name: str) -> None:
        self._marks[name] = (time.perf_counter(), self._hooks_total(trainer))

    def _trainer_time(self, start: str, end: str) -> float:
        (t0, h0), (t1, h1) = self._marks[start], self._marks[end]
        return max(t1 - t0 - (h1 - h0), 0.0)

    def _summarise(self, trainer: Trainer) -> dict[str, float]:
        self._mark(trainer, "teardown")
        marks = self._marks
        train_start = "on_train_start" if "on_train_start" in marks else "teardown"
        train_end = "on_train_end" if "on_train_end" in marks else "teardown"
        from jaxtrainer.loggers.base import Logger  # loggers import callbacks: not at module level

        by_id = {id(cb): cb for cb in trainer.callbacks}
        phases = dict.fromkeys(PHASES, 0.0)
        phases["startup"] = self._trainer_time("setup", train_start)
        phases["device compute"] = self._trainer_time(train_start, train_end)
        phases["shutdown"] = self._trainer_time(train_end, "teardown")
        for (cb_id, _), seconds in self._hook_seconds(trainer).items():
            cb = by_id.get(cb_id)
            phase = ("profiler" if cb is self else "logging" if isinstance(cb, Logger)
                     else "checkpointing" if isinstance(cb, ModelCheckpoint) else "host callbacks")
            phases[phase] += seconds
        phases["wall"] = marks["teardown"][0] - marks["setup"][0]
        phases["compile"] = float(sum(trainer.compile_seconds.values()))
        return phases

    # -- the trace ---------------------------------------------------------------
    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return not self._done and step >= self.steps[0] - trainer.planner.log_every_n_steps

    def _boundary(self, trainer: Trainer) -> None:
        """Start or stop the trace at a boundary between training calls."""
        if self._done or trainer.state_ahead or trainer.more_metrics_pending:
            return
        a, b = self.steps
        step = trainer.global_step
        if self._tracing is None and step >= b:
            self._done = True
            if trainer.is_global_zero:
                print(f"jaxtrainer: ProfilerCallback: no trace: training is at step {step}, past "
                      f"steps [{a}, {b}]", flush=True)
        elif self._tracing is None and step >= a - trainer.planner.log_every_n_steps:
            self._start_trace(trainer)
        elif self._tracing is not None and step >= b:
            self._stop_trace(trainer)

    def _start_trace(self, trainer: Trainer) -> None:
        import jax

        self._traced = (trainer.global_step + 1, trainer.global_step)
        if not trainer.is_global_zero:
            self._tracing = ""
            return
        directory = self.dirpath or os.path.join(trainer.log_dir, run_layout.TENSORBOARD_DIR)
        os.makedirs(directory, exist_ok=True)
        before = set(_profile_runs(directory))
        jax.profiler.start_trace(directory)
        self._tracing = directory
        self._before = before

    def _stop_trace(self, trainer: Trainer) -> None:
        import jax

        directory, self._tracing, self._done = self._tracing, None, True
        self._traced = (self._traced[0], trainer.global_step)
        if not directory:  # not process 0
            return
        jax.profiler.stop_trace()
        new = sorted(set(_profile_runs(directory)) - self._before)
        self.trace_dir = new[-1] if new else None
        first, last = self._traced
        print(f"jaxtrainer: ProfilerCallback: trace of steps {first}-{last} in "
              f"{self.trace_dir or directory} (tensorboard --logdir {directory}: Profile tab; "
              "the .trace.json.gz opens in ui.perfetto.dev)", flush=True)

    # -- hooks -------------------------------------------------------------------
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """A new run: time it from here (the hooks' seconds counted from now on)."""
        for left in [cb for cb in trainer.callbacks if isinstance(cb, _Finish)]:
            trainer.remove_callback(left)  # an earlier fit's, whose teardown was cut short
        self.summary, self.trace_dir = {}, None
        self._reset()
        self._hooks_before = dict(trainer.hook_seconds)
        self._mark(trainer, "setup")

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        self._mark(trainer, "on_train_start")
        if not self._done and trainer.max_steps and self.steps[0] >= trainer.max_steps:
            self._done = True  # said now, not after a run that could never reach them
            if trainer.is_global_zero:
                print(f"jaxtrainer: ProfilerCallback: no trace: steps {list(self.steps)} start "
                      f"at or after the end of training (max_steps={trainer.max_steps}); "
                      f"choose steps below it", file=sys.stderr, flush=True)
        self._boundary(trainer)

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._boundary(trainer)

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        self._mark(trainer, "on_train_end")  # before this hook's own time (the profiler's)
        if self._tracing is not None:
            self._stop_trace(trainer)

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        if self._tracing:
            import jax

            self._tracing = None
            jax.profiler.stop_trace()

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Runs first; the summary is made after the last callback's ``teardown``
        (a ``_Finish`` added last to ``trainer.callbacks``, which the Trainer's
        loop over them reaches last), so closing the loggers and waiting for
        checkpoint writes are counted."""
        if "setup" in self._marks:
            trainer.add_callback(_Finish(self))

    def finish(self, trainer: Trainer) -> None:
        """Make, store and print (process 0) the summary; stop timing hooks."""
        self.summary = self._summarise(trainer)
        if trainer.is_global_zero:
            print(_format_summary(self.summary), file=sys.stdout, flush=True)


class _Finish(Callback):
    """The end of a :class:`ProfilerCallback`'s window: its ``teardown`` runs
    after every other callback's, then it leaves ``trainer.callbacks``."""

    order = 2**62  # after every other callback

    def __init__(self, profiler: ProfilerCallback) -> None:
        self.profiler = profiler

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        trainer.remove_callback(self)
        self.profiler.finish(trainer)


def _profile_runs(directory: str) -> list[str]:
    """The ``plugins/profile/<run>`` directories under ``directory``."""
    root = os.path.join(directory, "plugins", "profile")
    return [os.path.join(root, n) for n in os.listdir(root)] if os.path.isdir(root) else []


def _format_summary(summary: dict[str, float]) -> str:
    """The summary table: one line per phase with seconds and share of the wall time."""
    wall = max(summary["wall"], 1e-9)
    width = max(map(len, PHASES))
    lines = [f"jaxtrainer: ProfilerCallback: {summary['wall']:.2f} s from setup to teardown"]
    lines += [f"  {p:<{width}}  {summary[p]:8.3f} s  {100 * summary[p] / wall:5.1f} %" for p in PHASES]
    lines.append(f"  {'(compile':<{width}}  {summary['compile']:8.3f} s, within the phases above)")
    return "\n".join(lines)
