"""Metric values that know how many samples they average.

``training_step`` returns ``dict[str, scalar | Mean]``. A plain scalar counts as
one sample. A :class:`Mean` carries a sum and a count, so an episode return
averages completed episodes only and a rollout that completed none reports
nothing rather than 0.0 (FIELD_REPORTS F17). Strategies sum totals and counts
over the fused steps of a log interval and over devices, then divide on the host;
a metric whose count is 0 is left out of the dict callbacks receive.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Mean:
    """A mean still to be taken: ``total: float32[]``, ``count: float32[]``."""

    total: jax.Array
    count: jax.Array

    @classmethod
    def of(cls, values: jax.Array, mask: jax.Array | None = None) -> Mean:
        """Mean of ``values`` (any shape) where ``mask`` (same shape, bool) is set."""
        values = jnp.asarray(values, jnp.float32)
        if mask is None:
            return cls(values.sum(), jnp.asarray(values.size, jnp.float32))
        mask = jnp.asarray(mask, jnp.float32)
        return cls(jnp.sum(values * mask), jnp.sum(mask))


def as_mean(value: Any) -> Mean:
    """A metric value as a :class:`Mean` of float32 scalars.

    Raises:
      ValueError: ``value`` is not a scalar (shape ``()`` or ``(1,)``) or Mean.
    """
    if isinstance(value, Mean):
        return Mean(jnp.asarray(value.total, jnp.float32), jnp.asarray(value.count, jnp.float32))
    value = jnp.asarray(value)
    if value.size != 1:
        raise ValueError(
            f"a metric must be a scalar or jaxtrainer.metrics.Mean, got shape {value.shape}"
        )
    return Mean(value.reshape(()).astype(jnp.float32), jnp.ones((), jnp.float32))


def add(a: Mean, b: Mean) -> Mean:
    return Mean(a.total + b.total, a.count + b.count)


def to_host(metrics: dict[str, Mean]) -> dict[str, float]:
    """Fetch reduced metrics to the host (one transfer) as Python floats, dropping
    those with no samples."""
    fetched = jax.device_get(metrics)
    return {
        name: float(m.total) / float(m.count)
        for name, m in fetched.items()
        if float(m.count) > 0
    }


def rows_to_host(metrics: dict[str, Mean], num_rows: int) -> list[dict[str, float]]:
    """Fetch per-interval metrics (``total``/``count``: ``float32[rows]``) to the
    host in one transfer; return the first ``num_rows`` rows as dicts of Python
    floats, each without the metrics that had no samples in that row."""
    fetched = jax.device_get(metrics)
    out: list[dict[str, float]] = [{} for _ in range(num_rows)]
    for name, m in fetched.items():
        totals, counts = m.total[:num_rows].tolist(), m.count[:num_rows].tolist()
        for row, total, count in zip(out, totals, counts, strict=True):
            if count > 0:
                row[name] = total / count
    return out
