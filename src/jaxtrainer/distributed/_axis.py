"""Collectives that work inside and outside a mapped device axis.

Every strategy runs ``Module.training_step`` under ``jax.shard_map`` with the
data-parallel mesh axis named :data:`AXIS_NAME`. The helpers here reduce over that
axis when it is bound and are the identity when it is not (plain ``jax.jit`` or
eager code), so one ``training_step`` runs unchanged on one device, many devices
and many processes: code written for several devices must not fail, or
silently skip its reduction, when it runs on one.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from jaxtrainer.distributed._buckets import bucketing_pays, reduce_in_buckets

AXIS_NAME = "devices"
"""Name of the data-parallel mesh axis every strategy binds."""

AxisName = str | Sequence[str]


def axis_tuple(axis_name: AxisName) -> tuple[str, ...]:
    """``axis_name`` (one mesh axis name or several) as a tuple of names."""
    return (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)


# Axes hidden by member_scope() while a population member's code is traced.
# Trace-time only (set and reset around tracing, never read by compiled code).
_HIDDEN: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "jaxtrainer_hidden_axes", default=frozenset())


@contextlib.contextmanager
def member_scope(axis_name: AxisName = AXIS_NAME) -> Iterator[None]:
    """Trace code for ONE member of a population that is sharded over ``axis_name``.

    Population algorithms (e.g. :class:`~jaxtrainer.population.PBT`) vmap a whole
    :class:`~jaxtrainer.Module` over the members a device holds. That module was
    written for data parallelism: its ``pmean`` of gradients or advantage
    statistics would average *different members* across devices. Inside this
    scope the axes of ``axis_name`` are hidden from this module's helpers: the
    collectives (:func:`pmean`, :func:`psum`, :func:`pmax`, :func:`pmin`,
    :func:`~jaxtrainer.distributed.gather_members`) are identities,
    :func:`axis_size` is 1, :func:`axis_index` is 0 and :func:`bound_axes`
    leaves them out, so the module computes exactly what it computes on one
    device. Values keep their varying types (:func:`to_varying` still casts over
    every bound axis, as ``check_vma`` requires).

    Used around tracing only; nested scopes accumulate. Not thread-shared: each
    thread that traces enters the scope itself.
    """
    token = _HIDDEN.set(_HIDDEN.get() | frozenset(axis_tuple(axis_name)))
    try:
        yield
    finally:
        _HIDDEN.reset(token)


def trace_axes(axis_name: AxisName) -> tuple[str, ...]:
    """The subset of ``axis_name`` bound in the current trace, hidden or not."""
    bound = []
    for name in axis_tuple(axis_name):
        try:
            jax.lax.axis_size(name)
        except NameError:
            continue
        bound.append(name)
    return tuple(bound)


def bound_axes(axis_name: AxisName = AXIS_NAME) -> tuple[str, ...]:
    """The subset of ``axis_name`` that is bound in the current trace and not
    hidden by :func:`member_scope` (may be empty)."""
    hidden = _HIDDEN.get()
    return tuple(name for name in trace_axes(axis_name) if name not in hidden)


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


def cast_varying(tree: Any, axes: frozenset[str] | tuple[str, ...]) -> Any:
    def cast(x):
        missing = tuple(a for a in axes if a not in varying_axes(x))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)


PER_DEVICE_MARK = "jaxtrainer_per_device"
"""Name of the identity ``jax.jit`` call :func:`per_device` leaves in a jaxpr;
``:``-joined mesh axis names follow it."""


@functools.cache
def _marker(name: str, axes: tuple[str, ...]) -> Callable[[Any], Any]:
    """An identity ``jax.jit`` call named ``name:axis:axis...``: XLA removes it,
    the jaxpr keeps it for :mod:`jaxtrainer.strategies.dependence` to read."""
    def mark(tree):
        return tree

    mark.__name__ = mark.__qualname__ = name + ":" + ":".join(axes)
    return jax.jit(mark)


def per_device(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Declare values per-device along the bound axes of ``axis_name``.

    Values keep their shapes, dtypes and contents (an identity call that XLA
    removes). A state leaf that ``init_state`` builds from such a value is laid
    out per device, as one computed from the device's key or sized with
    :func:`local_size` is: needed only for a leaf that starts out the same on
    every device and is meant to become per-device, such as a population's
    members whose initial biases are zeros. Identity outside a mapped axis."""
    axes = trace_axes(axis_name)
    if not axes:
        return tree
    return cast_varying(_marker(PER_DEVICE_MARK, tuple(sorted(axes)))(tree), axes)


def to_varying(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Type every leaf as per-device along the bound axes of ``axis_name``
    (:func:`per_device`, and ``lax.pcast(..., to="varying")`` where
    ``shard_map``'s varying-axis check is on); identity when unbound.

    Module code run by a strategy never needs it (strategies trace module code
    without the varying-axis check); for one's own ``jax.shard_map(...,
    check_vma=True)`` code, where ``check_vma`` wants equal types, e.g. a
    ``lax.scan`` carry that starts device-independent and becomes per-device."""
    return per_device(tree, axis_name)


def vary_like(tree: Any, *refs: Any) -> Any:
    """Cast every leaf of ``tree`` to vary over all axes any leaf of ``refs``
    varies over (no-op outside ``shard_map(check_vma=True)``, and so in module
    code run by a strategy, which never needs it)."""
    return cast_varying(tree, tuple(sorted(tree_varying_axes(*refs))))


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


REDUCED_MARK = "jaxtrainer_reduced"
"""Name of the identity ``jax.jit`` call a reduction over axes of one device
leaves in a jaxpr in place of the collective; ``:``-joined axis names follow."""


def _one_device(op, tree: Any, names: tuple[str, ...]) -> bool:
    """Whether ``op`` over ``names`` is the identity on ``tree`` and can be left
    out of the program: every axis has one device, every leaf is a JAX array
    not typed as varying over them (``shard_map``'s varying-axis check wants
    the collective) and, for a mean, inexact (``pmean`` of integers gives floats).

    XLA keeps an all-reduce of one participant and runs it through the
    collective runtime all the same: on one device every gradient average and
    metric reduction of a training step would cost a collective for nothing.
    The reduction is still recorded (an identity call named
    :data:`REDUCED_MARK`) for the check that replicated state stays the same
    on every device, which holds for the code, not for one device count."""
    if jax.config.jax_disable_jit or axis_size(names) != 1:
        return False  # eager (jit disabled) inlines the marker: keep the collective
    for leaf in jax.tree.leaves(tree):
        if not isinstance(leaf, jax.Array) or varying_axes(leaf) & set(names):
            return False
        if op is jax.lax.pmean and not jax.numpy.issubdtype(leaf.dtype, jax.numpy.inexact):
            return False
    return True


def _reduce(op, tree: Any, axis_name: AxisName | None, what: str) -> Any:
    if axis_name is None:
        return tree
    try:
        names = axis_tuple(axis_name)
    except TypeError:  # not iterable
        names = (axis_name,)
    if not all(isinstance(a, str) for a in names):
        raise ValueError(f"{what}: axis_name={axis_name!r}: expected a mesh axis name, a "
                         "sequence of names, or None (no reduction)")
    names = bound_axes(names)
    if not names:
        return tree
    if _one_device(op, tree, names):
        return _marker(REDUCED_MARK, tuple(sorted(names)))(tree)
    axes = names if len(names) > 1 else names[0]
    if bucketing_pays():
        return reduce_in_buckets(op, tree, axes, varying_axes)
    return op(tree, axes)


def pmean(tree: Any, axis_name: AxisName | None = AXIS_NAME) -> Any:
    """Mean of every leaf over the devices of ``axis_name``; identity when unbound.

    ``tree``: any pytree of arrays (EvoRL's ``x``); shapes and dtypes are kept.
    ``axis_name``: a mesh axis name or names; ``None`` returns ``tree``
    unchanged, as ``evorl.distributed.pmean(x, axis_name=None)`` does (EvoRL
    passes its workflow's axis name, ``None`` on one device). The same holds
    for :func:`psum`, :func:`pmax` and :func:`pmin`.

    Raises:
      ValueError: ``axis_name`` is not a name, a sequence of names or ``None``.
    """
    return _reduce(jax.lax.pmean, tree, axis_name, "pmean")


def psum(tree: Any, axis_name: AxisName | None = AXIS_NAME) -> Any:
    """Sum of every leaf over the devices of ``axis_name``; identity when unbound
    or when ``axis_name`` is ``None`` (arguments as :func:`pmean`)."""
    return _reduce(jax.lax.psum, tree, axis_name, "psum")


def pmax(tree: Any, axis_name: AxisName | None = AXIS_NAME) -> Any:
    """Element-wise maximum over the devices of ``axis_name``; identity when
    unbound or when ``axis_name`` is ``None`` (arguments as :func:`pmean`)."""
    return _reduce(jax.lax.pmax, tree, axis_name, "pmax")


def pmin(tree: Any, axis_name: AxisName | None = AXIS_NAME) -> Any:
    """Element-wise minimum over the devices of ``axis_name``; identity when
    unbound or when ``axis_name`` is ``None`` (arguments as :func:`pmean`)."""
    return _reduce(jax.lax.pmin, tree, axis_name, "pmin")


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
    return global_size // n + _SIZE_PROBE.get()


# While a strategy traces init_state a second time to learn which state leaves
# are sized by the device count, local_size returns one more than its share.
# Trace-time only, like _HIDDEN.
_SIZE_PROBE: contextvars.ContextVar[int] = contextvars.ContextVar(
    "jaxtrainer_size_probe", default=0)


@contextlib.contextmanager
def size_probe() -> Iterator[None]:
    """Trace code with :func:`local_size` one larger than the device's share:
    the shapes that change are those sized by the device count. Used by the
    strategies' layout inference around tracing only."""
    token = _SIZE_PROBE.set(1)
    try:
        yield
    finally:
        _SIZE_PROBE.reset(token)


def size_probe_active() -> bool:
    """Whether the current trace is the layout inference's :func:`size_probe`
    (sizes from :func:`local_size` one larger than the device's share): code
    that needs its batch in whole groups (a multi-agent env's games) pads the
    probe's odd size instead of refusing it."""
    return bool(_SIZE_PROBE.get())


# ---- third-party code under check_vma -------------------------------------------
def _retype_unvarying(tree: Any) -> Any:
    """Inside a ``check_vma=False`` region: give every leaf the device-independent
    type that each value computed there has (a region keeps its inputs' varying
    types otherwise, and ``lax.cond``/``scan`` would compare the two). Reshapes
    that XLA removes; no data moves."""
    return jax.tree.map(
        lambda x: jax.lax.squeeze(jax.lax.expand_dims(x, (0,)), (0,)), tree)


def _run_unchecked(fn: Callable[..., Any], axes: tuple[str, ...], args: tuple) -> Any:
    """``fn(*args)`` traced with the varying check off; the outputs typed as
    varying along ``axes``."""
    manual = frozenset(jax.sharding.get_abstract_mesh().manual_axes)
    out = jax.shard_map(lambda *a: fn(*_retype_unvarying(a)),
                        in_specs=jax.sharding.PartitionSpec(),
                        out_specs=jax.sharding.PartitionSpec(),
                        axis_names=manual, check_vma=False)(*args)
    return cast_varying(out, axes)


def _differentiable(leaf: Any) -> bool:
    return jax.numpy.issubdtype(jax.typeof(leaf).dtype, jax.numpy.inexact)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _unchecked_call(fn: Callable[..., Any], axes: tuple[str, ...], *args: Any) -> Any:
    return _run_unchecked(fn, axes, args)


def _unchecked_fwd(fn, axes, *args):
    return _run_unchecked(fn, axes, args), args


def _unchecked_bwd(fn, axes, args, cts):
    # The backward pass is a vjp of fn (recomputing its forward pass), run in
    # an unchecked region as well; only inexact leaves have cotangents.
    leaves, tree = jax.tree.flatten(args)
    diff = [_differentiable(x) for x in leaves]
    ct_leaves, ct_tree = jax.tree.flatten(cts)
    ct_diff = [_differentiable(c) for c in ct_leaves]

    def pull(leaves, diff_cts):
        def f(diff_leaves):
            it = iter(diff_leaves)
            full = [next(it) if d else x for x, d in zip(leaves, diff, strict=True)]
            return fn(*jax.tree.unflatten(tree, full))

        out, vjp = jax.vjp(f, [x for x, d in zip(leaves, diff, strict=True) if d])
        it = iter(diff_cts)
        full_cts = [next(it) if d else np.zeros(jax.typeof(o).shape, jax.dtypes.float0)
                    for o, d in zip(jax.tree.leaves(out), ct_diff, strict=True)]
        return vjp(jax.tree.unflatten(ct_tree, full_cts))[0]

    diff_cts = [c for c, d in zip(ct_leaves, ct_diff, strict=True) if d]
    grads = iter(_run_unchecked(pull, axes, (leaves, diff_cts)))
    return tuple(jax.tree.unflatten(tree, [next(grads) if d else None for d in diff]))


_unchecked_call.defvjp(_unchecked_fwd, _unchecked_bwd)


def without_vma_check(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, traced with ``shard_map``'s varying-manual-axes check relaxed where
    the check rejects it. The strategies trace module code without the check, so
    there this is ``fn`` itself; it matters in one's own
    ``jax.shard_map(check_vma=True)`` code.

    For code written without ``check_vma`` in mind (simulators such as brax):
    under ``check_vma=True`` a value built inside it from constants is typed
    device-independent while one computed from per-device inputs is typed
    per-device, and a ``lax.cond`` whose branches return one of each, or a
    ``lax.scan``/``while_loop`` carry that starts as the one and comes back as
    the other, is a ``TypeError`` that no cast of ``fn``'s inputs can prevent.

    ``fn`` is first traced as is, so code that passes the check keeps exactly
    its types (and every transformation). Where that raises a ``TypeError`` or
    ``ValueError`` and an input varies, ``fn`` is traced again in a nested
    ``jax.shard_map(check_vma=False)`` over the axes already manual (no data
    moves, nothing is resharded; the abandoned trace is dead code that lowering
    drops), and its outputs are typed per-device along every axis any input
    varies over (the sound type: they may depend on any input). An error that is
    not about the check recurs there and propagates. Reverse-mode
    differentiation goes through that path (its backward pass recomputes ``fn``
    unchecked; only inexact inputs get cotangents); forward-mode does not.
    """

    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        try:
            return fn(*args)
        except (TypeError, ValueError):
            axes = tuple(sorted(tree_varying_axes(args)))
            if not axes:
                raise
            return _unchecked_call(fn, axes, *cast_varying(args, axes))

    return wrapped
