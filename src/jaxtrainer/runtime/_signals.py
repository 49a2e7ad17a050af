"""Signals and phases: what a SIGTERM/SIGINT does, and what the process says it is doing.

Signals. While ``fit`` runs (:class:`SignalHandlers`), a first SIGTERM or SIGINT
is taken the moment it arrives, even while the main thread waits inside a long
XLA compile or device call: the interpreter writes the signal number to a pipe
(:func:`signal.set_wakeup_fd`) that a watcher thread reads. The watcher says what
is running (``received SIGINT while compiling the training program; ...``); the
Trainer saves a checkpoint at the next step boundary and raises
:class:`Preempted` (exit status ``128 + signal``). A second signal (not the same one
delivered twice at once, as ``timeout`` does: :data:`REPEAT_SECONDS`) ends the
process within about 2 seconds, by that signal (:func:`end_by_signal`: a shell
shows status ``128 + signal`` again): a checkpoint write in flight gets up to
:data:`GRACE_SECONDS` to complete, what is left of an unfinished one (orbax's
``<step>.orbax-checkpoint-tmp*`` directories, step directories without their
``meta``) is removed, complete checkpoints are left as they are, the run
directory's lock is removed and the standard streams are flushed. From the
second signal on, both signals have their default action again, so a third
one ends the process even if that cleanup hangs. :class:`StopOnSignal`
(``jaxtrainer eval``) stops on the first signal.

Phases. :data:`ACTIVITY` holds what the process is doing now ("compiling the
training program", "training steps 31-40"), which the signal message names,
and prints one line per phase on stderr (terminal or log file alike) where
phase lines are on: on process 0 of a ``fit`` with a progress bar, and in
``jaxtrainer eval``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from jaxtrainer.rundir import _run_lock as run_lock
from jaxtrainer.rundir import run_layout

# Signals that ask a running ``fit`` to checkpoint and exit (preemption);
# SIGUSR1 is SLURM's warning before a time limit (``sbatch --signal=USR1@90``),
# after which the job may be requeued (:mod:`jaxtrainer.runtime._slurm`).
PREEMPTION_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")

GRACE_SECONDS = 1.0
"""How long a second signal waits for a checkpoint write in flight to complete
(seconds) before removing what is left of it."""

DEADLINE_SECONDS = 1.8
"""After a second signal the process ends within this many seconds (plus the
time to flush the standard streams), whatever the cleanup is doing."""

REPEAT_SECONDS = 0.5
"""A signal that arrives again within this many seconds of the same signal (last
counted) is the same request, not a second one. GNU ``timeout`` (without
``--foreground``) sends its signal to the command and then to the command's
process group, so a command it started gets the signal twice at once; counted
twice, that second copy would stop the process without its checkpoint. The two
copies can reach the handler a few hundred milliseconds apart on a loaded machine
(the sender or the receiving thread waits for a core). A person pressing Ctrl-C
again, after reading what the first one did, is slower than this."""


class Requests:
    """The stop requests among the signals delivered so far: a delivery of a signal
    within :data:`REPEAT_SECONDS` of the last counted one of the same signal repeats
    it and does not count. Thread-safe.

    Args:
      clock: seconds, monotonic (``time.monotonic``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.count = 0
        self._clock, self._lock = clock, threading.Lock()
        self._last: dict[int, float] = {}

    def add(self, signum: int) -> bool:
        """Record a delivery of ``signum``; True when it is a new request (``count``
        went up), False when it repeats the last one."""
        now = self._clock()
        with self._lock:
            last = self._last.get(signum)
            if last is not None and now - last < REPEAT_SECONDS:
                return False
            self._last[signum] = now
            self.count += 1
            return True


class Preempted(SystemExit):
    """Raised by :meth:`Trainer.fit` after a SIGTERM or SIGINT: a checkpoint of the
    step boundary after the signal is on disk and the loggers are closed.

    A ``SystemExit`` (exit status ``128 + signal number``: 143 for SIGTERM, 130
    for SIGINT), so an uncaught one ends a script without a traceback; rerun with
    ``ckpt_path="last"`` to finish the budget.

    Attributes:
      signum: the signal received.
      step: global training step of the checkpoint.
      checkpoint: path of the checkpoint's step directory.
    """

    def __init__(self, signum: int, step: int, checkpoint: str) -> None:
        super().__init__(128 + int(signum))
        self.signum, self.step, self.checkpoint = int(signum), step, checkpoint

    def __str__(self) -> str:
        return (f"stopped by {signal.Signals(self.signum).name} at step {self.step}; "
                f"checkpoint {self.checkpoint}")


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def say(text: str, prefix: str = "jaxtrainer") -> None:
    """Print ``<prefix>: <text>`` on stderr and flush (a closed stream is ignored)."""
    try:
        print(f"{prefix}: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class Activity:
    """What this process is doing now, and the phase lines.

    Where lines are on (:meth:`showing`), a phase that prints nothing for
    ``heartbeat_seconds`` gets a line of its own, ``jaxtrainer: still <phase>
    (0:01:30)``, and again every ``heartbeat_seconds``: piped output (SLURM,
    ``nohup``) is never silent for longer, whatever is slow (a compile, a host
    environment, a long fused call). Progress lines count as heard
    (:meth:`heard`).

    Attributes:
      now: the current phase as the signal messages name it, e.g. ``"compiling
        the training program"``.
      lines: whether :meth:`enter` prints its line (see :meth:`showing`).
      prefix: what a phase line starts with (``jaxtrainer``).
      heartbeat_seconds: the longest silence where lines are on (seconds).
    """

    heartbeat_seconds = 30.0

    def __init__(self) -> None:
        self.now, self.lines, self.prefix = "starting", False, "jaxtrainer"
        self._since = self._heard = time.monotonic()

    def enter(self, now: str, line: str | None = None) -> None:
        """Make ``now`` the current phase; print ``line`` (when given) as a
        phase line where lines are on."""
        self.now, self._since = now, time.monotonic()
        if line is not None and self.lines:
            self.note(line)

    def note(self, line: str) -> None:
        """Print ``line`` as a phase line where lines are on, leaving the phase as it is
        (from any thread)."""
        if self.lines:
            say(line, self.prefix)
            self.heard()

    def heard(self) -> None:
        """A line was just printed (a progress line): the silence starts again."""
        self._heard = time.monotonic()

    def _heartbeat(self, stop: threading.Event) -> None:
        while not stop.wait(min(1.0, self.heartbeat_seconds / 4)):
            now = time.monotonic()
            if self.lines and now - self._heard >= self.heartbeat_seconds:
                seconds = int(now - self._since)
                say(f"still {self.now} ({seconds // 3600}:{seconds // 60 % 60:02d}:"
                    f"{seconds % 60:02d})", self.prefix)
                self._heard = now

    @contextlib.contextmanager
    def showing(self, lines: bool, prefix: str = "jaxtrainer") -> Iterator[Activity]:
        """Within the block, phase lines are printed when ``lines`` is true,
        starting with ``prefix``, with a heartbeat line after each silence of
        ``heartbeat_seconds``; the previous setting (and phase) come back after."""
        saved = self.now, self.lines, self.prefix
        self.lines, self.prefix = bool(lines), prefix
        stop, beat = threading.Event(), None
        if self.lines:
            self.heard()
            beat = threading.Thread(target=self._heartbeat, args=(stop,), daemon=True,
                                    name="jaxtrainer-heartbeat")
            beat.start()
        try:
            yield self
        finally:
            stop.set()
            if beat is not None:
                beat.join()
            self.now, self.lines, self.prefix = saved


ACTIVITY = Activity()
"""The process's current phase (signals are per process, and so is this)."""


class Every:
    """Rate limit for progress lines: :meth:`due` is true at the first call and
    then once at least ``seconds`` have passed since it was last true."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self._last = float(seconds), None

    def due(self) -> bool:
        now = time.monotonic()
        if self._last is None or now - self._last >= self.seconds:
            self._last = now
            return True
        return False


TRASH_PREFIX = ".jaxtrainer-removing-"
"""Name prefix of a partial checkpoint moved aside to be removed."""

BLOCK_SECONDS = 0.1
"""How long the files standing in for removed partial checkpoints stay (seconds),
so that a writer still running fails instead of creating them again."""


def partial_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """What an unfinished checkpoint write left in a checkpoints directory:
    orbax's ``*.orbax-checkpoint-tmp*`` entries and step directories without
    their ``meta`` (complete checkpoints always have it)."""
    root = Path(directory)
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    return [p for p in entries if not p.name.startswith(".") and (
        run_layout.is_orbax_tmp(p.name)
        or (p.name.isdigit() and p.is_dir() and not (p / "meta").exists()))]


def _move_aside(path: Path, trash: list[Path]) -> bool:
    """Rename ``path`` to a hidden name (appended to ``trash``) and put an empty
    file in its place, which a writer still running cannot create directories
    in (it fails rather than writing the partial checkpoint again); False when
    ``path`` is gone or came back at once."""
    moved = path.with_name(f"{TRASH_PREFIX}{os.getpid()}-{len(trash)}")
    try:
        path.rename(moved)
    except OSError:
        return False
    trash.append(moved)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return False
    return True


def _wait_for_writes(directories: list[Path], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(partial_checkpoints(d) for d in directories) and time.monotonic() < deadline:
        time.sleep(0.05)


def remove_partial_checkpoints(directories: Iterable[str | os.PathLike],
                               grace_seconds: float | None = None) -> None:
    """Wait up to ``grace_seconds`` (default :data:`GRACE_SECONDS`) for
    checkpoint writes in flight under ``directories`` to complete, then remove
    what :func:`partial_checkpoints` finds, and the directories themselves where
    nothing is left in them. Complete checkpoints are never touched.

    A writer may still be running (an orbax thread): each partial entry is moved
    aside and replaced by an empty file, so the writer fails instead of writing
    it again (and can never commit it); passes :data:`BLOCK_SECONDS` apart
    repeat until two find nothing new, then the blockers are removed."""
    directories = [Path(d) for d in directories]
    _wait_for_writes(directories, GRACE_SECONDS if grace_seconds is None else grace_seconds)
    blockers: list[Path] = []
    trash: list[Path] = []
    quiet = 0
    while quiet < 2:  # until two passes BLOCK_SECONDS apart find nothing but the blockers
        found = [p for d in directories for p in partial_checkpoints(d) if p not in blockers]
        blockers += [p for p in found if _move_aside(p, trash)]
        quiet = 0 if found else quiet + 1
        if quiet < 2:
            time.sleep(BLOCK_SECONDS)
    for directory in directories:  # what was moved aside (also by an earlier run)
        for path in (directory.glob(f"{TRASH_PREFIX}*") if directory.is_dir() else ()):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else _unlink(path)
    for path in blockers:
        if not path.is_dir():
            _unlink(path)
    for directory in directories:
        with contextlib.suppress(OSError):
            directory.rmdir()  # only succeeds when empty


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def default_action(signums: Iterable[int]) -> None:
    """Give ``signums`` their default action (ending the process) at the C
    level, from any thread (``signal.signal`` works in the main thread only), so
    a later signal ends the process even when no Python code runs any more.
    Best effort: nothing changes where libc cannot be loaded."""
    try:
        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        for signum in signums:
            libc.signal(int(signum), None)  # NULL is SIG_DFL
    except (OSError, AttributeError, TypeError):
        pass


def _silence_stderr() -> int | None:
    """Flush the standard streams, point file descriptor 2 at ``/dev/null``
    (threads cut off by the exit, such as a checkpoint writer, print no
    traceback) and return a copy of the old stderr descriptor, or None."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        kept = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
    except OSError:
        return None
    return kept


def exit_at_once(status: int) -> NoReturn:
    """End the process with ``status`` at once, from any thread: the run
    directory locks it holds are removed (:func:`jaxtrainer.rundir._run_lock.release_held`)
    and the standard streams flushed (a closed pipe or stream is skipped); no
    exit handler runs and no other thread is waited for (``os._exit``). For a
    rank that failed, a finished recipe whose exit handlers already ran, and a
    survivor whose main thread waits in the runtime for a process that died."""
    with contextlib.suppress(OSError):
        run_lock.release_held()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (| head) or stream: nothing to keep
            pass
    os._exit(status)


def exit_now(status: int = 0) -> NoReturn:
    """End the process with ``status`` as a normal exit does, less the
    interpreter's teardown: how a ``jaxtrainer`` command or a recipe script ends
    (:func:`jaxtrainer.runtime._startup.run_and_exit`).

    A normal exit joins the threads that are not daemons, runs the ``atexit``
    handlers (wandb, orbax and ``jax.distributed`` finish there), flushes the
    standard streams, then finalizes every module and XLA's runtime, which
    after a recipe run takes about a second on 2 CPU cores and writes nothing.
    This function does the first three and skips the last (:func:`exit_at_once`).
    With a thread other than daemons still running it raises
    ``SystemExit(status)`` instead, so the interpreter waits for it as usual.
    Files a run writes are closed by then: the Trainer's ``teardown`` hooks
    close the loggers and wait for the checkpoints. Tools that act after the
    script returns (``python -m cProfile -o``, ``pdb``) see nothing of it: call
    the command in-process under them (``jaxtrainer.commands._cli.main([...])``
    returns its status).
    """
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if others:
        raise SystemExit(status)
    atexit._run_exitfuncs()  # what the interpreter runs first at exit
    exit_at_once(status)


def end_by_signal(signum: int, clean_up: Callable[[], str | None],
                  deadline_seconds: float | None = None, prefix: str = "jaxtrainer") -> None:
    """End the process by ``signum`` once ``clean_up()`` returns, or after
    ``deadline_seconds`` (default :data:`DEADLINE_SECONDS`) whatever it is
    doing. The signals of :data:`PREEMPTION_SIGNALS` get their default action
    first (a further one ends the process at once) and the standard streams
    are flushed; stderr then shows only ``<prefix>: <line>``, the line
    ``clean_up`` returns (if any). The run directory locks the process holds
    are removed (:func:`jaxtrainer.rundir._run_lock.release_held`), whether or
    not ``clean_up`` finished. Then the process sends itself ``signum`` (a
    shell shows status ``128 + signum``, a parent's ``subprocess`` a return
    code of ``-signum``; no exit handler runs). Callable from any thread; never
    returns."""
    default_action(getattr(signal, name) for name in PREEMPTION_SIGNALS)
    stderr = _silence_stderr()

    def last_words() -> None:
        line = clean_up()
        if line and stderr is not None:
            with contextlib.suppress(OSError):
                os.write(stderr, f"{prefix}: {line}\n".encode())

    worker = threading.Thread(target=last_words, name="jaxtrainer-exit", daemon=True)
    worker.start()
    worker.join(DEADLINE_SECONDS if deadline_seconds is None else deadline_seconds)
    with contextlib.suppress(OSError):  # the run is no longer written: another may take it
        run_lock.release_held()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
    os.kill(os.getpid(), int(signum))
    time.sleep(1.0)  # the default action could not be restored (no libc): end it anyway
    os.kill(os.getpid(), signal.SIGKILL)


class _Watcher:
    """Reads the signal numbers the interpreter's C-level handler writes to the
    wakeup file descriptor, in a daemon thread, and calls ``react(signum)`` for
    each of ``signums`` the moment it arrives (the main thread may be inside a
    compile). Bytes for other signals are passed on to the previous wakeup fd.
    Create it in the main thread (``ValueError`` elsewhere)."""

    def __init__(self, signums: set[int], react: Callable[[int], None]) -> None:
        self._signums, self._react = signums, react
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        try:
            self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        except ValueError:
            os.close(self._read)
            os.close(self._write)
            raise
        self._thread = threading.Thread(target=self._loop, name="jaxtrainer-signals", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                data = os.read(self._read, 64)
            except OSError:
                return
            if not data:  # closed
                return
            for signum in data:
                if signum in self._signums:
                    self._react(signum)
                elif self._previous >= 0:
                    with contextlib.suppress(OSError):
                        os.write(self._previous, bytes([signum]))

    def close(self) -> None:
        """Give the wakeup fd back and end the thread."""
        signal.set_wakeup_fd(self._previous)
        os.close(self._write)  # the reader sees the end of the pipe
        self._thread.join(timeout=1.0)
        with contextlib.suppress(OSError):
            os.close(self._read)


class _Installed:
    """Python-level handlers for :data:`PREEMPTION_SIGNALS` plus a
    :class:`_Watcher` (main thread only; elsewhere nothing changes), restored on
    :meth:`restore`."""

    def __init__(self, handler: Callable[[int, Any], None],
                 react: Callable[[int], None] | None) -> None:
        self.previous: dict[int, Any] = {}
        self.watcher: _Watcher | None = None
        if threading.current_thread() is not threading.main_thread():
            return
        signums = {getattr(signal, name) for name in PREEMPTION_SIGNALS}
        # Held while the handlers go in: a signal between two installs would
        # otherwise meet the old handler of the second (Python's
        # KeyboardInterrupt, a traceback); held, it reaches the new one.
        mask = getattr(signal, "pthread_sigmask", None)  # POSIX only
        held = mask(signal.SIG_BLOCK, signums) if mask else None
        try:
            for signum in sorted(signums):
                try:
                    self.previous[signum] = signal.signal(signum, handler)
                except (ValueError, OSError):  # not allowed here (e.g. embedded interpreter)
                    pass
        finally:
            if mask:
                mask(signal.SIG_SETMASK, held)
        if react is not None and self.previous:
            with contextlib.suppress(ValueError, OSError):
                self.watcher = _Watcher(set(self.previous), react)

    def restore(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
        for signum, old in self.previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)
        self.previous = {}


def interactive() -> bool:
    """Whether Python runs interactively (a REPL or a Jupyter kernel), where a
    second signal should interrupt the call rather than end the process."""
    return hasattr(sys, "ps1") or "ipykernel" in sys.modules


class SignalHandlers:
    """Context manager: while active (main thread only; elsewhere nothing
    changes), a first SIGTERM/SIGINT calls ``on_signal(signum)`` and says what is
    running (see the module docstring); a second one ends the process within
    about 2 seconds, by that signal (:func:`end_by_signal`), after removing what an
    unfinished checkpoint write left under ``checkpoint_dirs()`` (complete
    checkpoints stay). With ``hard_exit`` False (the default in a REPL or
    Jupyter), the second signal raises ``KeyboardInterrupt`` in the main thread
    instead, once Python code runs there again. The previous handlers are
    restored on exit.

    Args:
      on_signal: records the signal (the Trainer sets ``received_signal``).
      received: returns the signal already recorded, or None.
      announce: print the messages (process 0 only).
      checkpoint_dirs: the checkpoint directories of the run (read at the
        second signal).
      hard_exit: ``None``: True unless :func:`interactive`.
    """

    def __init__(self, on_signal: Callable[[int], None], received: Callable[[], int | None],
                 announce: bool, checkpoint_dirs: Callable[[], Iterable[str | os.PathLike]] = tuple,
                 hard_exit: bool | None = None) -> None:
        self._on_signal, self._received, self._announce = on_signal, received, announce
        self._checkpoint_dirs = checkpoint_dirs
        self.hard_exit = not interactive() if hard_exit is None else bool(hard_exit)
        self._lock = threading.Lock()
        self._recorded, self._handled, self._watched = False, Requests(), Requests()
        self._installed: _Installed | None = None

    def _record(self, signum: int) -> None:
        """The first signal: record it and say what happens (once)."""
        with self._lock:
            if self._recorded:
                return
            self._recorded = True
        self._on_signal(signum)
        if self._announce:
            name = signal_name(signum)
            say(f"received {name} while {ACTIVITY.now}; saving a checkpoint once that is done, "
                f"at the next step boundary, then stopping (send {name} again to stop at once, "
                "keeping the last complete checkpoint)")

    def _handle(self, signum: int, frame: Any) -> None:
        """The Python-level handler (main thread, between bytecodes)."""
        if not self._handled.add(signum):
            return  # the same request delivered again (see REPEAT_SECONDS)
        if self._installed is not None and self._installed.watcher is not None:
            if self._handled.count == 1:
                self._record(signum)  # the watcher counts; recording here is just sooner
                return
            # a later signal: the watcher ends the process; the main thread starts
            # nothing more (no new checkpoint write) meanwhile
            threading.Event().wait(DEADLINE_SECONDS + 2.0)
            return
        if self._handled.count == 1 and self._received() is None:
            self._record(signum)
        elif self.hard_exit:
            self._stop_now(signum)
        else:
            raise KeyboardInterrupt(f"second signal {signal_name(signum)}")

    def _watch(self, signum: int) -> None:
        """The watcher thread: every signal, the moment it arrives."""
        if not self._watched.add(signum):
            return  # the same request delivered again (see REPEAT_SECONDS)
        if self._watched.count == 1:
            self._record(signum)
        else:
            self._stop_now(signum)

    def _stop_now(self, signum: int) -> None:
        now = ACTIVITY.now

        def clean_up() -> str | None:
            directories = [Path(d) for d in self._checkpoint_dirs() if d]
            remove_partial_checkpoints(directories)
            return (f"second {signal_name(signum)}: stopped at once while {now}; "
                    f"{newest_checkpoint(directories)}") if self._announce else None

        end_by_signal(signum, clean_up)

    def __enter__(self) -> SignalHandlers:
        self._recorded, self._handled, self._watched = False, Requests(), Requests()
        self._installed = _Installed(self._handle, self._watch if self.hard_exit else None)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed is not None:
            self._installed.restore()
            self._installed = None


def newest_checkpoint(directories: list[Path]) -> str:
    """``the last complete checkpoint is <path>`` (newest by step, among
    ``directories``), or that there is none."""
    newest: tuple[int, Path] | None = None
    for directory in directories:
        with contextlib.suppress(OSError):
            for p in directory.iterdir():
                if p.name.isdigit() and (p / "meta").exists() and (newest is None or int(p.name) > newest[0]):
                    newest = int(p.name), p
    return ("no checkpoint was written" if newest is None
            else f"the last complete checkpoint is {newest[1]}")


class StopOnSignal:
    """Context manager for commands that write nothing worth saving (``jaxtrainer
    eval``): the first SIGTERM/SIGINT, even during a compile, says what was
    running, calls ``clean_up()`` (e.g. remove a half-written video) and ends
    the process by that signal (:func:`end_by_signal`, within about 2
    seconds). Main thread only; elsewhere nothing changes.

    Args:
      clean_up: called once before exiting (at most :data:`DEADLINE_SECONDS`).
      prefix: what the message starts with.
    """

    def __init__(self, clean_up: Callable[[], Any] = lambda: None,
                 prefix: str = "jaxtrainer") -> None:
        self._clean_up, self._prefix = clean_up, prefix
        self._lock = threading.Lock()
        self._stopping = False
        self._installed: _Installed | None = None

    def _stop(self, signum: int, frame: Any = None) -> None:
        with self._lock:
            if self._stopping:
                return
            self._stopping = True

        say(f"received {signal_name(signum)} while {ACTIVITY.now}; stopping", self._prefix)

        end_by_signal(signum, self._clean_up, prefix=self._prefix)

    def __enter__(self) -> StopOnSignal:
        self._installed = _Installed(self._stop, self._stop)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed is not None:
            self._installed.restore()
            self._installed = None
