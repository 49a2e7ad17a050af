"""The two compiled programs of a run, and the fused interval loop they run.

A **training program** runs consecutive log intervals of training steps in one
call; an **evaluation program** runs ``evaluation_step`` once. Both are traced
per device inside ``jax.shard_map`` by a :class:`~jaxtrainer.strategies.Strategy`,
which owns the state layout; this module owns what happens inside: the step
keys, the checks on what a step returns, and the metric reductions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import metrics as metrics_lib
from jaxtrainer.distributed import keys
from jaxtrainer.module import Module

if TYPE_CHECKING:
    from jaxtrainer.strategies.base import Strategy

MAX_INTERVALS_PER_CALL = 128
"""Log intervals one training call can run, at most (rows of its metrics buffer)."""


@dataclass(frozen=True)
class TrainProgram:
    """A compiled training program.

    ``program(state, train_key, start_step: int32[], lengths: int32[max_intervals])
    -> (state, metrics)`` runs consecutive *log intervals* of ``lengths[j]``
    training steps each, from step ``start_step``, until the first zero length,
    and donates ``state``. ``metrics`` maps each name to a
    :class:`~jaxtrainer.metrics.Metric` (Mean, Sum, Max, Min or Last) whose
    fields are ``float32[max_intervals]``: row ``j`` is interval ``j``'s value
    reduced over its steps and over devices (rows past the last have count 0).
    """

    program: Callable[..., tuple[Any, dict[str, metrics_lib.Metric]]]
    compile_seconds: float
    max_intervals: int = MAX_INTERVALS_PER_CALL

    def fn(self, state: Any, train_key: jax.Array, start: int, num_steps: int) -> Any:
        """One interval of ``num_steps`` steps from ``start``: ``(state, metrics)``
        with scalar metric fields (for direct use and tests)."""
        lengths = np.zeros(self.max_intervals, np.int32)
        lengths[0] = int(num_steps)
        state, metrics = self.program(state, train_key, np.int32(start), lengths)
        return state, jax.tree.map(lambda x: x[0], metrics)


@dataclass(frozen=True)
class EvalProgram:
    """A compiled evaluation program: ``program(state, key) -> metrics``, each
    metric reduced over devices (scalar fields)."""

    program: Callable[..., dict[str, metrics_lib.Metric]]
    compile_seconds: float

    def fn(self, state: Any, key: jax.Array) -> dict[str, metrics_lib.Metric]:
        return self.program(state, key)


def _path_str(path) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def step_name(module: Module) -> str:
    """How errors name the step function: ``<Module>.training_step``, or the
    ``step_function_name`` of a wrapping module (PopulationTrainer's names the
    population module's ask/tell)."""
    return getattr(module, "step_function_name", None) or f"{type(module).__name__}.training_step"


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


def check_reductions(step: str, want: dict[str, type], got: dict[str, Any]) -> None:
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


def fused_intervals(strategy: Strategy, module: Module, layout: Any) -> Callable:
    """The training program's per-device body: ``body(state, train_key, start,
    lengths) -> (state, metrics)``, traced inside ``shard_map``.

    Log interval ``j`` runs ``lengths[j]`` training steps in a ``lax.fori_loop``
    whose trip count is traced, inside a loop over the intervals, so every
    interval length and number of intervals per call share one compilation.
    Step ``s`` on device ``d`` uses :func:`jaxtrainer.distributed.keys.step_key`
    ``(train_key, s, d)`` (``d`` left out when ``module.step_key_per_device`` is
    False). Each step's state is checked against the layout and keeps its
    ``init_state`` dtypes (:func:`keep_dtypes`); each metric is reduced by its
    own reduction over the interval's steps, then over devices once per call.
    """
    name, axes = step_name(module), strategy.data_axes

    def body(state, train_key, start, lengths):
        state = strategy._squeeze(state, layout)
        probe = step_output(module, jax.eval_shape(
            module.training_step, state, keys.step_key(train_key, start, None)))[1]
        kinds = {k: metrics_lib.reduction_of(v) for k, v in probe.items()}
        zero = strategy._to_varying({k: kind.empty() for k, kind in kinds.items()})
        rows = lengths.shape[0]
        buffer = strategy._to_varying({k: kind.empty((rows,)) for k, kind in kinds.items()})

        def one_step(step, carry):
            old, acc = carry
            device = jax.lax.axis_index(axes) if module.step_key_per_device else None
            new, mets = step_output(module, module.training_step(old, keys.step_key(
                train_key, step, device)))
            strategy._check_structure(new, layout, "training_step")
            new = strategy._match_layout(keep_dtypes(new, old, name), layout, name)
            check_reductions(name, kinds, mets)
            mets = strategy._to_varying(as_metrics(module, "training_step", mets))
            return new, {k: acc[k].merge(m) for k, m in mets.items()}

        def one_interval(j, carry):
            st, buf, first = carry
            last = first + lengths[j]
            st, acc = jax.lax.fori_loop(first, last, one_step, (st, zero))
            return st, jax.tree.map(lambda b, a: b.at[j].set(a), buf, acc), last

        num_intervals = jnp.sum(lengths > 0)
        state, buffer, _ = jax.lax.fori_loop(0, num_intervals, one_interval, (state, buffer, start))
        return strategy._expand(state, layout), strategy._reduce_metrics(buffer)

    return body


def evaluation(strategy: Strategy, module: Module, layout: Any) -> Callable:
    """The evaluation program's per-device body: ``body(state, key) -> metrics``
    running ``evaluation_step`` with ``fold_in(key, d)`` on device ``d``, each
    metric reduced over devices."""
    axes = strategy.data_axes

    def body(state, key):
        state = strategy._squeeze(state, layout)
        mets = module.evaluation_step(state, keys.device_key(key, jax.lax.axis_index(axes)))
        if not isinstance(mets, dict):
            raise TypeError(f"{type(module).__name__}.evaluation_step must return a dict of "
                            f"metrics, got {type(mets).__name__}")
        return strategy._reduce_metrics(strategy._to_varying(as_metrics(module, "evaluation_step", mets)))

    return body
