"""One writer per run directory: a lock file naming the process that owns it.

Two commands resuming the same run at once (``trainer.ckpt_path=last`` twice)
would both append to its ``metrics.csv``, its TensorBoard events and its
checkpoints. ``Trainer.fit`` therefore takes ``<run_dir>/.lock`` before it
writes anything there and removes it when ``fit`` ends, however it ends. The
file holds the owner's pid, host name and start time (JSON). A lock whose
owner is gone is stale and taken over: on the same host a pid that no longer
runs; an empty or unreadable lock file older than :data:`UNREADABLE_GRACE_S`
(an owner killed while writing it). A lock of another host cannot be checked
and is honoured; the error says which file to remove if that process is gone.
A process that ends at once, skipping the ``finally`` blocks (a second signal,
a lost peer: :mod:`jaxtrainer.runtime._signals`), removes the locks it holds
first (:func:`release_held`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from jaxtrainer.rundir import run_layout

LOCK_FILE = run_layout.LOCK_FILE
"""The lock file's name inside a run directory."""

UNREADABLE_GRACE_S = 30.0
"""Seconds after which an empty or unreadable lock file counts as stale."""

_HELD: set[Path] = set()
"""The locks this process took and has not released (:func:`release_held`)."""


class RunInUseError(FileExistsError):
    """The run directory is owned by another live process."""


def _owner_alive(owner: dict, path: Path) -> bool:
    if not owner:  # empty or unreadable: being written, or its writer died
        try:
            return time.time() - path.stat().st_mtime < UNREADABLE_GRACE_S
        except FileNotFoundError:
            return False
    if owner.get("host") != socket.gethostname():
        return True  # cannot be checked from here
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False  # this process's own (an earlier fit that could not remove it)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # runs, as another user
    return True


def _read(path: Path) -> dict:
    try:
        owner = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def acquire(run_dir: str | os.PathLike) -> Path:
    """Take ``<run_dir>/.lock`` for this process; returns its path (pass it to
    :func:`release`).

    Raises:
      RunInUseError: a live process owns the directory (its pid, host and
        start time are named, with the file to remove if it is gone); nothing
        is written.
    """
    path = Path(run_dir) / LOCK_FILE
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            who = holder(run_dir)
            if who is not None:
                raise RunInUseError(
                    f"the run directory {run_dir} is in use by {who}: a run is written by one "
                    f"process at a time; wait for it to end (or remove {path} if that process "
                    "is gone)") from None
            try:
                path.unlink()  # stale: its owner is gone
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}, f)
        _HELD.add(path)
        return path
    raise RunInUseError(f"the run directory {run_dir}: another process keeps taking its lock {path}")


def holder(run_dir: str | os.PathLike) -> str | None:
    """Who holds ``<run_dir>/.lock`` (``"process 123 on host since 2026-12-07
    10:00:00"``), or ``None``: no lock, a stale one, or this process's own."""
    path = Path(run_dir) / LOCK_FILE
    if not path.exists():
        return None
    owner = _read(path)
    if not _owner_alive(owner, path):
        return None
    if not owner:
        return "a process that is still writing its lock"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner["started"])) \
        if isinstance(owner.get("started"), (int, float)) else "an unknown time"
    return f"process {owner.get('pid')} on {owner.get('host')} since {since}"


def release(path: Path | None) -> None:
    """Remove a lock :func:`acquire` returned, if it is still this process's."""
    if path is None:
        return
    _HELD.discard(path)
    owner = _read(path)
    if owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def release_held() -> None:
    """Remove every lock this process holds (:func:`release`): for a process
    that ends without running its ``finally`` blocks. Callable from any thread."""
    for path in list(_HELD):
        release(path)
