"""The peer watch of a multi-process run, against an in-memory key-value store.

(The watch in real processes: tests/distributed/test_multi_node_failures.py, a survivor in no collective.)
"""

import threading
import time

import pytest

from jaxtrainer.distributed import peer_watch
from jaxtrainer.distributed.peer_watch import KEY, PeerWatch


class Store:
    """The coordination client's key-value calls; ``down`` makes every call fail."""

    def __init__(self):
        self.values, self.down, self.lock = {}, False, threading.Lock()

    def key_value_set(self, key, value, allow_overwrite=False):
        if self.down:
            raise RuntimeError("UNAVAILABLE: Failed to send RPC to coordination service")
        with self.lock:
            assert allow_overwrite or key not in self.values
            self.values[key] = value

    def key_value_dir_get(self, prefix):
        if self.down:
            raise RuntimeError("UNAVAILABLE: Failed to send RPC to coordination service")
        with self.lock:
            return [(k, v) for k, v in self.values.items() if k.startswith(prefix)]


def watch(store, me=0, count=2, timeout=0.4):
    lost = []
    w = PeerWatch(store, me, count, timeout, lambda who, why: lost.append((who, why, time.monotonic())))
    return w, lost


def test_a_peer_whose_beats_stop_is_lost_after_the_timeout_and_only_once():
    store = Store()
    mine, lost = watch(store)
    theirs, _ = watch(store, me=1)
    mine.start(), theirs.start()
    time.sleep(1.0)  # both beating: nobody lost
    assert lost == []
    theirs._stop.set()  # process 1 killed: no more beats, no "done"
    theirs._thread.join()
    stopped = time.monotonic()
    time.sleep(2.0)
    assert [(who, why) for who, why, _ in lost] == [("process 1", "no heartbeat for 0.4 s")]
    # the timeout after its last beat (a beat is a quarter of it), with slack for a loaded machine
    assert 0.4 - 0.1 <= lost[0][2] - stopped <= 0.4 + 1.0
    mine.stop()


def test_a_peer_that_ended_normally_or_never_started_is_not_judged():
    store = Store()
    mine, lost = watch(store, count=3)
    done, _ = watch(store, me=1, count=3)
    mine.start(), done.start()
    time.sleep(0.3)
    done.stop()  # a normal end: marked done
    assert store.values[KEY + "1"] == peer_watch.DONE
    time.sleep(1.2)  # process 2 never published (still compiling, or late)
    assert lost == []
    mine.stop()
    assert store.values[KEY + "0"] == peer_watch.DONE
    mine.stop()  # twice is fine


def test_a_coordination_service_that_stops_answering_is_process_0_lost():
    store = Store()
    mine, lost = watch(store, me=1)
    mine.start()
    time.sleep(0.3)
    store.down = True
    time.sleep(1.2)
    assert len(lost) == 1 and lost[0][0] == "process 0"
    assert lost[0][1].startswith("the coordination service has not answered for 0.4 s: UNAVAILABLE")
    mine.stop()  # the service is gone: stopping still ends quietly


def test_the_runtime_heartbeat_is_longer_and_a_timeout_must_be_positive():
    assert peer_watch.runtime_heartbeat(5) == 10
    assert peer_watch.runtime_heartbeat(60) == 120
    assert peer_watch.runtime_heartbeat(0.4) == 2
    with pytest.raises(ValueError, match=r"timeout=0: expected seconds > 0"):
        PeerWatch(Store(), 0, 2, 0, lambda who, why: None)
