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

import os
import socket
import sys
import time
from typing import Any

import jax
import numpy as np

# Environment read when the arguments are not given (set by ``jaxtrainer launch``).
ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
ENV_INIT_TIMEOUT = "JAXTRAINER_INIT_TIMEOUT"
ENV_HEARTBEAT_TIMEOUT = "JAXTRAINER_HEARTBEAT_TIMEOUT"

DEFAULT_INIT_TIMEOUT = 300
DEFAULT_HEARTBEAT_TIMEOUT = 100


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r}: expected an integer") from None


def _positive_seconds(name: str, value: int | float | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name}={value!r}: expected a positive number of seconds")
    return max(1, int(round(value)))


def _wait_for_coordinator(address: str, timeout: float, process_id: int | None,
                          num_processes: int | None) -> None:
    """Return once a TCP connection to ``address`` succeeds; raise RuntimeError
    naming it after ``timeout`` seconds."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"jaxtrainer.distributed.initialize: process {process_id} of {num_processes} "
                f"could not reach the coordinator at {address} within "
                f"initialization_timeout={timeout:g} s ({last}). Is process 0 running, and is "
                "that address reachable from this machine?")
        time.sleep(0.2)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    initialization_timeout: int | float | None = None,
    heartbeat_timeout: int | float | None = None,
    cluster_detection_method: str | None = None,
) -> None:
    """Start ``jax.distributed`` (once per process; later calls do nothing).

    Arguments left ``None`` come from ``JAX_COORDINATOR_ADDRESS``,
    ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (set by ``jaxtrainer launch``);
    without those JAX detects the cluster itself (SLURM, Open MPI, Kubernetes,
    Cloud TPU). CPU collectives use gloo.

    Args:
      coordinator_address: ``"host:port"`` of process 0's coordinator service,
        used exactly as given.
      num_processes: processes in the run.
      process_id: this process's index, ``0 .. num_processes - 1``.
      initialization_timeout: seconds to wait for the coordinator and all
        processes to connect (``JAXTRAINER_INIT_TIMEOUT``, default 300).
      heartbeat_timeout: seconds without a heartbeat after which a process is
        declared dead and the survivors stop with an error
        (``JAXTRAINER_HEARTBEAT_TIMEOUT``, default 100).
      cluster_detection_method: passed to ``jax.distributed.initialize``.

    Raises:
      RuntimeError: JAX computations ran before this call, or the coordinator
        could not be reached in time (the message names the address tried).
      ValueError: malformed arguments or environment.
    """
    if jax.distributed.is_initialized():
        return
    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
    if num_processes is None:
        num_processes = _env_int(ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(ENV_PROCESS_ID)
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes={num_processes}: expected >= 1")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id}: expected 0..{num_processes - 1}")
    if coordinator_address is not None and ":" not in coordinator_address:
        raise ValueError(f"coordinator_address={coordinator_address!r}: expected 'host:port'")
    init_timeout = _positive_seconds(
        "initialization_timeout",
        initialization_timeout if initialization_timeout is not None else _env_int(ENV_INIT_TIMEOUT),
        DEFAULT_INIT_TIMEOUT)
    beat_timeout = _positive_seconds(
        "heartbeat_timeout",
        heartbeat_timeout if heartbeat_timeout is not None else _env_int(ENV_HEARTBEAT_TIMEOUT),
        DEFAULT_HEARTBEAT_TIMEOUT)
    if coordinator_address is not None and process_id not in (None, 0):
        # JAX aborts the whole process (no exception, no address) when the coordinator
        # cannot be reached; check it from Python first so the error names it (F10).
        started = time.monotonic()
        _wait_for_coordinator(coordinator_address, init_timeout, process_id, num_processes)
        init_timeout = max(1, int(round(init_timeout - (time.monotonic() - started))))
    # Must precede backend creation; only affects the CPU client.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    where = coordinator_address or "(detected from the cluster environment)"
    if num_processes is None or num_processes > 1:
        # JAX aborts the process without naming the address when the others do not
        # join in time; this line names it right before that (F10).
        who = ("this process" if process_id is None or num_processes is None
               else f"process {process_id} of {num_processes}")
        print(f"jaxtrainer: {who} joining coordinator {where}; "
              f"waiting up to {init_timeout} s for every process", file=sys.stderr, flush=True)
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            cluster_detection_method=cluster_detection_method,
            initialization_timeout=init_timeout,
            heartbeat_timeout_seconds=beat_timeout,
        )
    except ValueError as e:
        if coordinator_address is None:
            raise ValueError(
                "jaxtrainer.distributed.initialize: no coordinator address and no cluster "
                "detected. Start the run with `jaxtrainer launch --nproc-per-node N "
                "script.py ...`, under SLURM/Open MPI, or set "
                f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} ({e})") from e
        raise
    except Exception as e:  # XlaRuntimeError (DEADLINE_EXCEEDED, UNAVAILABLE, ...)
        if "before any jax" in str(e).lower():
            raise RuntimeError(
                "jaxtrainer.distributed.initialize: jax.distributed must start before any "
                "JAX computation, but JAX was already used in this process (importing "
                "gymnax does). Start the script "
                "with `jaxtrainer launch`, which initialises first, or call "
                "jaxtrainer.distributed.initialize() at the top of the script") from e
        raise RuntimeError(
            f"jaxtrainer.distributed.initialize: process {process_id} of {num_processes} "
            f"could not join the run at coordinator {where} within initialization_timeout={init_timeout} s: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


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
