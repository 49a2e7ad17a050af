"""The Strategy: where a Module's pure functions meet devices.

Every strategy here runs ``training_step`` under ``jax.jit(jax.shard_map(...))``
over a mesh whose data axis is :data:`jaxtrainer.distributed.AXIS_NAME`.
Subclasses only choose the devices and the mesh; this base class owns state
layout (replicated vs sharded leaves), per-device keys, fusing ``n`` steps in
one compiled loop, metric reduction and moving state between layouts.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxtrainer import _args
from jaxtrainer import metrics as metrics_lib
from jaxtrainer.distributed import AXIS_NAME
from jaxtrainer.distributed.axis import to_varying, varying_axes
from jaxtrainer.distributed.process import broadcast_from_zero
from jaxtrainer.module import Module
from jaxtrainer.strategies import program
from jaxtrainer.strategies.program import EvalProgram, TrainProgram

DevicesArg = int | str | Sequence[int] | Sequence[jax.Device]


def _path_str(path) -> str:
    return jax.tree_util.keystr(path) or "<root>"


@dataclass(frozen=True)
class LeafLayout:
    """How one state leaf is laid out: replicated, or sharded on its leading axis.

    ``expanded``: the per-device value is a scalar, so it gains a leading axis of
    size 1 per device (``num_devices`` globally).
    """

    sharded: bool
    expanded: bool = False


class Strategy(abc.ABC):
    """Base class of all strategies; subclass it to run on other device layouts.

    A subclass implements :meth:`select_devices` and may override
    :meth:`build_mesh` (default: a 1-D mesh over :data:`AXIS_NAME`) and
    :attr:`data_axes` (the mesh axes batches and populations are split over).
    Register it by name with :func:`jaxtrainer.strategies.register`.

    Args:
      devices: ``"auto"`` (every visible device the strategy uses), an int (the
        first ``n`` devices; a digit string such as ``"4"`` too), a list of
        device indices into those devices (``[0, 2]``) or a list of
        ``jax.Device``. Malformed values raise ValueError here; counts and
        indices beyond the available devices when the devices are picked
        (:meth:`setup`, before anything compiles).
      jit: ``False`` runs every step eagerly (op by op) for debugging.
    """

    name: ClassVar[str] = ""

    def __init__(self, devices: DevicesArg = "auto", *, jit: bool = True) -> None:
        self._devices_arg = _args.devices(devices)  # ValueError for a malformed value
        self.jit = jit
        self.mesh: Mesh | None = None
        self._traced_init: tuple[Module, Any] | None = None  # see abstract_state

    # ---- devices and mesh ------------------------------------------------
    @abc.abstractmethod
    def select_devices(self) -> list[jax.Device]:
        """The devices this strategy runs on, in mesh order."""

    def build_mesh(self, devices: list[jax.Device]) -> Mesh:
        return jax.make_mesh(
            (len(devices),),
            (AXIS_NAME,),
            axis_types=(jax.sharding.AxisType.Explicit,),
            devices=devices,
        )

    @property
    def data_axes(self) -> tuple[str, ...]:
        """Mesh axes that global batch sizes are split over."""
        return (AXIS_NAME,)

    def _requested(self, available: list[jax.Device]) -> list[jax.Device]:
        """The devices the ``devices`` argument selects from ``available``:
        all (``"auto"``), the first ``n``, those at the given indices, or the
        given devices (each must be in ``available``)."""
        return _args.pick_devices(self._devices_arg, list(available), type(self).__name__)

    def setup(self) -> None:
        """Choose devices and build the mesh. Idempotent; raises before compiling."""
        if self.mesh is None:
            self.mesh = self.build_mesh(self.select_devices())

    def describe(self) -> str:
        devs = self.devices
        kinds = sorted({d.device_kind for d in devs})
        return f"{type(self).__name__}: {len(devs)} device(s) [{', '.join(kinds)}] {devs}"

    @property
    def devices(self) -> list[jax.Device]:
        self.setup()
        return list(self.mesh.devices.flat)

    @property
    def num_devices(self) -> int:
        """Devices over which global sizes are split (all processes)."""
        self.setup()
        return int(np.prod([self.mesh.shape[a] for a in self.data_axes]))

    @property
    def process_index(self) -> int:
        return jax.process_index()

    @property
    def process_count(self) -> int:
        return jax.process_count()

    def broadcast(self, value: Any) -> Any:
        """Process 0's ``value`` on every process (a ``str``, a Python number or a
        pytree of arrays of the same shapes everywhere); ``value`` itself with one
        process. A collective: every process calls it (as Fabric's ``broadcast``)."""
        return broadcast_from_zero(value) if self.process_count > 1 else value

    def all_gather_host(self, value: np.ndarray) -> np.ndarray:
        """Every process's ``value`` (a small host array, same shape everywhere)
        stacked: ``[process_count, *value.shape]``. A collective; no exchange with
        one process. Used to agree on host decisions (stop, signal, plan)."""
        value = np.asarray(value)
        if self.process_count <= 1:
            return value[None]
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(value)).reshape(
            (self.process_count, *value.shape))

    @property
    def is_global_zero(self) -> bool:
        """True on the process that writes logs and checkpoints."""
        return jax.process_index() == 0

    def to_global(self, tree: Any) -> Any:
        """Host values (numpy, Python scalars, typed keys, single-device arrays)
        as arrays replicated over this strategy's mesh.

        Only needed with several processes, where every array a compiled step or
        a checkpoint sees must span the global mesh; every process must pass the
        same values. A single process gets ``tree`` back unchanged.
        """
        if jax.process_count() == 1:
            return tree
        self.setup()
        sharding = NamedSharding(self.mesh, P())

        def put(x):
            if isinstance(x, jax.Array) and x.sharding == sharding:
                return x
            if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
                return jax.random.wrap_key_data(put(jax.random.key_data(x)),
                                                impl=jax.random.key_impl(x))
            host = np.asarray(x)
            return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

        return jax.tree.map(put, tree)

    # ---- state layout ----------------------------------------------------
    def _spec(self, layout: LeafLayout) -> P:
        axes = self.data_axes
        return P(axes if len(axes) > 1 else axes[0]) if layout.sharded else P()

    def _shard_map(self, fn, in_specs, out_specs):
        return jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=True)

    def _compile(self, fn, *args, donate: tuple[int, ...] = ()):
        """AOT-compile ``fn`` for ``args``: calling it with other shapes or
        shardings raises instead of silently recompiling. Returns (fn, seconds)."""
        if not self.jit:
            def eager(*a):
                with jax.disable_jit():
                    return fn(*a)
            return eager, 0.0
        start = time.perf_counter()
        compiled = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
        return compiled, time.perf_counter() - start

    def state_layout(self, module: Module) -> Any:
        """A pytree of :class:`LeafLayout`, one per leaf of ``module.init_state``."""
        self.setup()
        cache = getattr(self, "_layout_cache", {})
        if id(module) in cache:
            return cache[id(module)][1]
        found: list[Any] = []

        def probe(key):
            state = module.init_state(key)
            found.append(jax.tree.map(
                lambda x: LeafLayout(bool(varying_axes(x) & set(self.data_axes)),
                                     bool(varying_axes(x) & set(self.data_axes))
                                     and jnp.ndim(x) == 0),
                state))
            return jnp.zeros((), jnp.float32)

        jax.eval_shape(self._shard_map(probe, P(), P()), jax.random.key(0))
        cache[id(module)] = (module, found[0])  # keep module alive so its id stays unique
        self._layout_cache = cache
        return found[0]

    def _specs(self, layout: Any) -> Any:
        return jax.tree.map(self._spec, layout, is_leaf=lambda x: isinstance(x, LeafLayout))

    def _expand(self, state: Any, layout: Any) -> Any:
        return jax.tree.map(lambda lay, x: x[None] if lay.expanded else x, layout, state,
                            is_leaf=lambda x: isinstance(x, LeafLayout))

    def _squeeze(self, state: Any, layout: Any) -> Any:
        return jax.tree.map(lambda lay, x: x[0] if lay.expanded else x, layout, state,
                            is_leaf=lambda x: isinstance(x, LeafLayout))

    def _match_layout(self, state: Any, layout: Any, where: str) -> Any:
        """Cast leaves that must be sharded to varying; reject replicated leaves
        that became device-dependent."""
        axes = self.data_axes

        def fix(path, lay, x):
            varying = varying_axes(x) & set(axes)
            if lay.sharded:
                missing = tuple(a for a in axes if a not in varying)
                return jax.lax.pcast(x, missing, to="varying") if missing else x
            if varying:
                raise ValueError(
                    f"state leaf {_path_str(path)} is replicated after init_state but "
                    f"{where} makes it differ between devices (varies over {sorted(varying)}). "
                    "Average per-device values with jaxtrainer.distributed.pmean, e.g. "
                    "use jaxtrainer.distributed.gradient_update for gradients. If the "
                    "difference is noise drawn from the step key that every device should "
                    "draw alike (a perturbation or random walk of replicated parameters), set "
                    "step_key_per_device = False on the module: training_step then gets the "
                    "same key on every device (derive per-device keys, where wanted, with "
                    "jaxtrainer.distributed.fold_in_device)."
                )
            return x

        return jax.tree_util.tree_map_with_path(
            lambda p, lay, x: fix(p, lay, x), layout, state,
            is_leaf=lambda x: isinstance(x, LeafLayout))

    def _check_structure(self, state: Any, layout: Any, where: str) -> None:
        want = jax.tree.structure(layout, is_leaf=lambda x: isinstance(x, LeafLayout))
        got = jax.tree.structure(state)
        if want != got:
            raise ValueError(
                f"{where} returned a state whose structure differs from init_state's:\n"
                f"  init_state: {want}\n  {where}: {got}"
            )

    def shardings(self, module: Module) -> Any:
        """``NamedSharding`` of every leaf of the global state."""
        specs = self._specs(self.state_layout(module))
        return jax.tree.map(lambda s: NamedSharding(self.mesh, s), specs,
                            is_leaf=lambda x: isinstance(x, P))

    # ---- programs --------------------------------------------------------
    def _init_program(self, module: Module) -> Any:
        """``jax.jit`` of the init program of ``module`` (traced at its first use)."""
        layout = self.state_layout(module)

        def body(k):
            state = module.init_state(k)
            return self._expand(self._match_layout(state, layout, "init_state"), layout)

        return jax.jit(self._shard_map(body, P(), self._specs(layout)))

    def init_state(self, module: Module, key: jax.Array) -> Any:
        """The global initial state on this strategy's mesh. ``key``: typed key.

        Right after ``abstract_state(module, keep=True)`` it runs the program that
        call traced (in one process, one trace of ``init_state`` for both)."""
        kept, self._traced_init = self._traced_init, None
        fn = kept[1] if kept is not None and kept[0] is module else self._init_program(module)
        if not self.jit:
            with jax.disable_jit():
                return fn(key)
        return fn(key)

    def abstract_state(self, module: Module, keep: bool = False) -> Any:
        """The global state :meth:`init_state` makes, as ``jax.ShapeDtypeStruct``
        leaves with this strategy's shardings. Nothing runs. ``keep``: keep the
        traced program for the next :meth:`init_state` of ``module``, which
        uses it once (a fresh ``fit`` calls the two in this order; another
        ``abstract_state`` call replaces or drops it)."""
        fn = self._init_program(module)
        shapes = fn.eval_shape(jax.random.key(0))
        self._traced_init = (module, fn) if keep else None
        return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                            shapes, self.shardings(module))

    def _reduce_metrics(self, acc: dict[str, metrics_lib.Metric]) -> dict[str, metrics_lib.Metric]:
        """Every metric reduced over the data axes by its own reduction (Mean and
        Sum: psum of both fields; Max/Min: pmax/pmin; Last: mean of the devices'
        last values, exact when they agree)."""
        axes = self.data_axes
        return {name: m.over_devices(axes) for name, m in acc.items()}

    def _to_varying(self, tree: Any) -> Any:
        return to_varying(tree, self.data_axes)

    def compile_train(self, module: Module, state: Any, train_key: jax.Array) -> TrainProgram:
        """Compile the training program (:class:`~jaxtrainer.strategies.program.TrainProgram`,
        its body :func:`~jaxtrainer.strategies.program.fused_intervals`) for
        arrays shaped like ``state`` and ``train_key`` (arrays or
        ``ShapeDtypeStruct``s); it donates the state."""
        layout = self.state_layout(module)
        specs = self._specs(layout)
        body, found = program.fused_intervals(self, module, layout)
        fn = self._shard_map(body, (specs, P(), P(), P()), (specs, P()))
        rows = program.MAX_INTERVALS_PER_CALL
        compiled, seconds = self._compile(fn, state, train_key, jnp.zeros((), jnp.int32),
                                          jnp.zeros((rows,), jnp.int32), donate=(0,))
        if not found:  # eagerly run (jit off): the first call traces the body
            jax.eval_shape(fn, state, train_key, jnp.zeros((), jnp.int32),
                           jnp.zeros((rows,), jnp.int32))
        return program.TrainProgram(compiled, seconds, rows, found["groups"], found["names"])

    def compile_eval(self, module: Module, state: Any, key: jax.Array) -> EvalProgram:
        """Compile the evaluation program (:class:`~jaxtrainer.strategies.program.EvalProgram`,
        ``evaluation_step`` on every device with its own key)."""
        layout = self.state_layout(module)
        fn = self._shard_map(program.evaluation(self, module, layout), (self._specs(layout), P()), P())
        compiled, seconds = self._compile(fn, state, key)
        return program.EvalProgram(compiled, seconds)

    # ---- moving state ----------------------------------------------------
    def place(self, module: Module, logical_state: Any) -> Any:
        """Put a logical state (host arrays or arrays on any devices) on this mesh.

        Used to resume from a checkpoint written under any strategy or device
        count. Raises ValueError naming the leaf when a sharded leaf's leading
        axis cannot be split over this strategy's devices.
        """
        shardings = self.shardings(module)
        layout = self.state_layout(module)
        n = self.num_devices

        def put(path, lay, x, sharding):
            if lay.sharded and (np.ndim(x) == 0 or np.shape(x)[0] % n):
                raise ValueError(
                    f"state leaf {_path_str(path)} with shape {np.shape(x)} is sharded on its "
                    f"leading axis, which does not split over {n} devices"
                )
            return jax.device_put(x, sharding)

        return jax.tree_util.tree_map_with_path(
            put, layout, logical_state, shardings,
            is_leaf=lambda x: isinstance(x, LeafLayout))
