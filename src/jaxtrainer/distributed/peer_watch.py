"""Every process of a run watching the others, so that a survivor always says who died.

A survivor of a dead process hears of it from its next collective at once (the
connection closes). A survivor that is in no collective for a while (writing a
checkpoint, running a slow hook, waiting at a rendezvous) would hear of it only
from JAX's coordination service, which ends the process after the runtime's
heartbeat timeout with a fatal log line and status 134, naming neither the lost
process nor the checkpoint to resume from.

:class:`PeerWatch` closes that gap. A thread of every process publishes a
counter in the coordination service's key-value store every quarter of the
heartbeat timeout and reads the others'. A process whose counter has not moved
for the timeout (killed, its machine down, frozen), or a coordination service
that has not answered for that long (process 0 gone), is lost: ``on_lost``
runs once, in that thread (it prints the lost-process line and ends the
process). A process that has not published yet (still starting, or far behind)
is not judged; one that ended normally marks itself done and is not judged
either. The runtime's own heartbeat timeout is set longer
(:func:`runtime_heartbeat`), so this watch speaks first.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

KEY = "jaxtrainer/peer_watch/"
"""Key-value directory of the counters: ``KEY + str(process_index)``."""

DONE = "done"
"""The value a process that ended normally leaves behind."""


def runtime_heartbeat(seconds: float) -> int:
    """JAX's heartbeat timeout (whole seconds) for a watch of ``seconds``:
    twice as long, so a lost process is reported by the watch, not by the
    runtime's abort."""
    return max(2, math.ceil(2 * seconds))


class PeerWatch:
    """The watch of one process (see the module docstring).

    Args:
      client: the coordination service client
        (``jax._src.distributed.global_state.client``): ``key_value_set``,
        ``key_value_dir_get``.
      me: this process's index.
      count: processes in the run.
      timeout: seconds without a beat (or without an answer from the
        service) after which a process is lost (> 0).
      on_lost: called once with who was lost (``"process 1"``) and why
        (``"no heartbeat for 5 s"``).
    """

    def __init__(self, client: Any, me: int, count: int, timeout: float,
                 on_lost: Callable[[str, str], None]) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout={timeout!r}: expected seconds > 0")
        self.client, self.me, self.count, self.timeout = client, me, count, float(timeout)
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jaxtrainer-peer-watch",
                                        daemon=True)

    def start(self) -> PeerWatch:
        """Publish the first beat and start the thread; returns ``self``."""
        self.client.key_value_set(KEY + str(self.me), "0", allow_overwrite=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching and mark this process done (a normal end): the others
        no longer judge it. Safe to call more than once, and when the service is gone."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        try:
            self.client.key_value_set(KEY + str(self.me), DONE, allow_overwrite=True)
        except Exception:  # the service already shut down: nobody is left to judge us
            pass

    def _run(self) -> None:
        interval = self.timeout / 4
        beat, answered = 0, time.monotonic()
        seen: dict[int, tuple[str, float]] = {}  # process -> (its last value, when it changed)
        while not self._stop.wait(interval):
            now = time.monotonic()
            beat += 1
            try:
                self.client.key_value_set(KEY + str(self.me), str(beat), allow_overwrite=True)
                values = {key.rsplit("/", 1)[-1]: value
                          for key, value in self.client.key_value_dir_get(KEY)}
            except Exception as exc:  # the coordination service (process 0) does not answer
                if now - answered >= self.timeout and not self._stop.is_set():
                    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    return self._lost("process 0", f"the coordination service has not answered "
                                                   f"for {self.timeout:g} s: {cause[:200]}")
                continue
            answered = now
            for process in range(self.count):
                value = values.get(str(process))
                if process == self.me or value is None or value == DONE:
                    seen.pop(process, None)
                    continue
                last = seen.get(process)
                if last is None or last[0] != value:
                    seen[process] = (value, now)
                elif now - last[1] >= self.timeout and not self._stop.is_set():
                    return self._lost(f"process {process}", f"no heartbeat for {self.timeout:g} s")

    def _lost(self, who: str, cause: str) -> None:
        self._stop.set()
        self.on_lost(who, cause)
