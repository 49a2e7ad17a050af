"""EvoRL's population sharding (``evorl.distributed.sharding``): :func:`shmap_vmap`
and :func:`shmap_map` in both forms, :func:`tree_device_put` with a mesh, a
sharding or a device.

``shmap_vmap(fn, mesh, in_specs, out_specs)`` (and ``shmap_map``) is
``jax.shard_map`` over ``mesh`` with those ``PartitionSpec``s, ``fn`` vmapped
(or ``lax.map``-ped) over the leading axis of each device's block, outputs laid
out as ``out_specs`` says. The caller lays the population out (e.g.
``[num_devices, members_per_device, ...]``); nothing is padded or gathered::

    mesh = jax.sharding.Mesh(jax.devices(), ("gpu",))
    pop = tree_device_put(pop, NamedSharding(mesh, P("gpu")))                  # [4, 10, 3]
    fitness = shmap_vmap(lambda x: x.sum(-1), mesh, P("gpu"), (P("gpu"),))(pop)  # [4, 10]

As EvoRL's documentation writes it, ``out_specs`` may be a one-element tuple
for a function returning one array. jaxtrainer's form (any population size,
padded and gathered) is handed to :mod:`jaxtrainer.distributed._population`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxtrainer import _arguments as arguments
from jaxtrainer.aliases import warn_changed
from jaxtrainer.compat.evorl.unset import UNSET as _UNSET
from jaxtrainer.distributed import _population as population
from jaxtrainer.distributed._axis import AXIS_NAME, AxisName
from jaxtrainer.distributed._population import check_not_nested, is_axis_names

__all__ = ["shmap_map", "shmap_vmap", "tree_device_put"]



# keyword arguments of EvoRL's form that go to jax.shard_map: check_vma, and
# check_rep, its name in the older experimental shard_map that EvoRL calls.
_SHARD_MAP_KWARGS = ("check_vma", "check_rep")


def _forms(what: str) -> str:
    extra = ", batch_size=None" if what == "shmap_map" else ""
    how = "lax.map-ped" if what == "shmap_map" else "vmapped"
    return (
        f"{what} takes one of two forms:\n"
        f"  {what}(fn, mesh=None, axis_names={AXIS_NAME!r}{extra})(*members)  jaxtrainer's "
        "form (recommended): every leaf of members is [P, ...] with any P; members split over "
        "the mesh axes axis_names, padded, results gathered bit for bit into [P, ...]\n"
        f"  {what}(fn, mesh, in_specs, out_specs{extra}, check_vma=True)(*args)  EvoRL's form: "
        "jax.shard_map over mesh (a jax.sharding.Mesh) with in_specs/out_specs "
        f"(PartitionSpecs, e.g. P('gpu')), fn {how} over each device's block")


def _form_error(what: str, reason: str) -> ValueError:
    """The error for a call of ``what`` that fits neither of its forms, or mixes
    them: the reason, then both forms written out."""
    return ValueError(f"{what}: {reason}.\n{_forms(what)}")


def _is_specs(value: Any) -> bool:
    """Whether ``value`` is a ``PartitionSpec`` or a pytree of them (EvoRL's
    ``in_specs``/``out_specs``); ``None`` entries are allowed."""
    leaves = jax.tree.leaves(value, is_leaf=lambda v: isinstance(v, P))
    return bool(leaves) and all(isinstance(v, P) for v in leaves)


def _is_batch_size(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _batch_size(what: str, value: Any) -> int | None:
    return arguments.positive_int(f"{what} batch_size", None if value is _UNSET else value)


def _parse_map_call(what: str, fn: Any, mesh: Any, specs: tuple, axis_names: Any, in_specs: Any,
           out_specs: Any, batch_size: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's form and arguments: ``{"form": "members", "axis_names", "batch_size"}``
    or ``{"form": "evorl", "in_specs", "out_specs", "check_vma", "batch_size"}``.

    Raises:
      ValueError: a call that fits neither form, or both (the message shows both).
    """
    bad = functools.partial(_form_error, what)
    if not callable(fn):
        raise bad(f"fn={fn!r} is not callable")
    unknown = sorted(set(kwargs) - set(_SHARD_MAP_KWARGS))
    if unknown:
        raise bad(f"unexpected keyword argument(s) {unknown}; EvoRL's form passes only "
                  f"{list(_SHARD_MAP_KWARGS)} on to jax.shard_map")
    if len(specs) > 2:
        raise bad(f"{2 + len(specs)} positional arguments given, at most 4")
    positional_batch = (what == "shmap_map" and len(specs) == 2 and is_axis_names(specs[0])
                        and _is_batch_size(specs[1]))
    ours = ([f"axis_names={axis_names!r}"] if axis_names is not _UNSET else []) + (
        [f"the axis name(s) {specs[0]!r} as third argument"]
        if specs and is_axis_names(specs[0]) else [])
    theirs = [f"{k}=" for k, v in (("in_specs", in_specs), ("out_specs", out_specs))
              if v is not _UNSET] + [f"{k}=" for k in sorted(kwargs)]
    if specs and _is_specs(specs[0]):
        theirs.append(f"{specs[0]!r} as third argument")
    if len(specs) == 2 and not positional_batch:
        theirs.append(f"{specs[1]!r} as fourth argument")
    if ours and theirs:
        raise bad(f"the call mixes jaxtrainer's form ({', '.join(ours)}) with EvoRL's "
                  f"({', '.join(theirs)}); use one or the other")
    if not theirs:
        if specs and axis_names is not _UNSET:
            raise bad(f"axis names given twice: positionally ({specs[0]!r}) and as "
                      f"axis_names={axis_names!r}")
        names = specs[0] if specs else (AXIS_NAME if axis_names is _UNSET else axis_names)
        if not is_axis_names(names):
            raise bad(f"axis_names={names!r}: expected a mesh axis name or a sequence of names")
        if positional_batch:
            if batch_size is not _UNSET:
                raise bad(f"batch_size given twice: positionally ({specs[1]!r}) and as "
                          f"batch_size={batch_size!r}")
            batch_size = specs[1]
        if mesh is not None and not isinstance(mesh, Mesh):
            raise bad(f"mesh={mesh!r}: expected None or a jax.sharding.Mesh")
        return {"form": "members", "axis_names": names,
                "batch_size": _batch_size(what, batch_size)}
    # EvoRL's form
    if specs and in_specs is not _UNSET:
        raise bad("in_specs given twice: positionally and as in_specs=")
    if len(specs) == 2 and out_specs is not _UNSET:
        raise bad("out_specs given twice: positionally and as out_specs=")
    in_specs = specs[0] if specs else in_specs
    out_specs = specs[1] if len(specs) == 2 else out_specs
    missing = [n for n, v in (("in_specs", in_specs), ("out_specs", out_specs)) if v is _UNSET]
    if missing:
        raise bad(f"{' and '.join(missing)} missing: {', '.join(theirs)} belong(s) to EvoRL's "
                  "form, which needs both in_specs and out_specs (a PartitionSpec is never an "
                  "axis name of jaxtrainer's form)")
    for name, value in (("in_specs", in_specs), ("out_specs", out_specs)):
        if not _is_specs(value):
            raise bad(f"{name}={value!r}: expected a jax.sharding.PartitionSpec or a pytree of "
                      "them")
    if not isinstance(mesh, Mesh):
        raise bad(f"mesh={mesh!r}: EvoRL's form needs a jax.sharding.Mesh")
    if "check_vma" in kwargs and "check_rep" in kwargs:
        raise bad("check_vma and check_rep (its older name) both given; pass check_vma")
    check = kwargs.get("check_vma", kwargs.get("check_rep", True))
    check = arguments.flag(f"{what} " + ("check_vma" if "check_vma" in kwargs else "check_rep"), check)
    return {"form": "evorl", "in_specs": in_specs, "out_specs": out_specs, "check_vma": check,
            "batch_size": _batch_size(what, batch_size)}


def _spec_map(
    apply_local: Callable[[Callable, tuple], Any],
    what: str,
    fn: Callable[..., Any],
    mesh: Mesh,
    in_specs: Any,
    out_specs: Any,
    check_vma: bool,
) -> Callable[..., Any]:
    # EvoRL's documentation writes out_specs=(P("gpu"),) for a function that returns one
    # array: a one-element tuple of specs is taken for that one output, as a prefix would be
    single = isinstance(out_specs, tuple) and not isinstance(out_specs, P) \
        and len(out_specs) == 1 and isinstance(out_specs[0], P)
    wrapped: list[bool] = []

    def local(*block: Any) -> Any:
        out = apply_local(fn, block)
        wrapped.append(single and not (isinstance(out, tuple) and len(out) == 1))
        return (out,) if wrapped[-1] else out

    mapped = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                           check_vma=check_vma)

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        check_not_nested(mesh, what)
        out = mapped(*args)
        return out[0] if wrapped and wrapped[-1] else out

    return call


def _build(what: str, apply: Callable[[int | None], Callable[[Callable, tuple], Any]],
           fn: Any, mesh: Any, specs: tuple, axis_names: Any, in_specs: Any, out_specs: Any,
           batch_size: Any, kwargs: dict[str, Any]) -> Callable[..., Any]:
    call = _parse_map_call(what, fn, mesh, specs, axis_names, in_specs, out_specs, batch_size,
                           kwargs)
    if call["form"] == "members":
        ours = {"shmap_vmap": "sharded_vmap", "shmap_map": "sharded_map"}[what]
        warn_changed(f"jaxtrainer.distributed.{what}(fn, mesh, axis_names)",
                     f"jaxtrainer.distributed.{ours}(fn, mesh, axis_names)", stacklevel=4)
        extra = (call["batch_size"],) if what == "shmap_map" else ()
        return getattr(population, ours)(fn, mesh, call["axis_names"], *extra)
    return _spec_map(apply(call["batch_size"]), what, fn, mesh, call["in_specs"],
                     call["out_specs"], call["check_vma"])


def shmap_vmap(
    fn: Callable[..., Any],
    mesh: Mesh | None = None,
    *specs: Any,
    axis_names: AxisName = _UNSET,
    in_specs: Any = _UNSET,
    out_specs: Any = _UNSET,
    **shard_map_kwargs: Any,
) -> Callable[..., Any]:
    """EvoRL's ``shmap_vmap``: ``jax.vmap(fn)`` with the members split over devices.

    jaxtrainer's own, with any population size, padding and a bitwise gather,
    is :func:`jaxtrainer.distributed.sharded_vmap`; called here in that form
    (``shmap_vmap(fn, mesh=None, axis_names=AXIS_NAME)``) it still runs, with a
    ``DeprecationWarning``, until 0.3.0.

    EvoRL's form, ``shmap_vmap(fn, mesh, in_specs, out_specs, check_vma=True)``
    (the signature of ``evorl.distributed.shmap_vmap``; ``in_specs`` and
    ``out_specs`` also by keyword): ``jax.shard_map`` over ``mesh`` with those
    ``PartitionSpec`` pytrees, ``jax.vmap(fn)`` over the leading axis of every
    argument's per-device block, outputs assembled as ``out_specs`` says (a
    ``[num_devices, L, d]`` population with ``P("gpu")`` on a 4-device mesh
    axis ``"gpu"``: ``fn`` sees ``[L, d]`` slices of each device's ``[1, L, d]``
    block). ``check_vma`` (or ``check_rep``, its name in the older
    experimental ``shard_map`` that EvoRL calls) is passed to ``jax.shard_map``.
    Nothing is padded or gathered: shapes must split as the specs say.

    Raises:
      ValueError: a call that fits neither form or both (the message shows
        both), leaves without a common leading axis, axis names not in
        ``mesh``, or ``mesh`` given inside another ``shard_map``.
    """
    return _build("shmap_vmap", population.local_vmap, fn, mesh, specs, axis_names, in_specs,
                  out_specs, _UNSET, shard_map_kwargs)


def shmap_map(
    fn: Callable[..., Any],
    mesh: Mesh | None = None,
    *specs: Any,
    axis_names: AxisName = _UNSET,
    batch_size: int | None = _UNSET,
    in_specs: Any = _UNSET,
    out_specs: Any = _UNSET,
    **shard_map_kwargs: Any,
) -> Callable[..., Any]:
    """Like :func:`shmap_vmap`, with ``jax.lax.map`` over each device's members.

    For memory-bound members (large networks, long rollouts): each device
    evaluates its ``L`` members one after another (``batch_size`` at a time,
    vmapped within a batch), so peak memory is that of ``batch_size`` members.
    Results equal :func:`shmap_vmap`'s up to floating-point reassociation that
    XLA may apply differently to the two programs.

    EvoRL's ``shmap_map(fn, mesh, in_specs, out_specs, check_vma=True)``
    (``lax.map`` over the leading axis of each device's block; ``batch_size`` by
    keyword); jaxtrainer's own is :func:`jaxtrainer.distributed.sharded_map`
    (its form here is deprecated, as in :func:`shmap_vmap`).

    Raises:
      ValueError: as :func:`shmap_vmap`; ``batch_size`` not a positive int.
    """
    return _build("shmap_map", population.local_lax_map, fn, mesh, specs, axis_names, in_specs,
                  out_specs, batch_size, shard_map_kwargs)


def tree_device_put(tree: Any, mesh: Mesh | jax.sharding.Sharding | jax.Device,
                    axis_names: AxisName | None = None) -> Any:
    """EvoRL's ``tree_device_put(tree, device_or_sharding)``: every leaf of ``tree``
    put on a sharding or device. (A mesh, jaxtrainer's old form, is deprecated:
    that is :func:`jaxtrainer.distributed.shard_tree`.)

    Args:
      tree: host or device arrays (typed PRNG keys included).
      mesh: a :class:`jax.sharding.Mesh` (deprecated:
        :func:`jaxtrainer.distributed.shard_tree`); or a
        :class:`jax.sharding.Sharding` (e.g. ``NamedSharding(mesh, P("gpu"))``
        to shard every leaf's leading axis over mesh axis ``"gpu"``) or a
        :class:`jax.Device`: then every leaf is ``jax.device_put`` there.
      axis_names: with a mesh only (replicate when ``None``, else shard the
        leading axis over these axes).

    Returns:
      the same tree of ``jax.Array``, placed there.

    Raises:
      ValueError: ``mesh`` is none of the three; ``axis_names`` given with a
        sharding or device; as the mesh form otherwise.
    """
    if isinstance(mesh, (jax.sharding.Sharding, jax.Device)):
        if axis_names is not None:
            raise ValueError(f"tree_device_put: axis_names={axis_names!r} goes with a mesh; "
                             f"{mesh!r} already says where every leaf goes")
        return jax.tree.map(lambda x: jax.device_put(x, mesh), tree)
    warn_changed("jaxtrainer.distributed.tree_device_put(tree, mesh, axis_names)",
                 "jaxtrainer.distributed.shard_tree(tree, mesh, axis_names)")
    return population.shard_tree(tree, mesh, axis_names)
