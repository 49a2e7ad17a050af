"""Env-step arithmetic on the device that stays exact past 2^31 env steps.

Under JAX's default 32-bit mode a step counter is ``int32``; multiplying it by
the env steps one training step consumes wraps negative past 2^31 env steps
(2.1e9: a few hours of a large brax run), which would restart exploration
schedules, stop updates or re-enter a warm-up. Nothing here forms that product
in integers: thresholds become step counts on the host (Python ints), schedules
are read in ``float32`` and interval crossings use the remainder's period.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

_INT32_MAX = 2**31 - 1


def _steps_to_reach(env_steps: int, per_step: int) -> int:
    """The first step count ``s`` with ``s * per_step >= env_steps`` (Python ints)."""
    return -(-int(env_steps) // int(per_step)) if per_step > 0 else 0


def reached(step: jax.Array, env_steps: int, per_step: int) -> jax.Array:
    """``bool[]``: ``step * per_step >= env_steps``, exactly, for any ``int32`` ``step``."""
    return step >= min(_steps_to_reach(env_steps, per_step), _INT32_MAX)


def as_float(step: jax.Array, per_step: int) -> jax.Array:
    """``float32[]``: ``step * per_step`` env steps, for schedules (relative
    error below 1e-7; never wraps)."""
    return jnp.asarray(step, jnp.float32) * jnp.float32(per_step)


def check_interval(interval: int, per_step: int, what: str) -> None:
    """Raise ValueError when :func:`crossed` cannot be exact for these sizes
    (their least common multiple at or above 2^31 env steps), naming both."""
    if 0 < per_step < interval and math.lcm(interval, per_step) > _INT32_MAX:
        raise ValueError(
            f"{what}={interval} env steps with {per_step} env steps per training step: their "
            f"least common multiple, {math.lcm(interval, per_step)}, is 2^31 or more, where "
            "int32 crossings of the interval are not exact; choose an interval that divides "
            "by a larger factor of the env steps per step (e.g. a multiple of it)")


def crossed(step: jax.Array, interval: int, per_step: int) -> jax.Array:
    """``bool[]``: whether a multiple of ``interval`` env steps lies in
    ``(step * per_step, (step + 1) * per_step]``, i.e. ``floor((s+1)E/I) >
    floor(sE/I)``, exactly for any ``int32`` ``step``: the remainder ``sE mod
    I`` repeats with period ``I / gcd(E, I)``, so it is computed from ``s``
    modulo that period (see :func:`check_interval`)."""
    if per_step >= interval:
        return jnp.ones((), jnp.bool_)
    period = interval // math.gcd(interval, per_step)
    remainder = (step % period) * per_step % interval
    return remainder + per_step >= interval
