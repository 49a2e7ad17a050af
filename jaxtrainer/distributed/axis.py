"""Collectives that work inside and outside a mapped device axis.

Every strategy runs ``Module.training_step`` under ``jax.shard_map`` with the
data-parallel mesh axis named :data:`AXIS_NAME`. The helpers here reduce over that
axis when it is bound and are the identity when it is not (plain ``jax.jit`` or
eager code), so one ``training_step`` runs unchanged on one device, many devices
and many processes (FIELD_REPORTS F3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

AXIS_NAME = "devices"
"""Name of the data-parallel mesh axis every strategy binds."""

AxisName = str | Sequence[str]


def _names(axis_name: AxisName) -> tuple[str, ...]:
    return (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)


def bound_axes(axis_name: AxisName = AXIS_NAME) -> tuple[str, ...]:
    """The subset of ``axis_name`` that is bound in the current trace (may be empty)."""
    bound = []
    for name in _names(axis_name):
        try:
            jax.lax.axis_size(name)
        except NameError:
            continue
        bound.append(name)
    return tuple(bound)


def varying_axes(x: Any) -> frozenset[str]:
    """Mesh axes along which the traced value ``x`` may differ between devices
    (its varying-manual-axes type under ``shard_map(check_vma=True)``)."""
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    if vma is None:  # jax 0.10 spells it manual_axis_type.varying
        vma = aval.manual_axis_type.varying
    return frozenset(vma)


def tree_varying_axes(*trees: Any) -> frozenset[str]:
    """Union of :func:`varying_axes` over every leaf of ``trees``."""
    axes: frozenset[str] = frozenset()
    for leaf in jax.tree.leaves(trees):
        axes |= varying_axes(leaf)
    return axes


def _cast_varying(tree: Any, axes: frozenset[str] | tuple[str, ...]) -> Any:
    def cast(x):
        missing = tuple(a for a in axes if a not in varying_axes(x))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)


def to_varying(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Type every leaf as per-device along the bound axes of ``axis_name``
    (``lax.pcast(..., to="varying")``; no data moves). Identity when unbound.

    Needed where ``check_vma`` wants equal types, e.g. a ``lax.scan`` carry that
    starts device-independent (a step counter at 0) and becomes per-device."""
    return _cast_varying(tree, bound_axes(axis_name))


def vary_like(tree: Any, *refs: Any) -> Any:
    """Cast every leaf of ``tree`` to vary over all axes any leaf of ``refs``
    varies over (no-op outside ``shard_map``)."""
    return _cast_varying(tree, tuple(sorted(tree_varying_axes(*refs))))


def axis_size(axis_name: AxisName = AXIS_NAME) -> int:
    """Number of devices along ``axis_name``; 1 when the axis is not bound. Static int."""
    size = 1
    for name in bound_axes(axis_name):
        size *= jax.lax.axis_size(name)
    return size


def axis_index(axis_name: AxisName = AXIS_NAME) -> jax.Array:
    """This device's index along ``axis_name``: int32[], 0 when the axis is not bound."""
    names = bound_axes(axis_name)
    if not names:
        return jax.numpy.zeros((), jax.numpy.int32)
    return jax.lax.axis_index(names if len(names) > 1 else names[0])


def _reduce(op, tree: Any, axis_name: AxisName) -> Any:
    names = bound_axes(axis_name)
    if not names:
        return tree
    return op(tree, names if len(names) > 1 else names[0])


def pmean(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Mean of every leaf over the devices of ``axis_name``; identity when unbound."""
    return _reduce(jax.lax.pmean, tree, axis_name)


def psum(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Sum of every leaf over the devices of ``axis_name``; identity when unbound."""
    return _reduce(jax.lax.psum, tree, axis_name)


def pmax(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Element-wise maximum over the devices of ``axis_name``; identity when unbound."""
    return _reduce(jax.lax.pmax, tree, axis_name)


def pmin(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Element-wise minimum over the devices of ``axis_name``; identity when unbound."""
    return _reduce(jax.lax.pmin, tree, axis_name)


def local_size(global_size: int, what: str = "size", num_devices: int | None = None) -> int:
    """Per-device share of a global size.

    Args:
      global_size: the size over all devices (``num_envs``, a batch size, ...).
      what: the name of the quantity, used in the error message.
      num_devices: the device count; by default the size of the bound
        :data:`AXIS_NAME` (1 outside a mapped axis). Static.

    Returns:
      ``global_size // num_devices``.

    Raises:
      ValueError: ``global_size`` is not a positive multiple of the device count.
    """
    n = axis_size() if num_devices is None else int(num_devices)
    if global_size < 1 or global_size % n:
        raise ValueError(
            f"{what}={global_size} cannot be split evenly over {n} devices: "
            f"use a positive multiple of {n}"
        )
    return global_size // n
