"""PRNG key handling across devices (FIELD_REPORTS F1)."""

from __future__ import annotations

import jax

from jaxtrainer.distributed.axis import AXIS_NAME, AxisName, axis_index


def fold_in_device(key: jax.Array, axis_name: AxisName = AXIS_NAME) -> jax.Array:
    """A key unique to this device: ``fold_in(key, axis_index)``.

    Inside a mapped axis each device gets a different stream; outside one, the
    result is ``fold_in(key, 0)``, so a one-device run draws what device 0 of a
    multi-device run draws. ``key``: a typed key array of any shape.
    """
    return jax.random.fold_in(key, axis_index(axis_name))


def split_key_to_devices(key: jax.Array, num_devices: int) -> jax.Array:
    """Keys for ``num_devices`` devices: ``key[num_devices]``, row ``d`` equal to
    ``fold_in(key, d)``, i.e. what :func:`fold_in_device` gives device ``d``."""
    return jax.vmap(lambda d: jax.random.fold_in(key, d))(jax.numpy.arange(num_devices))
