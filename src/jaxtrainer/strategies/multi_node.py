"""One run over many processes (and machines) on JAX's multi-controller runtime."""

from __future__ import annotations

from typing import Any

import jax

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed._process import initialize
from jaxtrainer.strategies.base import DevicesArg
from jaxtrainer.strategies.shard_map import ShardMapStrategy


class MultiNodeStrategy(ShardMapStrategy):
    """Data parallelism over every device of every process of a ``jax.distributed`` run.

    Constructing it calls :func:`jaxtrainer.distributed.initialize` (once, before any other
    JAX use), so create the Trainer first thing in the script. Each process runs
    the same program; the mesh spans all processes' devices (``jax.devices()``,
    process-major), global sizes (``num_envs``, batch and population sizes) are
    split over all of them, device ``d`` of the global mesh draws step keys
    ``fold_in(fold_in(root, step), d)``, metrics are reduced over all devices
    inside the compiled step, and only process 0 writes logs, progress and
    checkpoints. Every process must take part in a save (sharded arrays are
    gathered to every process, then process 0 alone writes them) and waits for
    process 0's files at the end of ``fit`` and on preemption; resuming, every
    process reads the checkpoint itself. Checkpoints therefore need a directory
    every process sees (a shared filesystem); see :mod:`jaxtrainer.checkpoint`.

    Args:
      devices: ``"auto"`` (every device of every process) or an int ``n`` (the
        first ``n`` local devices of every process).
      jit: ``False`` skips ``jax.jit``'s compile and runs the programs under
        ``jax.disable_jit`` (op by op, for debugging); the strategy's ``shard_map``
        still traces the step, so a Python ``print`` there shows tracers: use
        ``jax.debug.print``, which prints values either way. Much slower and hungrier
        for memory than ``True``: for tiny configs only.
      mesh_shape, axis_names, data_axes: keyword arguments passed on to
        :class:`ShardMapStrategy` (its :attr:`~ShardMapStrategy.MESH_ARGUMENTS`),
        e.g. ``mesh_shape=(num_processes, -1), axis_names=("hosts", "data")``.
      **initialize_kwargs: the other keyword arguments, those of
        :func:`jaxtrainer.distributed.initialize`, passed to it unchanged
        (``coordinator_address``, ``num_processes``, ``process_id``,
        ``initialization_timeout``, ``heartbeat_timeout``,
        ``cluster_detection_method``, ``cpu_collectives``; environment fallbacks
        there).

    Raises:
      RuntimeError / ValueError: from :func:`jaxtrainer.distributed.initialize`
        (TypeError: a keyword argument that it does not take).
    """

    name = "multi_node"

    def __init__(self, devices: DevicesArg = "auto", *, jit: bool = True,
                 **initialize_kwargs: Any) -> None:
        try:
            parsed = arguments.devices(devices)  # "4" -> 4
        except ValueError:
            parsed = None
        if not (parsed == "auto" or isinstance(parsed, int)):
            raise arguments.ArgumentError("devices", devices,
                                          ": MultiNodeStrategy takes 'auto' or a positive "
                                          "int (local devices per process)")
        devices = parsed
        mesh = {name: initialize_kwargs.pop(name) for name in self.MESH_ARGUMENTS
                if name in initialize_kwargs}
        initialize(**initialize_kwargs)
        self._per_process = devices if isinstance(devices, int) else None
        super().__init__("auto", jit=jit, **mesh)
        self._devices_arg = devices

    def select_devices(self) -> list[jax.Device]:
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        if self._per_process is not None:
            local = jax.local_device_count()
            if self._per_process > local:
                raise arguments.ArgumentError("devices", self._per_process,
                                              f": process {jax.process_index()} "
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
