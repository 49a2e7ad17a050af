"""The two compiled programs of a run, and the fused interval loop they run.

A **training program** runs consecutive log intervals of training steps in one
call; an **evaluation program** runs ``evaluation_step`` once. Both are traced
per device inside ``jax.shard_map`` by a :class:`~jaxtrainer.strategies.Strategy`,
which owns the state layout (a ``global_view`` module's once, over global arrays,
under ``jax.jit`` with shardings: no device axis is bound, its key is device 0's
and its metrics need no reduction over devices); this module owns what happens inside: the step
keys, the checks on what a step returns, and the metric reductions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import metrics as metrics_lib
from jaxtrainer.distributed import keys
from jaxtrainer.module import Module
from jaxtrainer.strategies import dependence
from jaxtrainer.strategies import layout as layout_lib

if TYPE_CHECKING:
    from jaxtrainer.strategies.base import Strategy

MAX_INTERVALS_PER_CALL = 128
"""Log intervals one training call can run, at most (rows of its metrics buffer)."""


@dataclass(frozen=True)
class TrainProgram:
    """A compiled training program.

    ``program(state, train_key, start_step: int32[], lengths: int32[max_intervals])
    -> (state, packed)`` runs consecutive *log intervals* of ``lengths[j]``
    training steps each, from step ``start_step``, until the first zero length,
    and donates ``state``. ``packed`` holds the metrics as one
    :class:`~jaxtrainer.metrics.Metric` per reduction (:func:`pack`), fields
    ``float32[max_intervals, n]``; :meth:`metrics` names them: each name maps to
    a Metric (Mean, Sum, Max, Min or Last) whose fields are
    ``float32[max_intervals]``, row ``j`` interval ``j``'s value reduced over its
    steps and over devices (rows past the last have count 0).
    """

    program: Callable[..., tuple[Any, dict[str, metrics_lib.Metric]]]
    compile_seconds: float
    max_intervals: int = MAX_INTERVALS_PER_CALL
    metric_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    metric_names: tuple[str, ...] = ()

    def metrics(self, packed: dict[str, metrics_lib.Metric]) -> dict[str, metrics_lib.Metric]:
        """``{name: Metric}`` from a call's ``packed`` metrics, in the order
        ``training_step`` returned them (host arrays when ``packed`` is on the host)."""
        return unpack(self.metric_groups, packed, self.metric_names)

    def fn(self, state: Any, train_key: jax.Array, start: int, num_steps: int) -> Any:
        """One interval of ``num_steps`` steps from ``start``: ``(state, metrics)``
        with scalar metric fields (for direct use and tests)."""
        lengths = np.zeros(self.max_intervals, np.int32)
        lengths[0] = int(num_steps)
        state, packed = self.program(state, train_key, np.int32(start), lengths)
        return state, jax.tree.map(lambda x: x[0], self.metrics(packed))


@dataclass(frozen=True)
class EvalProgram:
    """A compiled evaluation program: ``program(state, key) -> metrics``, each
    metric reduced over devices (scalar fields)."""

    program: Callable[..., dict[str, metrics_lib.Metric]]
    compile_seconds: float

    def fn(self, state: Any, key: jax.Array) -> dict[str, metrics_lib.Metric]:
        return self.program(state, key)


def step_name(module: Module) -> str:
    """How errors name the step function: ``<Module>.training_step``, or the
    ``step_function_name`` of a wrapping module (PopulationTrainer's names the
    population module's ask/tell)."""
    return module.step_function_name or f"{type(module).__name__}.training_step"


def step_output(module: Module, out: Any) -> tuple[Any, dict]:
    """``training_step``'s ``(state, metrics)``, or a TypeError saying what it returned."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        got = (f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__)
        if isinstance(out, tuple) and len(out) == 2:
            got = f"(state, {type(out[1]).__name__})"
        raise TypeError(f"{type(module).__name__}.training_step must return "
                        f"(state, metrics: dict[str, scalar | jaxtrainer.metrics.Mean]), got {got}")
    return out


def as_metrics(module: Module, where: str, metrics: dict) -> dict[str, metrics_lib.Metric]:
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


def _dtype_kind(dtype: Any) -> str:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return f"key<{dtype}>"
    for kind, base in (("bool", jnp.bool_), ("unsigned integer", jnp.unsignedinteger),
                       ("signed integer", jnp.signedinteger), ("complex", jnp.complexfloating),
                       ("floating", jnp.floating)):
        if jnp.issubdtype(dtype, base):
            return kind
    return str(dtype)


def keep_dtypes(new: Any, old: Any, step: str) -> Any:
    """``new`` (a step's per-device state) with every leaf of ``old``'s dtype.

    A leaf of the same kind but another width (float32 -> float64 under
    ``jax_enable_x64``, int32 -> int64, a weak-typed scalar) is cast back to
    ``old``'s dtype; another kind (float -> int, int -> bool, ...) or shape is a
    TypeError naming the leaf, both dtypes and ``step``.
    """
    def fix(path, x, ref):
        x = jnp.asarray(x)
        if x.dtype == ref.dtype and x.shape == ref.shape:
            return x
        was, now = f"{ref.dtype}{list(ref.shape)}", f"{x.dtype}{list(x.shape)}"
        if x.shape != ref.shape:
            raise TypeError(
                f"{step} returns state leaf {layout_lib.path_str(path)} as {now} but init_state made it "
                f"{was} (per-device shapes): the state keeps the shapes and dtypes init_state "
                "gave it; reshape it back, or make init_state create it with this shape")
        if _dtype_kind(x.dtype) != _dtype_kind(ref.dtype):
            raise TypeError(
                f"{step} returns state leaf {layout_lib.path_str(path)} as {x.dtype} "
                f"({_dtype_kind(x.dtype)}) but init_state made it {ref.dtype} "
                f"({_dtype_kind(ref.dtype)}): the state keeps the dtypes init_state gave it, and "
                "only a change of width within one kind is cast back; cast it back with "
                f".astype({ref.dtype}) or make init_state create it as {x.dtype}")
        return jax.lax.convert_element_type(x, ref.dtype)

    return jax.tree_util.tree_map_with_path(fix, new, old)


def group_by_reduction(kinds: dict[str, type]) -> dict[str, tuple[str, ...]]:
    """Metric names grouped by reduction: ``{reduction class's qualified name:
    names}``, in the order the names first appear."""
    groups: dict[str, list[str]] = {}
    for metric, kind in kinds.items():
        groups.setdefault(f"{kind.__module__}.{kind.__qualname__}", []).append(metric)
    return {g: tuple(names) for g, names in groups.items()}


def pack(groups: dict[str, tuple[str, ...]],
         metrics: dict[str, metrics_lib.Metric]) -> dict[str, metrics_lib.Metric]:
    """One :class:`~jaxtrainer.metrics.Metric` per reduction whose fields stack
    its metrics' scalar fields (``float32[len(names)]``): a loop then carries
    two arrays per reduction, not two per metric, and every reduction is
    element-wise, so the packed values merge and reduce over devices as one."""
    return {g: jax.tree.map(lambda *fields: jnp.stack(fields, axis=-1),
                            *(metrics[n] for n in names))
            for g, names in groups.items()}


def unpack(groups: dict[str, tuple[str, ...]], packed: dict[str, metrics_lib.Metric],
           order: Any) -> dict[str, metrics_lib.Metric]:
    """The inverse of :func:`pack`: ``{name: Metric}`` in the order of the names
    in ``order``, fields indexed on the last axis."""
    where = {n: (g, i) for g, names in groups.items() for i, n in enumerate(names)}
    return {n: jax.tree.map(lambda x, i=where[n][1]: x[..., i], packed[where[n][0]])
            for n in order}


def _checked_metric_shapes(traced: Any, layout: Any, name: str,
                           per_device: tuple[Any, frozenset] | None) -> Any:
    """The metric shapes of a traced ``training_step``, after checking the state
    it returns against the layout: its structure always, and, with
    ``per_device=(axes, key_axes)``, that no replicated leaf comes to differ
    between devices (a global view has no per-device values to check)."""
    new, shapes = traced.out_info
    layout_lib.check_structure(new, layout, name)
    if per_device is not None:
        axes, key_axes = per_device
        deps = dependence.tree_dependence(
            traced, (layout_lib.input_dependence(layout, axes), key_axes))[0]
        layout_lib.check_replicated(deps, layout, name)
    return shapes


def fused_intervals(strategy: Strategy, module: Module,
                    layout: Any) -> tuple[Callable, dict[str, Any]]:
    """The training program's per-device body and what its trace found:
    ``(body, found)``. ``body(state, train_key, start, lengths) -> (state,
    packed)`` is traced inside ``shard_map``; tracing it fills ``found`` with
    ``groups`` (:func:`group_by_reduction` of the step's metrics) and ``names``
    (their order), which :class:`TrainProgram` needs to name ``packed``.

    One ``lax.fori_loop`` with a traced trip count runs the call's steps, so
    every interval length and number of intervals per call share one
    compilation; the metrics of the interval in progress accumulate in the
    loop and are written to its row after every step. ``training_step`` is
    traced once (one ``jax.jit`` of it serves the shape probe and the loop).
    Step ``s`` on device ``d`` uses :func:`jaxtrainer.distributed.keys.step_key`
    ``(train_key, s, d)`` (``d`` left out when ``module.step_key_per_device`` is
    False). Each step's state is checked against the layout and keeps its
    ``init_state`` dtypes (:func:`keep_dtypes`); each metric is reduced by its
    own reduction over the interval's steps, then over devices once per call.
    """
    name, axes = step_name(module), strategy.data_axes
    found: dict[str, Any] = {}

    def checked_step(state, key):
        # what the step returns is checked (and its metrics made Metrics) inside
        # the trace, so a bad return value gets this module's message, not jit's
        new, mets = step_output(module, module.training_step(state, key))
        return new, as_metrics(module, "training_step", mets)

    # One jit of the step: the probe below traces it, and the loop's call with
    # the same argument types reuses that trace (the step is traced once).
    training_step = jax.jit(checked_step)

    whole = module.global_view  # global arrays, no device axis bound: device 0's key

    def step_key(train_key, step):
        device = (0 if whole else jax.lax.axis_index(axes)) if module.step_key_per_device else None
        return keys.step_key(train_key, step, device)

    key_axes = frozenset(axes) if module.step_key_per_device else frozenset()

    def body(state, train_key, start, lengths):
        state = layout_lib.squeeze(state, layout)
        traced = training_step.trace(state, step_key(train_key, start))
        shapes = _checked_metric_shapes(traced, layout, name, None if whole else (axes, key_axes))
        kinds = {k: metrics_lib.reduction_of(v) for k, v in shapes.items()}
        groups = group_by_reduction(kinds)
        found.update(groups=groups, names=tuple(kinds))
        zero = {g: kinds[names[0]].empty((len(names),)) for g, names in groups.items()}
        rows = lengths.shape[0]
        buffer = {g: kinds[names[0]].empty((rows, len(names))) for g, names in groups.items()}

        # interval j ends before step ends[j]; one loop over the call's steps
        # (not a loop per interval inside a loop over intervals) compiles faster.
        # Lengths after the first zero count as zero.
        lengths = lengths * jnp.cumprod(lengths > 0).astype(lengths.dtype)
        ends = start + jnp.cumsum(lengths)

        def one_step(step, carry):
            old, acc, buf, j = carry
            new, mets = training_step(old, step_key(train_key, step))
            new = keep_dtypes(new, old, name)
            mets = pack(groups, mets)
            acc = {g: acc[g].merge(m) for g, m in mets.items()}
            buf = jax.tree.map(lambda b, a: jax.lax.dynamic_update_index_in_dim(b, a, j, 0), buf, acc)
            done = step + 1 == ends[j]
            acc = jax.tree.map(lambda a, z: jnp.where(done, z, a), acc, zero)
            return new, acc, buf, j + done.astype(j.dtype)

        state, _, buffer, _ = jax.lax.fori_loop(
            start, ends[-1], one_step, (state, zero, buffer, jnp.zeros((), jnp.int32)))
        state = layout_lib.expand(state, layout)
        return state, (buffer if whole else strategy.reduce_metrics(buffer))

    return body, found


def evaluation(strategy: Strategy, module: Module, layout: Any) -> Callable:
    """The evaluation program's per-device body: ``body(state, key) -> metrics``
    running ``evaluation_step`` with the same ``key`` on every device (episodes
    take their keys from it by their number over all devices,
    :func:`jaxtrainer.envs.evaluation.episode_share`, so an evaluation does
    not depend on the device count), each metric reduced over devices (a
    ``global_view`` module's metrics are global already)."""
    whole = module.global_view

    def body(state, key):
        state = layout_lib.squeeze(state, layout)
        mets = module.evaluation_step(state, key)
        if not isinstance(mets, dict):
            raise TypeError(f"{type(module).__name__}.evaluation_step must return a dict of "
                            f"metrics, got {type(mets).__name__}")
        mets = as_metrics(module, "evaluation_step", mets)
        return mets if whole else strategy.reduce_metrics(mets)

    return body
