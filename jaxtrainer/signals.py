"""Preemption: SIGTERM/SIGINT during ``fit`` become a checkpoint and a clean exit.

As Lightning's signal connector: while ``fit`` runs, the handlers installed here
record the signal; the Trainer checkpoints at the next step boundary and raises
:class:`Preempted`. A second signal raises ``KeyboardInterrupt`` at once.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

# Signals that ask a running ``fit`` to checkpoint and exit (preemption).
PREEMPTION_SIGNALS = ("SIGTERM", "SIGINT")


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


class SignalHandlers:
    """Context manager: while active (main thread only; elsewhere nothing
    changes), a first SIGTERM/SIGINT calls ``on_signal(signum)`` and a second
    raises ``KeyboardInterrupt``; the previous handlers are restored on exit.

    Args:
      on_signal: records the signal (the Trainer sets ``received_signal``).
      received: returns the signal already recorded, or None.
      announce: print the "saving a checkpoint" notice (process 0 only).
    """

    def __init__(self, on_signal: Callable[[int], None], received: Callable[[], int | None],
                 announce: bool) -> None:
        self._on_signal, self._received, self._announce = on_signal, received, announce
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self._received() is not None:  # a second signal: stop right now
            raise KeyboardInterrupt(f"second signal {signal_name(signum)}")
        self._on_signal(signum)
        if self._announce:
            print(f"\njaxtrainer: received {signal_name(signum)}; saving a checkpoint at the next "
                  "step boundary, then exiting (send it again to stop at once)",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> SignalHandlers:
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in PREEMPTION_SIGNALS:
            signum = getattr(signal, name)
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except (ValueError, OSError):  # not allowed here (e.g. embedded interpreter)
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, old in self._previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)
        self._previous = {}
