"""One run over many processes (and machines) on JAX's multi-controller runtime."""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax

from jaxtrainer.strategies.base import DevicesArg
from jaxtrainer.strategies.shard_map import ShardMapStrategy

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


def initialize_distributed(
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
    # Must precede backend creation; only affects the CPU client.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    where = coordinator_address or "(detected from the cluster environment)"
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
                "multi_node: no coordinator address and no cluster detected. Start the run with "
                "`jaxtrainer launch --nproc-per-node N script.py ...`, under SLURM/Open MPI, or set "
                f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} ({e})") from e
        raise
    except Exception as e:  # XlaRuntimeError (DEADLINE_EXCEEDED, UNAVAILABLE, ...)
        if "before any JAX" in str(e) or "before any jax" in str(e).lower():
            raise RuntimeError(
                "multi_node: jax.distributed must start before any JAX computation; create the "
                "Trainer (or MultiNodeStrategy) before using JAX arrays") from e
        raise RuntimeError(
            f"multi_node: process {process_id} of {num_processes} could not join the run at "
            f"coordinator {where} within initialization_timeout={init_timeout} s: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e


class MultiNodeStrategy(ShardMapStrategy):
    """Data parallelism over every device of every process of a ``jax.distributed`` run.

    Constructing it calls :func:`initialize_distributed` (once, before any other
    JAX use), so create the Trainer first thing in the script. Each process runs
    the same program; the mesh spans all processes' devices (``jax.devices()``,
    process-major), global sizes (``num_envs``, batch and population sizes) are
    split over all of them, device ``d`` of the global mesh draws step keys
    ``fold_in(fold_in(root, step), d)``, metrics are reduced over all devices
    inside the compiled step, and only process 0 writes logs, progress and
    checkpoint metadata (orbax writes each array shard from the process that
    holds it; every process must take part in a save).

    Args:
      devices: ``"auto"`` (every device of every process) or an int ``n`` (the
        first ``n`` local devices of every process).
      jit: ``False`` runs eagerly for debugging.
      coordinator_address, num_processes, process_id, initialization_timeout,
        heartbeat_timeout, cluster_detection_method: see
        :func:`initialize_distributed` (environment fallbacks there).
      mesh_shape, axis_names, data_axes: as :class:`ShardMapStrategy`, e.g.
        ``mesh_shape=(num_processes, -1), axis_names=("hosts", "data")``.

    Raises:
      RuntimeError / ValueError: from :func:`initialize_distributed`.
    """

    name = "multi_node"

    def __init__(
        self,
        devices: DevicesArg = "auto",
        *,
        jit: bool = True,
        coordinator_address: str | None = None,
        num_processes: int | None = None,
        process_id: int | None = None,
        initialization_timeout: int | float | None = None,
        heartbeat_timeout: int | float | None = None,
        cluster_detection_method: str | None = None,
        mesh_shape: Sequence[int] | None = None,
        axis_names: Sequence[str] | None = None,
        data_axes: Sequence[str] | None = None,
    ) -> None:
        if not (devices == "auto" or (isinstance(devices, int) and not isinstance(devices, bool)
                                      and devices >= 1)):
            raise ValueError(f"devices={devices!r}: MultiNodeStrategy takes 'auto' or a positive "
                             "int (local devices per process)")
        initialize_distributed(
            coordinator_address, num_processes, process_id,
            initialization_timeout=initialization_timeout, heartbeat_timeout=heartbeat_timeout,
            cluster_detection_method=cluster_detection_method)
        self._per_process = devices if isinstance(devices, int) else None
        super().__init__("auto", jit=jit, mesh_shape=mesh_shape, axis_names=axis_names,
                         data_axes=data_axes)
        self._devices_arg = devices

    def select_devices(self) -> list[jax.Device]:
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        if self._per_process is not None:
            local = jax.local_device_count()
            if self._per_process > local:
                raise ValueError(f"devices={self._per_process}: process {jax.process_index()} "
                                 f"has {local} device(s); choose 1..{local} per process")
            picked: list[jax.Device] = []
            for p in range(jax.process_count()):
                picked += [d for d in devices if d.process_index == p][: self._per_process]
            devices = picked
        self._resolve_shape(len(devices))
        return devices

    def describe(self) -> str:
        return (f"{super().describe()}; process {jax.process_index()} of {jax.process_count()}, "
                f"{len([d for d in self.devices if d.process_index == jax.process_index()])} "
                "local device(s)")
