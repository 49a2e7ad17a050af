"""Process-level helpers for multi-process (multi-controller) runs.

In a ``jax.distributed`` run every process executes the same program; these
helpers answer "who am I" and move small host values between processes. They
are cheap no-ops in a single process, so code written with them runs anywhere.

Every helper that communicates (:func:`barrier`, :func:`broadcast_from_zero`)
is a collective: *every* process must call it, in the same order, or all of
them hang until the distributed runtime's timeout (FIELD_REPORTS F9). Never
call them under ``if process_index() == 0``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def is_distributed() -> bool:
    """True when ``jax.distributed`` is initialised in this process (even with a
    single process). Does not start a JAX backend."""
    return bool(jax.distributed.is_initialized())


def process_index() -> int:
    """This process's index, ``0 .. process_count() - 1`` (0 in a single process)."""
    return int(jax.process_index())


def process_count() -> int:
    """Number of processes in the run (1 without ``jax.distributed``)."""
    return int(jax.process_count())


def global_ranks(devices: list[jax.Device] | None = None) -> list[int]:
    """Global ranks of this process's devices: their positions in ``devices``
    (default ``jax.devices()``, all devices of all processes, in mesh order).

    With 2 processes of 2 devices and the default order, process 0 owns ranks
    ``[0, 1]`` and process 1 owns ``[2, 3]``. A device's global rank is the
    value of ``jax.lax.axis_index`` for it on a 1-D mesh over ``devices``.
    """
    devices = list(jax.devices() if devices is None else devices)
    me = jax.process_index()
    return [i for i, d in enumerate(devices) if d.process_index == me]


def barrier(name: str) -> None:
    """Block until every process has reached the barrier called ``name``.

    A collective: every process must call it with the same ``name`` in the same
    order. A process that never arrives makes the others fail after the
    distributed runtime's heartbeat timeout instead of hanging forever.
    No-op in a single process.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"barrier name={name!r}: expected a non-empty string")
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _broadcast_str(value: str | None) -> str:
    from jax.experimental import multihost_utils

    data = np.frombuffer((value or "").encode(), np.uint8)
    length = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
    buf = np.zeros((max(length, 1),), np.uint8)
    buf[: min(length, data.size)] = data[:length]
    out = np.asarray(multihost_utils.broadcast_one_to_all(buf))
    return bytes(out[:length]).decode()


def broadcast_from_zero(value: Any) -> Any:
    """Process 0's ``value`` on every process.

    ``value``: a ``str`` (e.g. a run directory chosen on process 0), a Python
    ``int``/``float``/``bool``, or a pytree of arrays with the same shapes and
    dtypes on every process. Returns it as the same kind of object (arrays as
    numpy arrays). A collective (see module docstring); returns ``value``
    unchanged in a single process.

    Raises:
      TypeError: ``str`` on one process must be ``str`` (or ``None``) on all.
    """
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    if value is None or isinstance(value, str):
        return _broadcast_str(value)
    if isinstance(value, (bool, int, float)):
        arr = np.asarray(value, np.float64 if isinstance(value, float) else np.int64)
        out = np.asarray(multihost_utils.broadcast_one_to_all(arr))
        return type(value)(out.item())
    return jax.tree.map(np.asarray, multihost_utils.broadcast_one_to_all(value))
