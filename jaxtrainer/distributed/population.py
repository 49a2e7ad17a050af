"""Populations sharded over a device mesh: split members, map them, gather results.

A *population* is a pytree whose leaves share a leading axis of ``P`` members.
The helpers here evaluate ``fn(member, ...)`` for every member with the members
split over the devices of one or more mesh axes, and bring the results back as
one replicated array, so that

    shmap_vmap(fn)(population) == jax.vmap(fn)(population)

whatever the device count (``P`` need not divide it: the population is padded
with copies of its last member and the padding is cut off again, FIELD_REPORTS
F6). Results are gathered with a *bitwise* collective (each device's members are
placed in zeros, reinterpreted as unsigned integers, and ``psum``-ed), so a value
comes back with exactly the bits it was computed with and the result is
device-invariant under ``check_vma=True`` (F7) without an ``all_gather`` whose
output JAX types as varying.

Two ways to call them:

* inside ``jax.shard_map`` (e.g. in ``Module.training_step``): leave ``mesh``
  unset; the members are split over the bound ``axis_names``;
* outside: pass ``mesh``; the helper builds its own ``jax.shard_map`` and
  returns arrays sharded on their leading axis over ``axis_names``.

Passing a ``mesh`` from inside another ``shard_map`` is refused with a clear
error rather than building nested maps of different sizes (F5).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxtrainer.distributed.axis import AXIS_NAME, AxisName, axis_index, axis_size, bound_axes

__all__ = [
    "gather_members",
    "local_members",
    "pad_population",
    "population_size",
    "shmap_map",
    "shmap_vmap",
    "tree_device_put",
]


def _names(axis_names: AxisName) -> tuple[str, ...]:
    return (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)


def population_size(tree: Any) -> int:
    """The leading-axis size ``P`` shared by every leaf of ``tree``.

    Raises:
      ValueError: ``tree`` has no leaves, a scalar leaf, or leaves of different
        leading sizes.
    """
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError("a population needs at least one array leaf")
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes or len(sizes) != 1:
        shapes = [np.shape(x) for x in leaves]
        raise ValueError(f"population leaves must share a leading (member) axis; got shapes {shapes}")
    return int(sizes.pop())


def pad_population(tree: Any, multiple: int) -> tuple[Any, jax.Array]:
    """Pad the member axis up to a multiple of ``multiple``.

    Padding members are copies of the last real member (finite, valid inputs for
    any ``fn``), appended at the end, so ``padded[:P]`` is the original.

    Args:
      tree: population, leaves ``[P, ...]``.
      multiple: e.g. the device count. Static, >= 1.

    Returns:
      ``(padded, mask)``: leaves ``[P_pad, ...]`` with ``P_pad = ceil(P / multiple)
      * multiple`` and ``mask: bool[P_pad]``, True for the ``P`` real members.
    """
    size = population_size(tree)
    padded_size = -(-size // multiple) * multiple
    extra = padded_size - size
    mask = jnp.arange(padded_size) < size
    if extra == 0:
        return tree, mask

    def pad(x):
        return jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)], axis=0)

    return jax.tree.map(pad, tree), mask


def local_members(tree: Any, axis_names: AxisName = AXIS_NAME) -> Any:
    """This device's contiguous block of members, inside ``shard_map``.

    Device ``d`` (linear index over the bound ``axis_names``, row-major) gets
    members ``d*L .. d*L+L-1`` with ``L = P / n``. Outside a mapped axis the whole
    population is returned.

    Args:
      tree: the global population, leaves ``[P, ...]`` (typically replicated).

    Returns:
      leaves ``[L, ...]``, varying over the bound axes.

    Raises:
      ValueError: ``P`` is not a multiple of the device count (pad first with
        :func:`pad_population`).
    """
    names = bound_axes(_names(axis_names))
    n = axis_size(names) if names else 1
    size = population_size(tree)
    if size % n:
        raise ValueError(f"population of {size} members does not split over {n} devices; "
                         "pad it first with jaxtrainer.distributed.pad_population")
    if not names:
        return tree
    local = size // n
    start = axis_index(names) * local

    def take(x):
        x = _vary(x, names)
        return jax.lax.dynamic_slice_in_dim(x, start, local, axis=0)

    return jax.tree.map(take, tree)


def _vary(x: jax.Array, names: tuple[str, ...]) -> jax.Array:
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    if vma is None:
        vma = aval.manual_axis_type.varying
    missing = tuple(a for a in names if a not in vma)
    return jax.lax.pcast(x, missing, to="varying") if missing else x


_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def _gather_leaf(x: jax.Array, names: tuple[str, ...]) -> jax.Array:
    n = axis_size(names)
    local = x.shape[0]
    x = _vary(jnp.asarray(x), names)
    dtype = x.dtype
    if dtype == jnp.bool_:
        bits = x.astype(jnp.uint8)
    elif jnp.issubdtype(dtype, jax.dtypes.prng_key):
        raise TypeError("gather_members: gather key data (jax.random.key_data), not typed keys")
    else:
        bits = jax.lax.bitcast_convert_type(x, _UINT[dtype.itemsize])
    full = jnp.zeros((n * local,) + x.shape[1:], bits.dtype)
    full = jax.lax.dynamic_update_slice_in_dim(full, bits, axis_index(names) * local, axis=0)
    full = jax.lax.psum(full, names if len(names) > 1 else names[0])  # one non-zero term: exact
    if dtype == jnp.bool_:
        return full.astype(jnp.bool_)
    return jax.lax.bitcast_convert_type(full, dtype)


def gather_members(local: Any, axis_names: AxisName = AXIS_NAME) -> Any:
    """Concatenate every device's members in device order, bit for bit.

    The inverse of :func:`local_members`: leaves ``[L, ...]`` on each of ``n``
    devices become ``[n*L, ...]``, identical on every device and typed as
    device-invariant (so the result may feed replicated state under
    ``check_vma=True``). Values are moved as raw bits, so ``-0.0``, NaN payloads
    and every float keep their exact bit pattern. Identity outside a mapped axis.

    Raises:
      TypeError: a leaf is a typed PRNG key array.
    """
    names = bound_axes(_names(axis_names))
    if not names:
        return local
    return jax.tree.map(lambda x: _gather_leaf(x, names), local)


def _check_not_nested(mesh: Mesh | None, what: str) -> None:
    if mesh is None:
        return
    abstract = jax.sharding.get_abstract_mesh()
    manual = tuple(getattr(abstract, "manual_axes", ()) or ())
    if manual:
        raise ValueError(
            f"{what}(mesh=...) was called inside a shard_map already mapped over axes "
            f"{manual}; nested maps over a different device set are not supported (F5). "
            f"Call {what} without mesh= to split members over the bound axes instead."
        )


def _member_map(
    apply_local: Callable[[Callable, tuple], Any],
    what: str,
    fn: Callable[..., Any],
    mesh: Mesh | None,
    axis_names: AxisName,
) -> Callable[..., Any]:
    names_req = _names(axis_names)

    @functools.wraps(fn)
    def mapped(*members: Any) -> Any:
        size = population_size(members)
        _check_not_nested(mesh, what)
        if mesh is not None:
            unknown = [a for a in names_req if a not in mesh.axis_names]
            if unknown:
                raise ValueError(f"{what}: axis_names {unknown} are not axes of the mesh "
                                 f"{dict(mesh.shape)}")
            n = int(np.prod([mesh.shape[a] for a in names_req]))
            padded, _ = pad_population(members, n)
            spec = P(names_req if len(names_req) > 1 else names_req[0])

            def body(*local):
                return jax.tree.map(lambda y: _vary(y, names_req), apply_local(fn, local))

            padded = jax.tree.map(lambda x: jax.reshard(x, NamedSharding(mesh, spec)), padded)
            out = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec,
                                check_vma=True)(*padded)
            if size % n == 0:
                return out
            replicated = NamedSharding(mesh, P())  # P_pad -> P cannot stay evenly sharded
            return jax.tree.map(lambda y: jax.reshard(y, replicated)[:size], out)
        names = bound_axes(names_req)
        if not names:
            return apply_local(fn, members)
        padded, _ = pad_population(members, axis_size(names))
        out = gather_members(apply_local(fn, local_members(padded, names)), names)
        return jax.tree.map(lambda y: y[:size], out)

    return mapped


def shmap_vmap(
    fn: Callable[..., Any],
    mesh: Mesh | None = None,
    axis_names: AxisName = AXIS_NAME,
) -> Callable[..., Any]:
    """``jax.vmap(fn)`` with the members split over devices.

    Args:
      fn: ``fn(*member_args) -> pytree`` for ONE member (bind other arguments
        with ``functools.partial``).
      mesh: ``None`` inside ``shard_map`` (split over the bound ``axis_names``)
        or outside any mapped code (then it is a plain ``vmap``); a
        :class:`jax.sharding.Mesh` to build the ``shard_map`` here.
      axis_names: mesh axis or axes the members are split over (row-major).

    Returns:
      ``mapped(*args)`` where every leaf of ``args`` is ``[P, ...]``; it returns
      ``fn``'s outputs stacked to ``[P, ...]``: replicated inside ``shard_map``;
      with ``mesh`` given, sharded on the leading axis over ``axis_names`` (or
      replicated when ``P`` does not divide the device count). ``P``
      need not divide the device count (padded with copies of the last member;
      ``fn`` sees the copies, but their outputs are dropped).

    Raises:
      ValueError: leaves without a common leading axis, axis names not in
        ``mesh``, or ``mesh`` given inside another ``shard_map`` (F5).
    """
    return _member_map(lambda f, args: jax.vmap(f)(*args), "shmap_vmap", fn, mesh, axis_names)


def shmap_map(
    fn: Callable[..., Any],
    mesh: Mesh | None = None,
    axis_names: AxisName = AXIS_NAME,
    batch_size: int | None = None,
) -> Callable[..., Any]:
    """Like :func:`shmap_vmap`, with ``jax.lax.map`` over each device's members.

    For memory-bound members (large networks, long rollouts): each device
    evaluates its ``L`` members one after another (``batch_size`` at a time,
    vmapped within a batch), so peak memory is that of ``batch_size`` members.
    Results equal :func:`shmap_vmap`'s up to floating-point reassociation that
    XLA may apply differently to the two programs.
    """
    def apply_local(f, args):
        return jax.lax.map(lambda a: f(*a), args, batch_size=batch_size)

    return _member_map(apply_local, "shmap_map", fn, mesh, axis_names)


def tree_device_put(tree: Any, mesh: Mesh, axis_names: AxisName | None = None) -> Any:
    """Put every leaf of ``tree`` on ``mesh``.

    Args:
      tree: host or device arrays.
      mesh: the target mesh.
      axis_names: ``None``: replicate every leaf (``PartitionSpec()``); an axis
        name or names: shard every leaf's leading axis over them (row-major).

    Returns:
      the same tree of ``jax.Array`` with ``NamedSharding(mesh, spec)``.

    Raises:
      ValueError: a sharded leaf is a scalar or its leading axis does not split
        over the axes' device count (the message names the leaf).
    """
    if axis_names is None:
        sharding = NamedSharding(mesh, P())
        return jax.tree.map(lambda x: jax.device_put(x, sharding), tree)
    names = _names(axis_names)
    n = int(np.prod([mesh.shape[a] for a in names]))
    sharding = NamedSharding(mesh, P(names if len(names) > 1 else names[0]))

    def put(path, x):
        if np.ndim(x) == 0 or np.shape(x)[0] % n:
            raise ValueError(f"leaf {jax.tree_util.keystr(path) or '<root>'} with shape "
                             f"{np.shape(x)} does not split over {n} devices on its leading axis")
        return jax.device_put(x, sharding)

    return jax.tree_util.tree_map_with_path(put, tree)
