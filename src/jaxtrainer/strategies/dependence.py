"""Which values of a traced per-device function may differ between devices.

Strategies trace module code with ``jax.pmap``'s semantics
(``jax.shard_map(check_vma=False)``): module code needs no varying-axis casts,
and the gradient of a loss with respect to replicated parameters is each
device's own, so ``pmean(jax.grad(loss)(params))`` is the average gradient.
What the varying-axis types would have told (which state leaves are per-device,
which replicated leaves a step made differ between devices) is recovered here,
after tracing, by a data-flow pass over the function's jaxpr.

The rule: a value depends on the devices of mesh axis ``a`` when it is computed
from an input that does, from ``axis_index(a)`` or from a collective that gives
each device its own value over ``a`` (``ppermute``, ``all_to_all``,
``psum_scatter``). A reduction over ``a`` (``psum``, ``pmax``, ``pmin``,
``all_gather``; ``pmean`` is a ``psum``) gives every device the same value, as
does :func:`jaxtrainer.distributed.pmean` and its kin over an axis of one
device, which leave the collective out and an identity call in its place.
:func:`jaxtrainer.distributed.per_device` marks values per-device.
Loops are followed to a fixed point: a ``scan``/``while_loop`` carry that starts
device-independent and picks up a per-device value is per-device, and a
``while_loop`` whose condition is per-device makes every carry its body changes
per-device; a ``cond`` whose predicate is per-device makes its outputs
per-device. Other higher-order primitives are followed into their sub-jaxprs
when those map inputs to outputs one to one (``jit``, ``checkpoint``,
``custom_jvp``/``custom_vjp``); otherwise their outputs depend on every input
and on every axis their bodies index. The pass over-approximates: it may call a
value per-device that happens to agree everywhere, never the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.extend as jex

from jaxtrainer.distributed._axis import PER_DEVICE_MARK, REDUCED_MARK

Axes = frozenset[str]
"""The mesh axes a value may vary over (empty: the same on every device)."""

_NONE: Axes = frozenset()
_MARK = re.compile(f"({re.escape(PER_DEVICE_MARK)}|{re.escape(REDUCED_MARK)})" + r":([^()]+)")
_REDUCING = {"psum": "axes", "pmax": "axes", "pmin": "axes", "all_gather": "axis_name",
             "psum_invariant": "axes"}
_PER_DEVICE = {"axis_index": "axis_name", "ppermute": "axis_name", "all_to_all": "axis_name",
               "reduce_scatter": "axis_name", "psum_scatter": "axis_name"}


def _names(value: Any) -> Axes:
    """Mesh axis names in a primitive's axis parameter (a name or a tuple;
    integer positional axes are not mesh axes)."""
    items = value if isinstance(value, tuple | list | frozenset | set) else (value,)
    return frozenset(a for a in items if isinstance(a, str))


def _union(deps: Iterable[Axes]) -> Axes:
    out: Axes = _NONE
    for d in deps:
        out |= d
    return out


def _subjaxprs(params: dict) -> list[Any]:
    """The (open) jaxprs among a primitive's parameters, in parameter order."""
    return list(jex.core.jaxprs_in_params(params))


def _read(env: dict, var: Any) -> Axes:
    return _NONE if isinstance(var, jex.core.Literal) else env.get(var, _NONE)


def _indexed_axes(jaxpr: Any) -> Axes:
    """Every mesh axis that an equation of ``jaxpr`` (or of its sub-jaxprs)
    makes per-device values over."""
    axes: Axes = _NONE
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _PER_DEVICE:
            axes |= _names(eqn.params[_PER_DEVICE[eqn.primitive.name]])
        for sub in _subjaxprs(eqn.params):
            axes |= _indexed_axes(sub)
    return axes


def _run(jaxpr: Any, inputs: Sequence[Axes]) -> list[Axes]:
    env: dict = {v: _NONE for v in jaxpr.constvars}
    env.update(zip(jaxpr.invars, inputs, strict=True))
    for eqn in jaxpr.eqns:
        ins = [_read(env, v) for v in eqn.invars]
        outs = _equation(eqn, ins)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [_read(env, v) for v in jaxpr.outvars]


def _fixed_point(step, carry: list[Axes]) -> list[Axes]:
    """Grow ``carry`` by ``step(carry)`` until it no longer changes."""
    while True:
        grown = [c | s for c, s in zip(carry, step(carry), strict=True)]
        if grown == carry:
            return carry
        carry = grown


def _scan(eqn: Any, ins: list[Axes]) -> list[Axes]:
    body = eqn.params["jaxpr"].jaxpr
    nc, nk = eqn.params["num_consts"], eqn.params["num_carry"]
    consts, xs = ins[:nc], ins[nc + nk:]
    carry = _fixed_point(lambda c: _run(body, consts + c + xs)[:nk], list(ins[nc:nc + nk]))
    return carry + _run(body, consts + carry + xs)[nk:]


def _while(eqn: Any, ins: list[Axes]) -> list[Axes]:
    cond, body = eqn.params["cond_jaxpr"].jaxpr, eqn.params["body_jaxpr"].jaxpr
    cn, bn = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    cond_consts, body_consts = ins[:cn], ins[cn:cn + bn]
    # carries the body passes through untouched keep their value whatever the trip count
    changed = [o is not i for o, i in zip(body.outvars, body.invars[bn:], strict=True)]

    def step(carry):
        pred = _run(cond, cond_consts + carry)[0]
        out = _run(body, body_consts + carry)
        return [o | (pred if ch else _NONE) for o, ch in zip(out, changed, strict=True)]

    return _fixed_point(step, list(ins[cn + bn:]))


def _cond(eqn: Any, ins: list[Axes]) -> list[Axes]:
    index, ops = ins[0], ins[1:]
    outs = [_run(b.jaxpr, ops) for b in eqn.params["branches"]]
    return [index | _union(col) for col in zip(*outs, strict=True)]


def _equation(eqn: Any, ins: list[Axes]) -> list[Axes]:
    name, params = eqn.primitive.name, eqn.params
    n_out = len(eqn.outvars)
    if name in _REDUCING and params.get("axis_index_groups") is None:
        return [_union(ins) - _names(params[_REDUCING[name]])] * n_out
    if name in _PER_DEVICE:
        return [_union(ins) | _names(params[_PER_DEVICE[name]])] * n_out
    # per_device(...), or a reduction over axes of one device left out of the
    # program; possibly under jvp/transpose: name "jvp(<mark>)"
    marked = _MARK.search(str(params.get("name", ""))) if name == "jit" else None
    if marked:
        kind, axes = marked.group(1), frozenset(marked.group(2).split(":"))
        return [_union(ins) | axes if kind == PER_DEVICE_MARK else _union(ins) - axes] * n_out
    if name == "scan":
        return _scan(eqn, ins)
    if name == "while":
        return _while(eqn, ins)
    if name == "cond":
        return _cond(eqn, ins)
    subs = _subjaxprs(params)
    if not subs:
        return [_union(ins)] * n_out
    first = subs[0]
    if (name != "shard_map" and len(first.invars) == len(ins)
            and len(first.outvars) == n_out):
        return _run(first, ins)  # jit, checkpoint, custom_jvp/vjp calls: one to one
    return [_union(ins) | _union(_indexed_axes(s) for s in subs)] * n_out


def dependence(closed: Any, inputs: Sequence[Axes]) -> list[Axes]:
    """The mesh axes each output of ``closed`` may vary over.

    Args:
      closed: a ``ClosedJaxpr`` traced inside ``jax.shard_map`` (so
        ``axis_index`` and the collectives name mesh axes), e.g. the ``jaxpr``
        of ``jax.jit(fn).trace(*args)``.
      inputs: for each of its inputs (flattened, in order), the axes that input
        varies over; its constants vary over none.

    Returns:
      One ``frozenset`` of axis names per output, in order.

    Raises:
      ValueError: ``inputs`` and the jaxpr's inputs differ in number.
    """
    jaxpr = closed.jaxpr
    if len(inputs) != len(jaxpr.invars):
        raise ValueError(f"dependence: {len(inputs)} input dependences for a jaxpr of "
                         f"{len(jaxpr.invars)} inputs")
    return _run(jaxpr, [frozenset(i) for i in inputs])


def tree_dependence(traced: Any, inputs: Any) -> Any:
    """:func:`dependence` of a ``jax.jit(fn).trace(*args)`` result, per pytree leaf.

    ``inputs``: a pytree shaped like ``traced``'s positional arguments with one
    ``Axes`` (frozenset) per array leaf. Returns a pytree shaped like the
    function's output with one ``Axes`` per leaf."""
    flat = jax.tree.leaves(inputs, is_leaf=lambda x: isinstance(x, frozenset))
    out = dependence(traced.jaxpr, flat)
    return jax.tree.unflatten(traced.out_tree, out)
