"""The first and last lines of every command: Ctrl-C during start-up, the import
path, and how the process ends.

A command (``jaxtrainer ...``, ``python recipes/<name>.py``) calls :func:`begin`
before anything heavy is imported (this module and :mod:`jaxtrainer.runtime._signals`
import the standard library only; ``import jaxtrainer`` imports no JAX).

* From then on a first SIGINT or SIGTERM is taken by a handler, never raised
  as ``KeyboardInterrupt`` inside whatever code runs at that moment: raised
  inside a library's callback (JAX's garbage-collection callback, a
  ``__del__``), Python would print ``Exception ignored in: ...`` and carry on,
  and the run would train as if never interrupted. Until the Trainer's own
  handlers take over (while ``fit`` runs: a checkpoint, then a stop), the
  process ends at once, also in the middle of a long import or compile, with
  one line on stderr (``<prog>: received SIGINT while starting; stopping``)
  and by that signal (status 130 for SIGINT, 143 for SIGTERM in a shell).
  After ``fit`` the same holds again (the run is saved and closed by then).
* The current directory is put first on ``sys.path``, as ``python -m`` does, so
  a user's own module there (a torso named by ``network.torso.class_path``)
  imports without ``PYTHONPATH``.
* When stderr is not a terminal (piped into a log file), warnings are printed
  without the terminal colour codes some libraries put in their messages.

The command's body then runs through :func:`run_and_exit`, which ends the
process with the body's status as soon as it returns, without the interpreter's
teardown (:func:`jaxtrainer.runtime._signals.exit_now`). Called in a process that
goes on (a test, a notebook), a command returns its status instead, and
:func:`freeze_imports` leaves the garbage collector as it is.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from jaxtrainer.runtime import _signals as signals

_GUARD: list[signals.StopOnSignal] = []
_ENDING: list[bool] = []
"""Holds ``True`` while :func:`run_and_exit` runs a body: the process ends with it."""


def current_directory_on_path() -> None:
    """Put the current directory first on ``sys.path`` (as ``python -m``
    does) unless it is there already."""
    cwd = os.getcwd()
    if not any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
        sys.path.insert(0, cwd)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
"""A terminal control sequence (colour, bold, cursor movement): ``ESC [ ... letter``."""


def plain_warnings(stream: Any = None) -> None:
    """Print each warning on one line, without the source line Python adds
    after it, and without :data:`ANSI_ESCAPE` sequences when ``stream``
    (default ``sys.stderr``) is not a terminal (a terminal keeps its colours)."""
    stream = sys.stderr if stream is None else stream
    if getattr(warnings.formatwarning, "plain", False):
        return
    colored, tty = warnings.formatwarning, getattr(stream, "isatty", lambda: False)()

    def formatwarning(message: Any, category: type[Warning], filename: str, lineno: int,
                      line: str | None = None) -> str:
        text = colored(message, category, filename, lineno, "")  # "": no source line
        return text if tty else ANSI_ESCAPE.sub("", text)

    formatwarning.plain = True  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning


def begin(prog: str) -> None:
    """Start a command named ``prog`` (what its lines on stderr start with):
    :func:`current_directory_on_path`, :func:`plain_warnings`, and a first
    SIGINT/SIGTERM from now on ends the process in one line (module
    docstring). Call it once, first, in
    the process's main thread, from a command only (never from a library or
    a test process: it keeps its handlers for the life of the process)."""
    current_directory_on_path()
    plain_warnings()
    if not _GUARD:
        guard = signals.StopOnSignal(prefix=prog)
        _GUARD.append(guard.__enter__())  # left only when the process ends


def run_and_exit(body: Callable[[], int | None]) -> NoReturn:
    """Run ``body()``, a command's work, and end the process with its status:
    its return value (``None``: 0), or the status of a ``SystemExit`` it raises
    (a config error's 2; a message in place of a status is printed on stderr and
    ends it with 1, as Python does); a closed pipe on stdout (``| head``) ends
    it quietly with 141, as a pipe's writer killed by SIGPIPE. The end is
    :func:`jaxtrainer.runtime._signals.exit_now`: exit handlers run, threads
    that are not daemons are waited for, the interpreter's teardown is skipped.
    Any other exception propagates (its traceback, a normal exit). While
    ``body`` runs, :func:`freeze_imports` freezes. Call it from a command only,
    in the process's main thread (a test or a notebook calls the command
    itself, which returns its status).
    """
    _ENDING.append(True)
    try:
        status = body()
    except SystemExit as e:
        status = e.code
    except BrokenPipeError:  # the reader went away (``| head``): end as a pipe's writer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 128 + signal.SIGPIPE
    finally:
        _ENDING.clear()
    if status is not None and not isinstance(status, int):
        print(status, file=sys.stderr, flush=True)
        status = 1
    signals.exit_now(status or 0)


def freeze_imports() -> None:
    """In a command that ends the process (:func:`run_and_exit`), move every
    object alive now out of the garbage collector's reach (``gc.freeze``); in a
    process that goes on (a test, a notebook), nothing. A command calls it once
    its libraries are imported: their functions, classes and tables live until
    the process ends anyway, and the collections that tracing triggers no
    longer walk them (a warm ``jaxtrainer fit ppo`` spends about half the
    time in collections; frozen before those imports, no less)."""
    if _ENDING:
        gc.freeze()
