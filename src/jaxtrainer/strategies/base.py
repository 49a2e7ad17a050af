"""The Strategy: where a Module's pure functions meet devices.

Every strategy here runs ``training_step`` under ``jax.jit(jax.shard_map(...))``
over a mesh whose data axis is :data:`jaxtrainer.distributed.AXIS_NAME`, with
``jax.pmap``'s semantics (no varying-axis check; :meth:`Strategy.shard_map`).
Subclasses only choose the devices and the mesh; this base class owns state
layout (replicated vs sharded leaves), per-device keys, fusing ``n`` steps in
one compiled loop, metric reduction and moving state between layouts.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxtrainer import _arguments as arguments
from jaxtrainer import metrics as metrics_lib
from jaxtrainer.distributed import AXIS_NAME
from jaxtrainer.distributed._axis import axis_size, size_probe
from jaxtrainer.distributed._process import broadcast_from_zero, rendezvous
from jaxtrainer.module import Module
from jaxtrainer.strategies import _program as program
from jaxtrainer.strategies import dependence
from jaxtrainer.strategies import layout as layout_lib
from jaxtrainer.strategies._program import EvalProgram, TrainProgram

DevicesArg = int | str | Sequence[int] | Sequence[jax.Device]


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
      jit: ``False`` skips ``jax.jit``'s compile and runs the programs under
        ``jax.disable_jit`` (op by op, for debugging); the strategy's ``shard_map``
        still traces the step, so a Python ``print`` there shows tracers: use
        ``jax.debug.print``, which prints values either way. Much slower and hungrier
        for memory than ``True``: for tiny configs only.
    """

    name: ClassVar[str] = ""

    def __init__(self, devices: DevicesArg = "auto", *, jit: bool = True) -> None:
        self._devices_arg = arguments.devices(devices)  # ValueError for a malformed value
        self.jit = jit
        self.mesh: Mesh | None = None
        self._traced_init: tuple[Module, tuple[Any, Any]] | None = None  # see abstract_state

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
        return arguments.pick_devices(self._devices_arg, list(available), type(self).__name__)

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

    def rendezvous(self, name: str) -> None:
        """Every process waits here for the others (through the coordination
        service, not a collective; :func:`jaxtrainer.distributed._process.rendezvous`)
        before a program's first collective. Nothing happens with one process."""
        if self.process_count > 1:
            rendezvous(name)

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
    def shard_map(self, fn, in_specs, out_specs):
        """``jax.shard_map`` of ``fn`` over this strategy's mesh
        with ``jax.pmap``'s semantics (``check_vma=False``): module code needs no
        varying-axis casts, and a gradient with respect to replicated parameters
        is each device's own. The layout checks of :mod:`~jaxtrainer.strategies.layout`
        stand in for the varying-axis types."""
        return jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs,
                             out_specs=out_specs, check_vma=False)

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

    def _probe_init(self, init: Any, hyperparams: Any) -> Any:
        """``init``'s trace (``jax.jit(...).trace`` of ``init(key, hyperparams)``)
        on one device of the mesh."""
        found: list[Any] = []

        def probe(key, hp):  # both arguments as the init program passes them: one trace
            found.append(init.trace(key, hp))
            return jnp.zeros((), jnp.float32)

        jax.eval_shape(self.shard_map(probe, (P(), P()), P()), jax.random.key(0),
                       self.to_global(hyperparams))
        return found[0]

    def state_layout(self, module: Module) -> Any:
        """A pytree of :class:`LeafLayout`, one per leaf of ``module.init_state``,
        by the rule of :mod:`jaxtrainer.strategies.layout`: per-device when
        ``init_state`` computes the leaf from the device's key or index or sizes
        it by the device count, replicated otherwise.

        Traces ``init_state`` twice: as it is (a trace the init program reuses)
        and with :func:`~jaxtrainer.distributed.local_size` one larger
        (:func:`~jaxtrainer.distributed._axis.size_probe`), to see which leaves
        it sizes."""
        return self._layout_entry(module)[1]

    def _layout_entry(self, module: Module) -> tuple[Module, Any, Any, Any]:
        """``(module, layout, jitted init, hyperparams)``, cached per module:
        ``init(key, hyperparams)`` is ``module.init_state(key)``, or
        ``module.init_state(key, hyperparams=hyperparams)`` for a module that
        takes its traced hyperparameters as an argument
        (:meth:`~jaxtrainer.Module.initial_hyperparams` as host ``float32``
        scalars; ``None`` for other modules), so the init program holds no
        hyperparameter values as constants."""
        self.setup()
        cache = getattr(self, "_layout_cache", {})
        if id(module) in cache:
            return cache[id(module)]
        values = module.initial_hyperparams()
        hyperparams = (None if values is None else
                       {name: np.asarray(jax.device_get(v), np.float32) for name, v in values.items()})

        def call(key, hp):
            return module.init_state(key) if hp is None else module.init_state(key, hyperparams=hp)

        init = jax.jit(call)
        if module.global_view:  # global shapes; XLA partitions: the split is for speed only
            shapes = init.eval_shape(jax.random.key(0), hyperparams)
            found = layout_lib.infer_global(shapes, module.num_envs, self.num_devices)
            cache[id(module)] = (module, found, init, hyperparams)
            self._layout_cache = cache
            return cache[id(module)]
        traced = self._probe_init(init, hyperparams)
        # the key and the hyperparameters are the same on every device
        deps = dependence.tree_dependence(
            traced, (frozenset(), jax.tree.map(lambda _: frozenset(), hyperparams)))
        try:
            with size_probe():  # a new function: jit's trace cache knows nothing of the probe
                other = self._probe_init(jax.jit(lambda k, hp: call(k, hp)), hyperparams).out_info
        except (TypeError, ValueError):  # sizes that only fit as they are: deps decide
            other = None
        if other is not None:
            # leaf by leaf: static metadata (a flax TrainState's optimizer, made anew in
            # each trace) may differ between two traces of the same state
            leaves = jax.tree.leaves(other)
            tree = jax.tree.structure(traced.out_info)
            other = jax.tree.unflatten(tree, leaves) if len(leaves) == tree.num_leaves else None
        found = layout_lib.infer(deps, traced.out_info, other, self.data_axes)
        cache[id(module)] = (module, found, init, hyperparams)  # module alive: its id stays unique
        self._layout_cache = cache
        return cache[id(module)]

    def shardings(self, module: Module) -> Any:
        """``NamedSharding`` of every leaf of the global state."""
        specs = self.specs(self.state_layout(module))
        mesh = self.auto_mesh() if module.global_view else self.mesh
        return jax.tree.map(lambda s: NamedSharding(mesh, s), specs,
                            is_leaf=lambda x: isinstance(x, P))

    def auto_mesh(self) -> Mesh:
        """This strategy's mesh (same devices, shape and axis names) with
        automatic axis types: a ``global_view`` module's programs are
        partitioned over it by XLA, so its code needs no sharding annotations."""
        self.setup()
        if getattr(self, "_auto_mesh", None) is None:
            self._auto_mesh = Mesh(self.mesh.devices, self.mesh.axis_names,
                                   axis_types=(jax.sharding.AxisType.Auto,) * self.mesh.devices.ndim)
        return self._auto_mesh

    def _on_auto_mesh(self, tree: Any) -> Any:
        """Shapes and dtypes of ``tree``'s leaves (arrays or ``ShapeDtypeStruct``s),
        their shardings moved to :meth:`auto_mesh`: lowering a ``global_view``
        program for values on the explicit mesh would type them by it. The
        compiled program then takes the values themselves."""
        mesh = self.auto_mesh()

        def move(x):
            sharding = getattr(x, "sharding", None)
            if isinstance(sharding, NamedSharding):
                sharding = NamedSharding(mesh, sharding.spec)
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding,
                                        weak_type=getattr(x, "weak_type", False))

        return jax.tree.map(move, tree)

    def _replicated(self, module: Module) -> NamedSharding:
        """The sharding of values every device holds whole, on ``module``'s mesh."""
        return NamedSharding(self.auto_mesh() if module.global_view else self.mesh, P())

    # ---- programs --------------------------------------------------------
    def specs(self, layout: Any) -> Any:
        """``PartitionSpec`` of every leaf laid out as ``layout`` on this mesh."""
        return layout_lib.specs(layout, self.data_axes)

    def _init_program(self, module: Module) -> tuple[Any, Any]:
        """``(program, hyperparams)``: ``jax.jit`` of the init program of
        ``module``, called as ``program(key, hyperparams)``; it reuses the trace
        of ``init_state`` that :meth:`state_layout` made."""
        _, layout, init, hyperparams = self._layout_entry(module)
        if module.global_view:
            return jax.jit(init, out_shardings=self.shardings(module)), hyperparams

        def body(k, hp):
            return layout_lib.expand(init(k, hp), layout)

        return jax.jit(self.shard_map(body, (P(), P()), self.specs(layout))), hyperparams

    def init_state(self, module: Module, key: jax.Array) -> Any:
        """The global initial state on this strategy's mesh. ``key``: typed key.

        Right after ``abstract_state(module, keep=True)`` it runs the program that
        call traced (in one process, one trace of ``init_state`` for both)."""
        kept, self._traced_init = self._traced_init, None
        fn, hyperparams = (kept[1] if kept is not None and kept[0] is module
                           else self._init_program(module))
        hyperparams = self.to_global(hyperparams)
        if not self.jit:
            with jax.disable_jit():
                return fn(key, hyperparams)
        return fn(key, hyperparams)

    def abstract_state(self, module: Module, keep: bool = False) -> Any:
        """The global state :meth:`init_state` makes, as ``jax.ShapeDtypeStruct``
        leaves with this strategy's shardings. Nothing runs. ``keep``: keep the
        traced program for the next :meth:`init_state` of ``module``, which
        uses it once (a fresh ``fit`` calls the two in this order; another
        ``abstract_state`` call replaces or drops it)."""
        program = self._init_program(module)
        shapes = program[0].eval_shape(jax.random.key(0), program[1])
        self._traced_init = (module, program) if keep else None
        return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                            shapes, self.shardings(module))

    def reduce_metrics(self, acc: dict[str, metrics_lib.Metric]) -> dict[str, metrics_lib.Metric]:
        """Every metric reduced over the data axes by its own reduction (Mean and
        Sum: psum of both fields; Max/Min: pmax/pmin; Last: mean of the devices'
        last values, exact when they agree). Inside the programs only; over one
        device they are the device's own (no collective is left in the program)."""
        axes = self.data_axes
        if axis_size(axes) == 1:
            return acc
        return {name: m.over_devices(axes) for name, m in acc.items()}

    def compile_train(self, module: Module, state: Any, train_key: jax.Array) -> TrainProgram:
        """Compile the training program (:class:`~jaxtrainer.strategies._program.TrainProgram`,
        its body :func:`~jaxtrainer.strategies._program.fused_intervals`) for
        arrays shaped like ``state`` and ``train_key`` (arrays or
        ``ShapeDtypeStruct``s); it donates the state."""
        layout = self.state_layout(module)
        specs = self.specs(layout)
        body, found = program.fused_intervals(self, module, layout)
        if module.global_view:
            shardings, rep = self.shardings(module), self._replicated(module)
            fn = jax.jit(body, in_shardings=(shardings, rep, rep, rep),
                         out_shardings=(shardings, rep))
            state, train_key = self._on_auto_mesh((state, train_key))
        else:
            fn = self.shard_map(body, (specs, P(), P(), P()), (specs, P()))
        rows = program.MAX_INTERVALS_PER_CALL
        compiled, seconds = self._compile(fn, state, train_key, jnp.zeros((), jnp.int32),
                                          jnp.zeros((rows,), jnp.int32), donate=(0,))
        if not found:  # eagerly run (jit off): the first call traces the body
            jax.eval_shape(fn, state, train_key, jnp.zeros((), jnp.int32),
                           jnp.zeros((rows,), jnp.int32))
        return program.TrainProgram(compiled, seconds, rows, found["groups"], found["names"])

    def _eval_fn(self, module: Module, state: Any, key: jax.Array) -> tuple[Any, Any, Any]:
        """``(fn, state, key)``: the evaluation program's function and its arguments."""
        layout = self.state_layout(module)
        body = program.evaluation(self, module, layout)
        if module.global_view:
            rep = self._replicated(module)
            fn = jax.jit(body, in_shardings=(self.shardings(module), rep), out_shardings=rep)
            state, key = self._on_auto_mesh((state, key))
        else:
            fn = self.shard_map(body, (self.specs(layout), P()), P())
        return fn, state, key

    def trace_eval(self, module: Module, state: Any, key: jax.Array) -> tuple[Any, float]:
        """The evaluation program traced (``evaluation_step`` run on abstract
        values; no XLA compile) for arrays shaped like ``state`` and ``key``:
        ``(traced, seconds)`` for :meth:`compile_eval`. Raises what
        ``evaluation_step`` raises when traced (shape errors, a result that is
        not a dict of scalar metrics)."""
        start = time.perf_counter()
        fn, state, key = self._eval_fn(module, state, key)
        if not self.jit:
            jax.eval_shape(fn, state, key)
            return None, time.perf_counter() - start
        return jax.jit(fn).trace(state, key), time.perf_counter() - start

    def compile_eval(self, module: Module, state: Any, key: jax.Array,
                     traced: tuple[Any, float] | None = None) -> EvalProgram:
        """Compile the evaluation program (:class:`~jaxtrainer.strategies._program.EvalProgram`,
        ``evaluation_step`` on every device with the evaluation's key); from
        ``traced`` (:meth:`trace_eval` of the same arguments) when given."""
        if traced is None or not self.jit:
            compiled, seconds = self._compile(*self._eval_fn(module, state, key))
            return program.EvalProgram(compiled, seconds)
        start = time.perf_counter()
        compiled = traced[0].lower().compile()
        return program.EvalProgram(compiled, traced[1] + time.perf_counter() - start)

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
                    f"state leaf {layout_lib.path_str(path)} with shape {np.shape(x)} is sharded on its "
                    f"leading axis, which does not split over {n} devices"
                )
            return jax.device_put(x, sharding)

        return jax.tree_util.tree_map_with_path(
            put, layout, logical_state, shardings,
            is_leaf=layout_lib.is_layout)
