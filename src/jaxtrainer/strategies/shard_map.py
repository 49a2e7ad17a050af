"""``jax.shard_map`` over a configurable device mesh."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
from jax.sharding import Mesh

from jaxtrainer.distributed import AXIS_NAME
from jaxtrainer.strategies.base import DevicesArg, Strategy


class ShardMapStrategy(Strategy):
    """Run ``training_step`` under ``jax.shard_map`` on an N-D mesh of all devices.

    With the defaults (one axis named :data:`jaxtrainer.distributed.AXIS_NAME`
    over every device of every process) it behaves exactly as
    :class:`~jaxtrainer.strategies.PmapStrategy` does: parameters replicated
    (``PartitionSpec()``), per-device state and batches sharded on their leading
    axis, the same global sizes, budgets and metric names, and module code traced
    with ``jax.pmap``'s semantics.

    Multi-dimensional meshes: ``mesh_shape=(2, 2)``, ``axis_names=("hosts",
    "devices")``. Global sizes (``num_envs``, batch and population sizes) are split
    over ``data_axes``, by default *every* mesh axis, flattened row-major (device
    ``(i, j)`` of a ``(2, 2)`` mesh takes share ``2*i + j``). Mesh axes left out of
    ``data_axes`` replicate the work and the state (keep them for module code that
    names them explicitly, e.g. tensor parallelism). Cross-device reductions in a
    module must cover the data axes: ``jaxtrainer.distributed.pmean(x)`` reduces
    over :data:`AXIS_NAME` only, so on a multi-axis mesh either make
    :data:`AXIS_NAME` the only data axis or pass ``axis_name=strategy.data_axes``;
    a replicated leaf left un-reduced over a data axis is a trace-time error naming
    the leaf. :class:`~jaxtrainer.PopulationTrainer` splits members over all data
    axes by itself.

    Args:
      devices: ``"auto"`` (``jax.devices()``: all devices of all processes), an
        int ``n`` (the first ``n``), a list of indices into ``jax.devices()``
        (``[0, 2]``) or a list of devices, in mesh order.
      mesh_shape: sizes of the mesh axes; one entry may be ``-1`` (inferred from
        the device count). Default: ``(num_devices,)``.
      axis_names: one name per mesh axis. Default ``(AXIS_NAME,)`` for a 1-D mesh;
        required for more axes.
      data_axes: the axes global sizes are split over (default: all of them).
      jit: ``False`` skips ``jax.jit``'s compile and runs the programs under
        ``jax.disable_jit`` (op by op, for debugging); the strategy's ``shard_map``
        still traces the step, so a Python ``print`` there shows tracers: use
        ``jax.debug.print``, which prints values either way. Much slower and hungrier
        for memory than ``True``: for tiny configs only.

    Raises:
      ValueError: mesh shape and axis names of different lengths, non-positive or
        repeated entries, unknown data axes, or (when the mesh is built, before
        any compilation) a mesh whose size differs from the number of devices.
    """

    name = "shard_map"
    MESH_ARGUMENTS: tuple[str, ...] = ("mesh_shape", "axis_names", "data_axes")
    """The keyword arguments of ``__init__`` that describe the mesh (what a
    subclass such as :class:`~jaxtrainer.strategies.MultiNodeStrategy` passes on)."""

    def __init__(
        self,
        devices: DevicesArg = "auto",
        *,
        jit: bool = True,
        mesh_shape: Sequence[int] | None = None,
        axis_names: Sequence[str] | None = None,
        data_axes: Sequence[str] | None = None,
    ) -> None:
        super().__init__(devices, jit=jit)
        shape = None if mesh_shape is None else tuple(int(s) for s in mesh_shape)
        if shape is not None:
            if not shape or any(s == 0 or s < -1 for s in shape) or shape.count(-1) > 1:
                raise ValueError(f"mesh_shape={tuple(mesh_shape)}: expected positive sizes, "
                                 "at most one of them -1 (inferred)")
        if axis_names is None:
            if shape is not None and len(shape) > 1:
                raise ValueError(f"mesh_shape={shape} has {len(shape)} axes: name them with "
                                 f"axis_names=(...), e.g. ('hosts', {AXIS_NAME!r})")
            names = (AXIS_NAME,)
        else:
            names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
        if shape is not None and len(shape) != len(names):
            raise ValueError(f"mesh_shape={shape} has {len(shape)} axes but axis_names={names} "
                             f"has {len(names)}")
        if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"axis_names={names}: expected distinct non-empty strings")
        data = names if data_axes is None else (
            (data_axes,) if isinstance(data_axes, str) else tuple(data_axes))
        unknown = [a for a in data if a not in names]
        if unknown or not data:
            raise ValueError(f"data_axes={data}: choose one or more of the mesh axes {names}")
        self.mesh_shape = shape
        self.axis_names = names
        self._data_axes = tuple(a for a in names if a in data)  # mesh order
        devices = self._devices_arg  # as checked by Strategy.__init__
        if devices != "auto":
            count = devices if isinstance(devices, int) else len(devices)
            self._resolve_shape(count)  # fail at construction when the count is known

    def _resolve_shape(self, count: int) -> tuple[int, ...]:
        if self.mesh_shape is None:
            return (count,)
        shape = self.mesh_shape
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if count % known:
                raise ValueError(f"mesh_shape={shape}: {count} device(s) do not divide into "
                                 f"axes of sizes {[s for s in shape if s != -1]}")
            shape = tuple(count // known if s == -1 else s for s in shape)
        if math.prod(shape) != count:
            raise ValueError(
                f"mesh_shape={shape} holds {math.prod(shape)} device(s) but {count} were "
                f"selected (devices={self._devices_arg!r}); make the product of mesh_shape "
                f"equal the device count, or pass devices={math.prod(shape)}"
            )
        return shape

    def select_devices(self) -> list[jax.Device]:
        devices = self._requested(jax.devices())
        self._resolve_shape(len(devices))
        return devices

    def build_mesh(self, devices: list[jax.Device]) -> Mesh:
        shape = self._resolve_shape(len(devices))
        return jax.make_mesh(
            shape,
            self.axis_names,
            axis_types=(jax.sharding.AxisType.Explicit,) * len(shape),
            devices=devices,
        )

    @property
    def data_axes(self) -> tuple[str, ...]:
        """Mesh axes global sizes are split over (row-major), in mesh order."""
        return self._data_axes
