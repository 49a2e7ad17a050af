"""Metric values that carry their reduction (Lightning's ``reduce_fx``).

``training_step`` returns ``dict[str, scalar | Mean | Sum | Max | Min | Last]``.
A metric is reported once per log interval, reduced over the interval's steps
and over devices (and, in :class:`~jaxtrainer.PopulationTrainer`, over the
generations of the interval) by its own reduction:

=========  ==============================  ==================================
reduction  over the steps of an interval   over devices
=========  ==============================  ==================================
``Mean``   sum of totals / sum of counts   the same (samples pooled)
``Sum``    sum                             ``psum``
``Max``    max of maxes                    ``pmax``
``Min``    min of mins                     ``pmin``
``Last``   the last step's value           mean of the devices' last values
                                           (exact when they agree, as a
                                           replicated learning rate does)
=========  ==============================  ==================================

A plain scalar is a :class:`Mean` of one sample. ``X.of(values, mask)`` reduces
an array with ``X``'s reduction (``Max.of(fitness)`` is the best member), only
where ``mask`` is set. Every value counts its samples: an interval in which a
metric had none (all masked out, e.g. the return of completed episodes when no
episode completed) reports nothing rather than 0.0, whatever the reduction.
A metric keeps one reduction in every step: the training program traces
``training_step`` once, and every step runs that trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Axes = str | Sequence[str]
_INF = float("inf")


def _xp(*arrays: Any) -> Any:
    """``numpy`` for host values (what :func:`rows_to_host` fetched), else
    ``jax.numpy``: :meth:`Metric.merge` runs on the devices and on the host."""
    host = all(isinstance(a, (np.ndarray, np.generic, float, int)) for a in arrays)
    return np if host else jnp


def _flat(values: Any, mask: Any) -> tuple[jax.Array, jax.Array | None]:
    """``values`` as ``float32[n]`` and ``mask`` as ``bool[n]``, both broadcast
    to their common shape."""
    values = jnp.asarray(values, jnp.float32)
    if mask is None:
        return values.reshape(-1), None
    values, mask = jnp.broadcast_arrays(values, jnp.asarray(mask, bool))
    return values.reshape(-1), mask.reshape(-1)


def _count(values: jax.Array, mask: jax.Array | None) -> jax.Array:
    if mask is None:
        return jnp.asarray(values.size, jnp.float32)
    return jnp.sum(mask, dtype=jnp.float32)


class Metric:
    """Base of the metric values that carry a reduction.

    Subclasses are flax struct dataclasses of two float32 arrays: the reduced
    value (``total`` for :class:`Mean` and :class:`Sum`, ``value`` for the
    others) and ``count``, the number of samples it reduces. A value with
    ``count == 0`` stands for "no samples" and is never reported. Arrays may
    carry leading axes (rows of a metrics buffer, members of a population);
    every method works elementwise over them.
    """

    reduce_fx = ""     # "mean", "sum", "max", "min" or "last"
    _main = "value"    # name of the field holding the reduced value
    _identity = 0.0    # the value of "no samples"

    @property
    def reduced(self) -> jax.Array:
        """The reduced value (``total`` or ``value``)."""
        return getattr(self, self._main)

    @classmethod
    def of(cls, values: jax.Array, mask: jax.Array | None = None) -> Any:
        """``values`` (any shape) reduced by this class's reduction where ``mask``
        (bool, broadcast with them) is set, counting those samples. Values
        outside the mask are never read (an ``inf`` or ``NaN`` there is left out)."""
        values, mask = _flat(values, mask)
        return cls(cls._reduce_flat(values, mask), _count(values, mask))

    @classmethod
    def _reduce_flat(cls, values: jax.Array, mask: jax.Array | None) -> jax.Array:
        """The reduced value of ``float32[n]`` ``values`` where ``bool[n]`` ``mask``
        is set (everywhere when ``None``)."""
        raise NotImplementedError

    @classmethod
    def empty(cls, shape: tuple[int, ...] = ()) -> Any:
        """No samples: the identity of :meth:`merge`."""
        return cls(jnp.full(shape, cls._identity, jnp.float32), jnp.zeros(shape, jnp.float32))

    def scalar(self) -> Any:
        """This value with float32 scalar fields.

        Raises:
          ValueError: a field holds more than one element.
        """
        main, count = jnp.asarray(self.reduced, jnp.float32), jnp.asarray(self.count, jnp.float32)
        if main.size != 1 or count.size != 1:
            raise ValueError(f"a {type(self).__name__} metric must hold scalars, got shapes "
                             f"{main.shape} and {count.shape}: build it with "
                             f"{type(self).__name__}.of(values)")
        return type(self)(main.reshape(()), count.reshape(()))

    def keep(self, where: jax.Array) -> Any:
        """This value where ``where`` is set, "no samples" elsewhere."""
        where = jnp.asarray(where, bool)
        return type(self)(jnp.where(where, self.reduced, self._identity),
                          jnp.where(where, self.count, 0.0))

    def merge(self, later: Any) -> Any:
        """This value followed by ``later`` (the next steps): same reduction."""
        raise NotImplementedError

    def over_devices(self, axes: Axes) -> Any:
        """Reduced over the mesh axes ``axes`` (inside ``shard_map``)."""
        raise NotImplementedError

    def over_members(self, mask: jax.Array | None = None) -> Any:
        """Reduced over the leading axis (e.g. the members of a population),
        counting only the rows where ``mask`` (``bool[L]``) is set."""
        raise NotImplementedError

    @staticmethod
    def finish(reduced: float, count: float) -> float:
        """The reported number of a value with ``count > 0`` samples (host)."""
        return reduced


class _Additive(Metric):
    _main = "total"

    @classmethod
    def _reduce_flat(cls, values: jax.Array, mask: jax.Array | None) -> jax.Array:
        # selected, not multiplied: an inf or NaN outside the mask stays out
        return jnp.sum(values if mask is None else jnp.where(mask, values, 0.0))

    def merge(self, later: Any) -> Any:
        return type(self)(self.total + later.total, self.count + later.count)

    def over_devices(self, axes: Axes) -> Any:
        return type(self)(jax.lax.psum(self.total, axes), jax.lax.psum(self.count, axes))

    def over_members(self, mask: jax.Array | None = None) -> Any:
        total, count = self.total, self.count
        if mask is not None:
            total, count = jnp.where(mask, total, 0.0), jnp.where(mask, count, 0.0)
        return type(self)(jnp.sum(total, axis=0), jnp.sum(count, axis=0))


@struct.dataclass
class Mean(_Additive):
    """A mean still to be taken: ``total: float32[]``, ``count: float32[]``.

    Reported as ``total / count``; pooled over steps and devices (sums of both).
    A plain scalar metric is ``Mean(x, 1)``. ``Mean.of(values, mask)``: the
    mean of ``values`` where ``mask`` is set; values outside it (an ``inf`` or
    ``NaN`` included) do not enter.
    """

    total: jax.Array
    count: jax.Array
    reduce_fx = "mean"

    @classmethod
    def of(cls, values: jax.Array, mask: jax.Array | None = None) -> Mean:
        # summed in the values' own shape, not flattened: XLA's reduction order of
        # earlier releases, so results (1 and 4 devices alike) stay bit for bit
        values = jnp.asarray(values, jnp.float32)
        if mask is None:
            return cls(values.sum(), jnp.asarray(values.size, jnp.float32))
        values, mask = jnp.broadcast_arrays(values, jnp.asarray(mask, bool))
        return cls(jnp.where(mask, values, 0.0).sum(), mask.sum(dtype=jnp.float32))

    @staticmethod
    def finish(reduced: float, count: float) -> float:
        return reduced / count


@struct.dataclass
class Sum(_Additive):
    """A sum: ``total: float32[]`` over ``count: float32[]`` samples.

    Summed over the steps of an interval and over devices (``psum``), e.g. the
    episodes a step completed (``Sum.of(done)``) reported per log interval.
    """

    total: jax.Array
    count: jax.Array
    reduce_fx = "sum"


class _Extremum(Metric):
    _op = "maximum"
    _collective = staticmethod(jax.lax.pmax)
    _reduce = staticmethod(jnp.max)

    @classmethod
    def _reduce_flat(cls, values: jax.Array, mask: jax.Array | None) -> jax.Array:
        kept = values if mask is None else jnp.where(mask, values, cls._identity)
        return cls._reduce(kept, initial=cls._identity)

    def merge(self, later: Any) -> Any:
        op = getattr(_xp(self.value, later.value), self._op)
        return type(self)(op(self.value, later.value), self.count + later.count)

    def over_devices(self, axes: Axes) -> Any:
        return type(self)(self._collective(self.value, axes), jax.lax.psum(self.count, axes))

    def over_members(self, mask: jax.Array | None = None) -> Any:
        has = self.count > 0 if mask is None else (self.count > 0) & mask
        return type(self)(self._reduce(jnp.where(has, self.value, self._identity), axis=0,
                                       initial=self._identity),
                          jnp.sum(jnp.where(has, self.count, 0.0), axis=0))


@struct.dataclass
class Max(_Extremum):
    """A maximum: ``value: float32[]`` over ``count: float32[]`` samples.

    The max of maxes over the steps of an interval, ``pmax`` over devices: a
    best-so-far fitness logged every 4 generations reports the best, not the
    mean of 4 running bests. ``Max.of(values, mask)``: the largest of
    ``values`` where ``mask`` is set (NaN propagates).
    """

    value: jax.Array
    count: jax.Array
    reduce_fx = "max"
    _identity = -_INF


@struct.dataclass
class Min(_Extremum):
    """A minimum: ``value: float32[]`` over ``count: float32[]`` samples; the
    min of mins over steps, ``pmin`` over devices (see :class:`Max`)."""

    value: jax.Array
    count: jax.Array
    reduce_fx = "min"
    _identity = _INF
    _op = "minimum"
    _collective = staticmethod(jax.lax.pmin)
    _reduce = staticmethod(jnp.min)


@struct.dataclass
class Last(Metric):
    """A current value: ``value: float32[]`` over ``count: float32[]`` samples.

    Over the steps of an interval: the value of the last step that had one (a
    learning rate, an exploration rate, a buffer size reported as of the
    interval's end). Over devices: the mean of every device's last value,
    taken only over devices that had one; when they all agree (any replicated
    value, such as a learning rate) that is their value exactly.
    ``Last.of(values, mask)``: the last element of ``values`` (flattened, C
    order) where ``mask`` is set.
    """

    value: jax.Array
    count: jax.Array
    reduce_fx = "last"

    @classmethod
    def _reduce_flat(cls, values: jax.Array, mask: jax.Array | None) -> jax.Array:
        if values.size == 0:
            return jnp.zeros((), jnp.float32)
        if mask is None:
            return values[-1]
        index = jnp.max(jnp.where(mask, jnp.arange(values.size), -1))
        return jnp.where(index >= 0, values[jnp.maximum(index, 0)], 0.0)

    def merge(self, later: Any) -> Any:
        where = _xp(self.value, later.value, later.count).where
        return Last(where(later.count > 0, later.value, self.value), self.count + later.count)

    def over_devices(self, axes: Axes) -> Any:
        has = self.count > 0
        hi = jax.lax.pmax(jnp.where(has, self.value, -_INF), axes)
        lo = jax.lax.pmin(jnp.where(has, self.value, _INF), axes)
        total = jax.lax.psum(jnp.where(has, self.value, 0.0), axes)
        num = jax.lax.psum(has.astype(jnp.float32), axes)
        return Last(jnp.where(hi == lo, hi, total / jnp.maximum(num, 1.0)),
                    jax.lax.psum(self.count, axes))

    def over_members(self, mask: jax.Array | None = None) -> Any:
        has = self.count > 0 if mask is None else (self.count > 0) & mask
        hi = jnp.max(jnp.where(has, self.value, -_INF), axis=0, initial=-_INF)
        lo = jnp.min(jnp.where(has, self.value, _INF), axis=0, initial=_INF)
        total = jnp.sum(jnp.where(has, self.value, 0.0), axis=0)
        num = jnp.sum(has, axis=0, dtype=jnp.float32)
        return Last(jnp.where(hi == lo, hi, total / jnp.maximum(num, 1.0)),
                    jnp.sum(jnp.where(has, self.count, 0.0), axis=0))


_REDUCTIONS: dict[str, type[Metric]] = {c.reduce_fx: c for c in (Mean, Sum, Max, Min, Last)}
"""Every reduction by its name (``"mean"``, ``"sum"``, ``"max"``, ``"min"``, ``"last"``)."""


def reduction_of(value: Any) -> type[Metric]:
    """The :class:`Metric` class a metric value is reduced as (a scalar: :class:`Mean`)."""
    return type(value) if isinstance(value, Metric) else Mean


def as_metric(value: Any) -> Metric:
    """A metric value as a :class:`Metric` of float32 scalars (a scalar: ``Mean(x, 1)``).

    Raises:
      ValueError: ``value`` is neither a scalar (shape ``()`` or ``(1,)``) nor a
        :class:`Metric` of scalars.
    """
    if isinstance(value, Metric):
        return value.scalar()
    value = jnp.asarray(value)
    if value.size != 1:
        raise ValueError(
            "a metric must be a scalar or a jaxtrainer.metrics value (Mean, Sum, Max, Min, "
            f"Last; e.g. jaxtrainer.Max.of(values) to reduce an array), got shape {value.shape}"
        )
    return Mean(value.reshape(()).astype(jnp.float32), jnp.ones((), jnp.float32))


def add(a: Metric, b: Metric) -> Metric:
    """``a`` followed by ``b`` (both of one reduction): :meth:`Metric.merge`."""
    return a.merge(b)


def to_host(metrics: dict[str, Metric]) -> dict[str, float]:
    """Fetch reduced metrics to the host (one transfer) as Python floats, dropping
    those with no samples."""
    fetched = jax.device_get(metrics)
    return {
        name: m.finish(float(m.reduced), float(m.count))
        for name, m in fetched.items()
        if float(m.count) > 0
    }


def rows_to_host(metrics: Any, num_rows: int,
                 unpack: Callable[[Any], dict[str, Metric]] | None = None,
                 finish: bool = True) -> list[dict[str, Any]]:
    """Fetch per-interval metrics (fields ``float32[rows]``) to the host in one
    transfer; return the first ``num_rows`` rows as dicts of Python floats, each
    without the metrics that had no samples in that row. ``unpack`` (e.g.
    :meth:`~jaxtrainer.strategies._program.TrainProgram.metrics`) maps what
    was fetched to ``{name: Metric}`` first. ``finish=False`` returns each row's
    values still as :class:`Metric` (host scalars), for :func:`merge_rows` to
    pool rows that belong to one log interval, and :func:`finish_row` to report."""
    fetched = jax.device_get(metrics)
    if unpack is not None:
        fetched = unpack(fetched)
    out: list[dict[str, Any]] = [{} for _ in range(num_rows)]
    for name, m in fetched.items():
        fields, tree = jax.tree.flatten(m)
        fields = [np.asarray(f, np.float32)[:num_rows] for f in fields]
        for j, row in enumerate(out):
            value = tree.unflatten([f[j] for f in fields])
            if value.count > 0:
                row[name] = value
    return [finish_row(row) for row in out] if finish else out


def merge_rows(earlier: dict[str, Metric], later: dict[str, Metric]) -> dict[str, Metric]:
    """Two consecutive rows of host metrics (:func:`rows_to_host` with
    ``finish=False``) as one: each metric by its own reduction over both
    (:meth:`Metric.merge`); a metric with samples in one row only keeps that value."""
    out = dict(earlier)
    for name, value in later.items():
        out[name] = out[name].merge(value) if name in out else value
    return out


def finish_row(row: dict[str, Metric]) -> dict[str, float]:
    """A row of host metrics as the Python floats callbacks receive."""
    return {name: m.finish(float(m.reduced), float(m.count)) for name, m in row.items()}
