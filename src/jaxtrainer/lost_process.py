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
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jaxtrainer.signals import ACTIVITY, newest_checkpoint

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
    """Whether ``exc`` is a runtime error of a collective whose peer is gone
    (:data:`LOST_MARKERS`); errors of the user's code are not."""
    if type(exc).__name__ not in ("JaxRuntimeError", "XlaRuntimeError"):
        return False
    text = str(exc).lower()
    return any(marker in text for marker in LOST_MARKERS)


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
    checkpoint = newest_checkpoint(directories)
    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    then = ("nothing to resume from: run the command again" if checkpoint.startswith("no ")
            else "resume with the same command and ckpt_path=last (trainer.ckpt_path=last)")
    print(f"jaxtrainer: process {me} of {count}: lost {lost} of the run while {ACTIVITY.now} "
          f"({cause[:300]}); stopping. {checkpoint[0].upper()}{checkpoint[1:]}; {then}",
          file=sys.stderr, flush=True)
    return ProcessLost(lost, checkpoint)
