"""A process of a multi-process run that died: what the survivors say and do.

When a process of a ``multi_node`` run dies (a node fails, the OOM killer,
``kill -9``), the next collective on every other process fails: gloo (CPU)
reports the closed connection, NCCL or the distributed runtime an unavailable
peer or missed heartbeats (after ``heartbeat_timeout``). :meth:`Trainer.fit`
turns that error into :class:`ProcessLost`: one line on stderr from every
survivor, naming the lost process (the other one in a 2-process run), what
was running and the last complete checkpoint, and an exit with status 1 and
no traceback. Nothing already written is touched; ``ckpt_path="last"`` resumes
from that checkpoint exactly.

A survivor in no collective at the time (writing a checkpoint, in a slow hook)
learns of the loss from its peer watch instead
(:mod:`jaxtrainer.distributed.peer_watch`, within the heartbeat timeout):
:func:`exit_lost` prints the same line and ends the process with status 1
(loggers are not closed: what they had not written yet is not written).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from jaxtrainer.runtime._signals import ACTIVITY, exit_at_once, newest_checkpoint

if TYPE_CHECKING:
    from jaxtrainer.trainer import Trainer

LOST_MARKERS = ("gloo", "connection closed", "connection reset", "heartbeat", "unavailable",
                "broken pipe", "socket closed", "nccl")
"""Words (lower case) in a runtime error's message that mean a peer is gone."""


class ProcessLost(SystemExit):
    """Raised by :meth:`Trainer.fit` on a survivor after another process of
    the run died (a ``SystemExit`` with status 1: an uncaught one ends a
    script with its one line and no traceback).

    Attributes:
      lost: who was lost (``"process 1"`` or ``"another process"``).
      checkpoint: the sentence naming the last complete checkpoint.
    """

    def __init__(self, lost: str, checkpoint: str) -> None:
        super().__init__(1)
        self.lost, self.checkpoint = lost, checkpoint


def is_lost_peer(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from (a checkpoint write that
    failed on one, say), is a runtime error of a collective whose peer is gone
    (:data:`LOST_MARKERS`); errors of the user's code are not."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in ("JaxRuntimeError", "XlaRuntimeError") and any(
                marker in str(exc).lower() for marker in LOST_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class _Reporter:
    """The checkpoint folders of the fit in progress (for a line printed from
    the peer watch's thread) and whether this process has printed its line."""

    def __init__(self) -> None:
        self.directories: Callable[[], list[Path]] = list
        self.lock = threading.Lock()
        self.printed = False


REPORTER = _Reporter()
"""Per process, as the loss it reports is."""


@contextlib.contextmanager
def fit_in_progress(directories: Callable[[], list[Path]]) -> Iterator[None]:
    """Within: a lost-process line names the newest checkpoint among ``directories()``."""
    saved, REPORTER.directories = REPORTER.directories, directories
    with REPORTER.lock:
        REPORTER.printed = False
    try:
        yield
    finally:
        REPORTER.directories = saved


def report(me: int, count: int, lost: str, cause: str, directories: list[Path]) -> str | None:
    """Print (stderr) this process's one lost-process line: ``lost`` (``"process
    1"``) while the current activity, ``cause`` (the error's first line), the
    last complete checkpoint among ``directories`` and how to resume. Returns
    the checkpoint sentence, or ``None`` when the line was already printed."""
    with REPORTER.lock:
        if REPORTER.printed:
            return None
        REPORTER.printed = True
        checkpoint = newest_checkpoint(directories)
        then = ("nothing to resume from: run the command again" if checkpoint.startswith("no ")
                else "resume with the same command and ckpt_path=last (trainer.ckpt_path=last)")
        print(f"jaxtrainer: process {me} of {count}: lost {lost} of the run while {ACTIVITY.now} "
              f"({cause[:300]}); stopping. {checkpoint[0].upper()}{checkpoint[1:]}; {then}",
              file=sys.stderr, flush=True)
        return checkpoint


def exit_lost(me: int, count: int) -> Callable[[str, str], None]:
    """The peer watch's ``on_lost`` for process ``me`` of ``count``: print the
    line (:func:`report`, the fit's checkpoint folders) and end the process
    with status 1 at once, whatever the main thread is waiting in."""

    def on_lost(lost: str, cause: str) -> None:
        try:
            report(me, count, lost, cause, REPORTER.directories())
        finally:
            exit_at_once(1)

    return on_lost


def lost_process(trainer: Trainer, exc: BaseException,
                 directories: list[Path]) -> ProcessLost | None:
    """The :class:`ProcessLost` to raise instead of ``exc`` (its line printed on
    stderr), or ``None`` when ``exc`` is not a lost peer or the run has one process.

    ``directories``: the run's checkpoint folders (every process sees them).
    """
    count, me = trainer.strategy.process_count, trainer.strategy.process_index
    if count <= 1 or not is_lost_peer(exc):
        return None
    lost = f"process {1 - me}" if count == 2 else "another process"
    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    checkpoint = report(me, count, lost, cause, directories)
    return ProcessLost(lost, checkpoint if checkpoint is not None else newest_checkpoint(directories))
