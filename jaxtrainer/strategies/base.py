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
from collections.abc import Callable, Sequence
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
from jaxtrainer.module import Module

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


# Log intervals one compiled training call can run, at most (rows of its
# metrics buffer: 128 x 2 float32 per metric).
MAX_INTERVALS_PER_CALL = 128


@dataclass(frozen=True)
class CompiledTrain:
    """A compiled training program.

    ``program(state, root_key, start_step: int32[], lengths: int32[max_intervals])
    -> (state, metrics)`` runs consecutive *log intervals* of ``lengths[j]``
    training steps each, from step ``start_step``, until the first zero length.
    ``metrics`` maps each name to a :class:`~jaxtrainer.metrics.Metric` (Mean,
    Sum, Max, Min or Last) whose fields are ``float32[max_intervals]``: row ``j``
    is interval ``j``'s value reduced over its steps and over devices by the
    metric's reduction (rows past the last interval have count 0).

    ``fn(state, root_key, start_step, num_steps) -> (state, metrics)`` is the
    one-interval form (scalar fields), for direct use and tests.

    For ``evaluation`` programs ``program`` and ``fn`` are both
    ``fn(state, key) -> metrics`` and ``max_intervals`` is 1.
    """

    program: Callable[..., tuple[Any, dict[str, metrics_lib.Metric]]]
    compile_seconds: float
    max_intervals: int = 1

    def fn(self, state: Any, root_key: jax.Array, *args: Any) -> Any:
        if len(args) != 2:  # an evaluation program: fn(state, key)
            return self.program(state, root_key, *args)
        start, num_steps = args
        lengths = np.zeros(self.max_intervals, np.int32)
        lengths[0] = int(num_steps)
        state, metrics = self.program(state, root_key, np.int32(start), lengths)
        return state, jax.tree.map(lambda x: x[0], metrics)


def _step_output(module: Module, out: Any) -> tuple[Any, dict]:
    """``training_step``'s ``(state, metrics)``, or a TypeError saying what it returned."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        got = (f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__)
        if isinstance(out, tuple) and len(out) == 2:
            got = f"(state, {type(out[1]).__name__})"
        raise TypeError(f"{type(module).__name__}.training_step must return "
                        f"(state, metrics: dict[str, scalar | jaxtrainer.metrics.Mean]), got {got}")
    return out


def _metric_means(module: Module, where: str, metrics: dict) -> dict[str, metrics_lib.Metric]:
    """Every metric as a :class:`~jaxtrainer.metrics.Metric` of float32 scalars
    (a plain scalar as a Mean); errors name the metric."""
    out = {}
    for name, value in metrics.items():
        try:
            if hasattr(value, "dtype") and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
                raise ValueError("a PRNG key is not a metric")
            out[name] = metrics_lib.as_metric(value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{type(module).__name__}.{where} metric {name!r}: {exc}") from None
    return out


def _step_name(module: Module) -> str:
    """How errors name the step function: ``<Module>.training_step``, or the
    ``step_function_name`` of a wrapping module (PopulationTrainer's names the
    population module's ask/tell)."""
    return getattr(module, "step_function_name", None) or f"{type(module).__name__}.training_step"


def _check_reductions(step: str, want: dict[str, type], got: dict[str, Any]) -> None:
    """A TypeError when a step returns other metric names or reductions than the
    first trace of the same step did (each metric keeps one reduction)."""
    if set(want) != set(got):
        raise TypeError(f"{step} returned the metrics {sorted(got)} in one trace and "
                        f"{sorted(want)} in another; return the same names at every step "
                        "(a metric with no samples: jaxtrainer.Mean(0.0, 0.0))")
    for name, value in got.items():
        kind = metrics_lib.reduction_of(value)
        if kind is not want[name]:
            raise TypeError(
                f"{step} metric {name!r} changes its reduction between steps: "
                f"{want[name].reduce_fx!r} ({want[name].__name__}) in one trace, "
                f"{kind.reduce_fx!r} ({kind.__name__}) in another. A metric is reduced over a "
                "log interval and over devices by one reduction; return it as the same "
                "jaxtrainer.metrics type (Mean or a plain scalar, Sum, Max, Min, Last) at "
                "every step")


def _dtype_kind(dtype: Any) -> str:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return f"key<{dtype}>"
    for kind, base in (("bool", jnp.bool_), ("unsigned integer", jnp.unsignedinteger),
                       ("signed integer", jnp.signedinteger), ("complex", jnp.complexfloating),
                       ("floating", jnp.floating)):
        if jnp.issubdtype(dtype, base):
            return kind
    return str(dtype)


def _keep_dtypes(new: Any, old: Any, step: str) -> Any:
    """``new`` (a step's per-device state) with every leaf of ``old``'s dtype.

    A leaf of the same kind but another width (float32 -> float64 under
    ``jax_enable_x64``, int32 -> int64, a weak-typed scalar) is cast back to
    ``old``'s dtype; another kind (float -> int, int -> bool, ...) or shape is a
    TypeError naming the leaf, both dtypes and ``step``.
    """
    def fix(path, x, ref):
        x = jnp.asarray(x)
        same = x.dtype == ref.dtype and x.shape == ref.shape
        if same:
            return x
        was, now = f"{ref.dtype}{list(ref.shape)}", f"{x.dtype}{list(x.shape)}"
        if x.shape != ref.shape:
            raise TypeError(
                f"{step} returns state leaf {_path_str(path)} as {now} but init_state made it "
                f"{was} (per-device shapes): the state keeps the shapes and dtypes init_state "
                "gave it; reshape it back, or make init_state create it with this shape")
        if _dtype_kind(x.dtype) != _dtype_kind(ref.dtype):
            raise TypeError(
                f"{step} returns state leaf {_path_str(path)} as {x.dtype} "
                f"({_dtype_kind(x.dtype)}) but init_state made it {ref.dtype} "
                f"({_dtype_kind(ref.dtype)}): the state keeps the dtypes init_state gave it, and "
                "only a change of width within one kind is cast back; cast it back with "
                f".astype({ref.dtype}) or make init_state create it as {x.dtype}")
        return jax.lax.convert_element_type(x, ref.dtype)

    return jax.tree_util.tree_map_with_path(fix, new, old)


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
    def init_state(self, module: Module, key: jax.Array) -> Any:
        """The global initial state on this strategy's mesh. ``key``: typed key."""
        layout = self.state_layout(module)

        def body(k):
            state = module.init_state(k)
            return self._expand(self._match_layout(state, layout, "init_state"), layout)

        fn = self._shard_map(body, P(), self._specs(layout))
        if not self.jit:
            with jax.disable_jit():
                return fn(key)
        return jax.jit(fn)(key)

    def _reduce_metrics(self, acc: dict[str, metrics_lib.Metric]) -> dict[str, metrics_lib.Metric]:
        """Every metric reduced over the data axes by its own reduction (Mean and
        Sum: psum of both fields; Max/Min: pmax/pmin; Last: mean of the devices'
        last values, exact when they agree)."""
        axes = self.data_axes
        return {name: m.over_devices(axes) for name, m in acc.items()}

    def _to_varying(self, tree: Any) -> Any:
        return to_varying(tree, self.data_axes)

    def compile_train(self, module: Module, state: Any, root_key: jax.Array) -> CompiledTrain:
        """Compile the training program: up to ``max_intervals`` log intervals of
        fused training steps in one call (see :class:`CompiledTrain`).

        Steps run in nested ``lax.fori_loop``s whose trip counts (the interval
        lengths) are traced int32 values, so every interval length and every
        number of intervals per call share one compilation. Step ``s`` on device
        ``d`` uses the key ``fold_in(fold_in(root_key, s), d)``: distinct per
        device and a pure function of (seed, step, device), so a run gives
        the same result however its steps are grouped into calls and resumed
        runs draw the same keys (``fold_in(root_key, s)`` on every device when
        the module sets ``step_key_per_device = False``). Each metric is reduced
        by its own reduction (:mod:`jaxtrainer.metrics`: Mean, Sum, Max, Min,
        Last) per interval over steps, then over devices once per call,
        replicated, without any host transfer inside; a metric whose reduction
        differs between traces of the step is a TypeError naming it.

        The state keeps the dtypes and shapes ``init_state`` gave it: a leaf
        that ``training_step`` returns with another width of the same kind
        (float32 -> float64 under ``jax_enable_x64``, int32 -> int64, a
        weak-typed scalar) is cast back; another kind (float -> int, int ->
        bool, ...) or shape is a TypeError at trace time naming the leaf, both
        dtypes and the step function.
        """
        layout = self.state_layout(module)
        axes = self.data_axes
        rows = MAX_INTERVALS_PER_CALL

        step_name = _step_name(module)

        def body(state, root_key, start, lengths):
            state = self._squeeze(state, layout)

            def one(step, carry):
                old, acc = carry
                key = jax.random.fold_in(root_key, step)
                if module.step_key_per_device:
                    key = jax.random.fold_in(key, jax.lax.axis_index(axes))
                st, mets = _step_output(module, module.training_step(old, key))
                self._check_structure(st, layout, "training_step")
                st = _keep_dtypes(st, old, step_name)
                st = self._match_layout(st, layout, step_name)
                _check_reductions(step_name, kinds, mets)
                mets = self._to_varying(_metric_means(module, "training_step", mets))
                return st, {name: acc[name].merge(m) for name, m in mets.items()}

            probe = _step_output(module, jax.eval_shape(
                module.training_step, state, jax.random.fold_in(root_key, start)))[1]
            kinds = {name: metrics_lib.reduction_of(value) for name, value in probe.items()}
            zero = self._to_varying({name: kind.empty() for name, kind in kinds.items()})
            buffer = self._to_varying({name: kind.empty((rows,)) for name, kind in kinds.items()})

            def interval(j, carry):
                st, buf, first = carry
                last = first + lengths[j]
                st, acc = jax.lax.fori_loop(first, last, one, (st, zero))
                buf = jax.tree.map(lambda b, a: b.at[j].set(a), buf, acc)
                return st, buf, last

            num_intervals = jnp.sum(lengths > 0)
            state, buffer, _ = jax.lax.fori_loop(0, num_intervals, interval, (state, buffer, start))
            return self._expand(state, layout), self._reduce_metrics(buffer)

        specs = self._specs(layout)
        fn = self._shard_map(body, (specs, P(), P(), P()), (specs, P()))
        compiled, seconds = self._compile(fn, state, root_key, jnp.zeros((), jnp.int32),
                                          jnp.zeros((rows,), jnp.int32), donate=(0,))
        return CompiledTrain(compiled, seconds, rows)

    def compile_eval(self, module: Module, state: Any, key: jax.Array) -> CompiledTrain:
        """Compile ``fn(state, key) -> metrics`` running ``evaluation_step`` on every device."""
        layout = self.state_layout(module)
        axes = self.data_axes

        def body(state, key):
            state = self._squeeze(state, layout)
            mets = module.evaluation_step(state, jax.random.fold_in(key, jax.lax.axis_index(axes)))
            if not isinstance(mets, dict):
                raise TypeError(f"{type(module).__name__}.evaluation_step must return a dict of "
                                f"metrics, got {type(mets).__name__}")
            mets = self._to_varying(_metric_means(module, "evaluation_step", mets))
            return self._reduce_metrics(mets)

        fn = self._shard_map(body, (self._specs(layout), P()), P())
        compiled, seconds = self._compile(fn, state, key)
        return CompiledTrain(compiled, seconds)

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
