"""Map a function over a population's members split over a device mesh.

A *population* is a pytree whose leaves share a leading axis of ``P`` members.
:func:`sharded_vmap` and :func:`sharded_map` evaluate ``fn(member, ...)`` for every
member with the members split over the devices of one or more mesh axes, and
bring the results back as one replicated array, so that

    sharded_vmap(fn)(population) == jax.vmap(fn)(population)

whatever the device count. The members are laid out as every population is
(:class:`~jaxtrainer.distributed._members.MemberLayout`): ``P`` need not divide
the device count (the population is padded with copies of its last member and
the padding is cut off again), and results are gathered bit for bit into a
device-invariant value.

Two ways to call them:

* inside ``jax.shard_map`` (e.g. in ``Module.training_step``): leave ``mesh``
  unset; the members are split over the bound ``axis_names``;
* outside: pass ``mesh``; the helper builds its own ``jax.shard_map`` and
  returns arrays sharded on their leading axis over ``axis_names``.

Passing a ``mesh`` from inside another ``shard_map`` is refused with a clear
error: a map over another device set nested in a mapped computation is not
supported, and would otherwise fail later and obscurely.

EvoRL's ``shmap_vmap(fn, mesh, in_specs, out_specs)``, ``shmap_map`` and
``tree_device_put(tree, sharding_or_device)`` are :mod:`jaxtrainer.compat.evorl`'s,
found at :mod:`jaxtrainer.distributed` under EvoRL's names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed._axis import (
    AXIS_NAME,
    AxisName,
    axis_size,
    axis_tuple,
    bound_axes,
    to_varying,
)
from jaxtrainer.distributed._members import MemberLayout, population_size

__all__ = ["check_not_nested", "local_lax_map", "local_vmap", "sharded_map", "sharded_vmap",
           "shard_tree"]


def check_not_nested(mesh: Mesh | None, what: str) -> None:
    """Raise ValueError when a ``mesh`` is given to ``what`` inside a ``shard_map``:
    a map over another device set nested in a mapped computation is not supported."""
    if mesh is None:
        return
    abstract = jax.sharding.get_abstract_mesh()
    manual = tuple(getattr(abstract, "manual_axes", ()) or ())
    if manual:
        raise ValueError(
            f"{what}(mesh=...) was called inside a shard_map already mapped over axes "
            f"{manual}; nested maps over a different device set are not supported. "
            f"Call {what} without mesh= to split members over the bound axes instead."
        )

def _place(x: Any, sharding: NamedSharding) -> Any:
    """``x`` laid out as ``sharding``: ``jax.reshard`` on a mesh whose axes are all
    Explicit (it is typed there), ``jax.device_put`` on any other mesh (e.g.
    ``Mesh(jax.devices(), ("devices",))``, whose axes are Auto)."""
    if all(t == jax.sharding.AxisType.Explicit for t in sharding.mesh.axis_types):
        return jax.reshard(x, sharding)
    return jax.device_put(x, sharding)


def local_vmap(batch_size: int | None = None) -> Callable[[Callable, tuple], Any]:
    """How a device evaluates its block of members: ``jax.vmap`` over all at once."""
    return lambda f, args: jax.vmap(f)(*args)


def local_lax_map(batch_size: int | None = None) -> Callable[[Callable, tuple], Any]:
    """How a device evaluates its block of members: ``jax.lax.map``, ``batch_size``
    at a time (peak memory of ``batch_size`` members)."""
    return lambda f, args: jax.lax.map(lambda a: f(*a), args, batch_size=batch_size)


def _member_map(
    apply_local: Callable[[Callable, tuple], Any],
    what: str,
    fn: Callable[..., Any],
    mesh: Mesh | None,
    axis_names: AxisName,
) -> Callable[..., Any]:
    names_req = axis_tuple(axis_names)

    @functools.wraps(fn)
    def mapped(*members: Any) -> Any:
        size = population_size(members)
        check_not_nested(mesh, what)
        if mesh is not None:
            unknown = [a for a in names_req if a not in mesh.axis_names]
            if unknown:
                raise ValueError(f"{what}: axis_names {unknown} are not axes of the mesh "
                                 f"{dict(mesh.shape)}")
            n = int(np.prod([mesh.shape[a] for a in names_req]))
            padded = MemberLayout(size, n, names_req).pad(members)
            spec = P(names_req if len(names_req) > 1 else names_req[0])

            def body(*local):
                return to_varying(apply_local(fn, local), names_req)

            padded = jax.tree.map(lambda x: _place(x, NamedSharding(mesh, spec)), padded)
            out = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec,
                                check_vma=True)(*padded)
            if size % n == 0:
                return out
            replicated = NamedSharding(mesh, P())  # P_pad -> P cannot stay evenly sharded
            return jax.tree.map(lambda y: _place(y, replicated)[:size], out)
        names = bound_axes(names_req)
        if not names:
            return apply_local(fn, members)
        layout = MemberLayout(size, axis_size(names), names)
        return layout.unpad(layout.gather(apply_local(fn, layout.local(layout.pad(members)))))

    return mapped

def is_axis_names(value: Any) -> bool:
    """Whether ``value`` is a mesh axis name or a sequence of them (never a
    ``PartitionSpec``, though that is a tuple of names too)."""
    if isinstance(value, P):
        return False
    if isinstance(value, str):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, str) for v in value)


def _checked(what: str, fn: Any, mesh: Any, axis_names: Any) -> None:
    if not callable(fn):
        raise ValueError(f"{what}: fn={fn!r} is not callable")
    if not is_axis_names(axis_names):
        raise ValueError(f"{what}: axis_names={axis_names!r}: expected a mesh axis name or a "
                         "sequence of names")
    if mesh is not None and not isinstance(mesh, Mesh):
        raise ValueError(f"{what}: mesh={mesh!r}: expected None or a jax.sharding.Mesh")


def sharded_vmap(fn: Callable[..., Any], mesh: Mesh | None = None,
               axis_names: AxisName = AXIS_NAME) -> Callable[..., Any]:
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
      ValueError: ``fn`` not callable, a bad ``mesh`` or ``axis_names`` (when
        building); leaves without a common leading axis, axis names not in
        ``mesh``, or ``mesh`` given inside another ``shard_map`` (when called).
    """
    _checked("sharded_vmap", fn, mesh, axis_names)
    return _member_map(local_vmap(), "sharded_vmap", fn, mesh, axis_names)


def sharded_map(fn: Callable[..., Any], mesh: Mesh | None = None, axis_names: AxisName = AXIS_NAME,
              batch_size: int | None = None) -> Callable[..., Any]:
    """Like :func:`sharded_vmap`, with ``jax.lax.map`` over each device's members.

    For memory-bound members (large networks, long rollouts): each device
    evaluates its ``L`` members one after another (``batch_size`` at a time,
    vmapped within a batch), so peak memory is that of ``batch_size`` members.
    Results equal :func:`sharded_vmap`'s up to floating-point reassociation that
    XLA may apply differently to the two programs.

    Raises:
      ValueError: as :func:`sharded_vmap`; ``batch_size`` not a positive int.
    """
    _checked("sharded_map", fn, mesh, axis_names)
    batch_size = arguments.positive_int("sharded_map batch_size", batch_size)
    return _member_map(local_lax_map(batch_size), "sharded_map", fn, mesh, axis_names)


def shard_tree(tree: Any, mesh: Mesh, axis_names: AxisName | None = None) -> Any:
    """Put every leaf of ``tree`` on ``mesh``, replicated or sharded on its leading axis.

    Args:
      tree: host or device arrays (typed PRNG keys included).
      mesh: the target :class:`jax.sharding.Mesh` (a sharding or a device, as
        EvoRL passes, is :func:`jaxtrainer.distributed.shard_tree`'s).
      axis_names: ``None``: replicate every leaf
        (``PartitionSpec()``); an axis name or names: shard every leaf's
        leading axis over them (row-major).

    Returns:
      the same tree of ``jax.Array`` with ``NamedSharding(mesh, spec)``.

    Raises:
      ValueError: ``mesh`` is not a mesh; a sharded leaf is a scalar or its
        leading axis does not split over the axes' device count (the message
        names the leaf).
    """
    if not isinstance(mesh, Mesh):
        raise ValueError(f"shard_tree: mesh={mesh!r}: expected a jax.sharding.Mesh, "
                         "a jax.sharding.Sharding or a jax.Device")
    if axis_names is None:
        sharding = NamedSharding(mesh, P())
        return jax.tree.map(lambda x: jax.device_put(x, sharding), tree)
    names = axis_tuple(axis_names)
    n = int(np.prod([mesh.shape[a] for a in names]))
    sharding = NamedSharding(mesh, P(names if len(names) > 1 else names[0]))

    def put(path, x):
        if np.ndim(x) == 0 or np.shape(x)[0] % n:
            raise ValueError(f"leaf {jax.tree_util.keystr(path) or '<root>'} with shape "
                             f"{np.shape(x)} does not split over {n} devices on its leading axis")
        return jax.device_put(x, sharding)

    return jax.tree_util.tree_map_with_path(put, tree)
