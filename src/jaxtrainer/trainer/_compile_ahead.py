"""The compiled programs of one Trainer, compiled ahead in a background thread.

At the start of ``fit`` the training program is compiled from the state's
shapes while the main thread builds or restores the state (XLA compiles release
the GIL), so the first training call does not wait for the state, nor the state
for the compile. The evaluation program is compiled once the first training call
is enqueued (:meth:`Programs.training_dispatched`): tracing and lowering hold
the GIL, so compiled any earlier it would delay the start of training; from then
the main thread waits for the device with the GIL released. It runs at the lowest
thread priority, taking only CPU time the training loop leaves idle, and a later
evaluation does not wait for its compile. Its trace (``evaluation_step`` on abstract values, no XLA
compile) runs at once in a thread of its own, during the training compile, and
the first training call waits for it: an ``evaluation_step`` that fails to trace
(a shape error, a result that is not a dict of scalar metrics) fails the ``fit``
before training, not at its first evaluation; a compile that fails later fails
it at the next host boundary (:meth:`Programs.check_evaluation`).

Phases: where phase lines are on (:data:`jaxtrainer.runtime._signals.ACTIVITY`),
``compiling the training program ...`` when its compile starts, ``compiling
the evaluation program ...`` when one is compiled, or waited for, in the main
thread, ``still compiling ... (N s so far)`` every :data:`STILL_SECONDS` of a
compile's wall time (the training compile from its start, in the background or
not; the evaluation compile while the main thread compiles or waits for it), and
``the evaluation program is ready (compiled in N s); evaluating ...`` after a
compiling line of the evaluation program.

A ``fit`` that raises before its first training call drops the evaluation
compile; a training compile already running finishes in the background (XLA
compiles cannot be interrupted), so the interpreter's exit waits for it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import jax

from jaxtrainer.runtime._signals import ACTIVITY

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.strategies import Strategy
    from jaxtrainer.strategies._program import EvalProgram, TrainProgram


TRAIN_PHASE, EVAL_PHASE = "compiling the training program", "compiling the evaluation program"
"""The phases (see :data:`jaxtrainer.runtime._signals.ACTIVITY`) of compiling the programs."""

STILL_SECONDS = 30.0
"""While a compile runs, a ``still compiling ...`` line every this many seconds
of its wall time (where phase lines are on)."""


class Heartbeat:
    """``still <phase> (N s so far) ...`` phase lines every :data:`STILL_SECONDS`
    from ``started`` (default now) until :meth:`stop`, from a daemon thread."""

    def __init__(self, phase: str, started: float | None = None) -> None:
        self.phase = phase
        self.started = time.monotonic() if started is None else started
        self._stopped = threading.Event()
        threading.Thread(target=self._beat, name="jaxtrainer-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        beats = 1
        while not self._stopped.wait(max(0.0, self.started + beats * STILL_SECONDS
                                         - time.monotonic())):
            ACTIVITY.note(f"still {self.phase} ({time.monotonic() - self.started:.0f} s so far) ...")
            beats += 1

    def stop(self, *_: Any) -> None:
        self._stopped.set()

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _lower_thread_priority() -> None:
    """Nice the calling thread (Linux: priorities are per thread) so it only uses
    CPU time the training loop leaves idle. Best effort; a no-op elsewhere."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


class Programs:
    """A Trainer's training and evaluation programs.

    Programs compiled ahead belong to the module object they were compiled for
    (another module, even of the same class, compiles its own); evaluation
    programs are kept per module object.

    Attributes:
      compile_seconds: ``{"train": s, "eval": s}`` compile times of the programs
        in use (seconds).
    """

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self.compile_seconds: dict[str, float] = {}
        self._pending: dict[str, Future] = {}
        self._pending_for: Module | None = None
        self._evaluation: dict[int, tuple[Module, EvalProgram]] = {}
        self._dispatched, self._cancelled = threading.Event(), threading.Event()

    def compile_ahead(self, module: Module, abstract_state: Any, abstract_key: Any,
                      evaluation: bool) -> None:
        """Start compiling the training program (then, with ``evaluation``, the
        evaluation program) for ``module`` in a background thread, and tracing
        the evaluation program in another. The training compile's errors
        surface, unchanged, where it is first used; the evaluation's at
        :meth:`check_evaluation`."""
        self.cancel()  # an evaluation compile of an earlier fit still waiting is not needed
        self._pending, self._pending_for = {}, module
        self._dispatched, self._cancelled = threading.Event(), threading.Event()
        if not self.strategy.jit:
            return
        ACTIVITY.enter(TRAIN_PHASE, f"{TRAIN_PHASE} ...")
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxtrainer-compile")
        self._pending["train"] = pool.submit(self.strategy.compile_train, module, abstract_state,
                                             abstract_key)
        self._pending["train"].add_done_callback(Heartbeat(TRAIN_PHASE).stop)
        if evaluation:
            dispatched, cancelled = self._dispatched, self._cancelled
            tracer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxtrainer-compile-trace")
            traced = tracer.submit(self.strategy.trace_eval, module, abstract_state, abstract_key)
            tracer.shutdown(wait=False)
            self._pending["eval_trace"] = traced

            def compile_eval_in_idle_time():
                dispatched.wait()  # the GIL is the main thread's until training is enqueued
                if cancelled.is_set():
                    return None
                _lower_thread_priority()  # training runs meanwhile: let it have the cores
                return self.strategy.compile_eval(module, abstract_state, abstract_key,
                                                  traced.result())

            self._pending["eval"] = pool.submit(compile_eval_in_idle_time)
        pool.shutdown(wait=False)

    def check_evaluation(self, module: Module, wait: bool) -> None:
        """Raise, with its own traceback, the error of the evaluation program
        compiled ahead for ``module`` as soon as it is known: with ``wait``
        (before the first training call), its trace's, waited for; without,
        its trace's or compile's if finished (at a host boundary). The error
        gains a note naming ``evaluation_step``; the failed compile is dropped,
        so a later evaluation compiles (and raises) again."""
        if self._pending_for is not module:
            return
        names = ("eval_trace",) if wait else ("eval_trace", "eval")
        for future in [self._pending.get(name) for name in names]:
            if future is None or not (wait or future.done()) or future.exception() is None:
                continue
            self._pending.pop("eval_trace", None)
            self._pending.pop("eval", None)
            error = future.exception()
            error.add_note(f"jaxtrainer: raised by {type(module).__name__}.evaluation_step when "
                           "its program was compiled ahead, before its first evaluation")
            raise error

    def training_dispatched(self) -> None:
        """The first training call is enqueued: start compiling the evaluation
        program (also started by :meth:`wait` and by the first evaluation)."""
        self._dispatched.set()

    def cancel(self) -> None:
        """Drop an evaluation compile still waiting for the first training call
        (``fit`` raised before it), so no thread is left waiting; one already
        running finishes, unused."""
        self._cancelled.set()
        self._dispatched.set()
        self._pending.pop("eval", None)
        self._pending.pop("eval_trace", None)

    def wait(self) -> None:
        """Block until the programs compiling in the background are ready."""
        self._dispatched.set()
        for future in list(self._pending.values()):
            future.exception()

    def _take(self, name: str, module: Module) -> Any:
        """The program compiled ahead for ``module`` (None if none), after
        waiting for its compile (the training compile has its own
        :class:`Heartbeat`; the evaluation compile one while waited for)."""
        future = self._pending.pop(name, None) if self._pending_for is module else None
        if name == "eval" and self._pending_for is module:
            self._pending.pop("eval_trace", None)
        if future is None:
            return None
        if name == "train" or future.done():
            return future.result()
        with Heartbeat(EVAL_PHASE):
            return future.result()

    def _phase(self, name: str, module: Module) -> str:
        """Enter the phase of compiling the ``name`` program (``"train"`` or
        ``"eval"``) when that takes time here: a line when the compile starts
        now or is still running in the background (the training compile said
        so when it started). Returns the phase before."""
        before = ACTIVITY.now
        future = self._pending.get(name) if self._pending_for is module else None
        phase = TRAIN_PHASE if name == "train" else EVAL_PHASE
        if self.strategy.jit and (future is None or not future.done()):
            started = future is not None and name == "train"
            ACTIVITY.enter(phase, None if started else f"{phase} ...")
        return before

    def _beating(self, phase: str) -> Any:
        """A :class:`Heartbeat` of ``phase`` for a compile now (none without jit)."""
        return Heartbeat(phase) if self.strategy.jit else contextlib.nullcontext()

    def train(self, module: Module, state: Any, key: jax.Array) -> TrainProgram:
        """The training program for ``module`` (compiled ahead, or now)."""
        self._phase("train", module)
        compiled = self._take("train", module)
        if compiled is None:
            with self._beating(TRAIN_PHASE):
                compiled = self.strategy.compile_train(module, state, key)
        self.compile_seconds["train"] = compiled.compile_seconds
        return compiled

    def evaluation(self, module: Module, state: Any, key: jax.Array) -> EvalProgram:
        """The evaluation program for ``module``, compiled once per module object."""
        owner, compiled = self._evaluation.get(id(module), (None, None))
        if owner is not module:  # ids of collected modules are reused: compare objects
            self._dispatched.set()  # an evaluation before any training call: compile it now
            before = self._phase("eval", module)
            compiling = ACTIVITY.now == EVAL_PHASE
            compiled = self._take("eval", module)
            if compiled is None:
                with self._beating(EVAL_PHASE):
                    compiled = self.strategy.compile_eval(module, state, key)
            self._evaluation[id(module)] = (module, compiled)
            self.compile_seconds["eval"] = compiled.compile_seconds
            ACTIVITY.enter(before, f"the evaluation program is ready (compiled in "
                                   f"{compiled.compile_seconds:.1f} s); evaluating ..."
                           if compiling else None)
        return compiled
