"""EvoRL's call forms, for code written against ``evorl.distributed``.

Code written for EvoRL runs with its import changed from ``evorl.distributed``
to ``jaxtrainer.distributed``, which exports these functions under EvoRL's names.
Where a name is also jaxtrainer's (``gradient_update``, ``shmap_vmap``,
``shmap_map``, ``tree_device_put``), the function here takes both forms, tells
them apart by the arguments (a call that fits neither or mixes them is a
ValueError whose message shows both), and hands jaxtrainer's form to the core
function (:mod:`jaxtrainer.distributed.gradients`,
:mod:`jaxtrainer.distributed.population`), which takes that form only.

* Gradients: :func:`loss_and_pgrad`, :func:`gradient_update` as
  ``gradient_update(loss_fn, optimizer, pmap_axis_name, has_aux=False)`` and
  :func:`agent_gradient_update` build a function once and call it in the step,
  with EvoRL's argument order and return values. They differentiate with
  respect to :func:`~jaxtrainer.distributed.local_copy` of the params, so the
  averaged gradient is the single-device one under every strategy.
* Populations: ``shmap_vmap(fn, mesh, in_specs, out_specs)`` (and
  ``shmap_map``) is ``jax.shard_map`` over ``mesh`` with those
  ``PartitionSpec``s, ``fn`` vmapped (or ``lax.map``-ped) over the leading axis
  of each device's block, outputs laid out as ``out_specs`` says. The caller
  lays the population out (e.g. ``[num_devices, members_per_device, ...]``);
  nothing is padded or gathered::

      mesh = jax.sharding.Mesh(jax.devices(), ("gpu",))
      pop = tree_device_put(pop, NamedSharding(mesh, P("gpu")))                  # [4, 10, 3]
      fitness = shmap_vmap(lambda x: x.sum(-1), mesh, P("gpu"), (P("gpu"),))(pop)  # [4, 10]

  As EvoRL's documentation writes it, ``out_specs`` may be a one-element tuple
  for a function returning one array.
* ``tree_device_put(tree, sharding_or_device)`` puts every leaf there.
* ``PMAP_AXIS_NAME``, ``get_global_ranks`` and ``is_dist_initialized`` (in
  :mod:`jaxtrainer.distributed`) are EvoRL's names for ``AXIS_NAME``,
  ``global_ranks`` and ``is_distributed``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import optax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxtrainer import arguments
from jaxtrainer.distributed import gradients, population
from jaxtrainer.distributed.axis import AXIS_NAME, AxisName, pmean, trace_axes
from jaxtrainer.distributed.gradients import local_copy
from jaxtrainer.distributed.population import check_not_nested, is_axis_names

__all__ = [
    "agent_gradient_update",
    "gradient_update",
    "loss_and_pgrad",
    "shmap_map",
    "shmap_vmap",
    "tree_device_put",
]

class _Unset:
    """Marks an argument left out (shown as ``<unset>`` in signatures)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


# keyword arguments of EvoRL's form that go to jax.shard_map: check_vma, and
# check_rep, its name in the older experimental shard_map that EvoRL calls.
_SHARD_MAP_KWARGS = ("check_vma", "check_rep")


# ---- gradients ----------------------------------------------------------------------
_FORMS = (
    "gradient_update takes one of two forms:\n"
    "  gradient_update(loss_fn, params, opt_state, optimizer, *args, axis_name="
    f"{AXIS_NAME!r}) -> (params, opt_state, loss, aux)  jaxtrainer's form: one optimizer "
    "step now; loss_fn(params, *args) -> (loss, aux)\n"
    "  gradient_update(loss_fn, optimizer, pmap_axis_name, has_aux=False) -> "
    "f(opt_state, params, *args, **kwargs) -> (value, params, opt_state)  EvoRL's form: "
    "builds the step; optimizer is an optax.GradientTransformation, pmap_axis_name an axis "
    "name (jaxtrainer.distributed.PMAP_AXIS_NAME) or None")


def _form_error(what: str, reason: str) -> ValueError:
    """The error for a call of ``what`` that fits neither of its forms, or mixes
    them: the reason, then both forms written out."""
    forms = _FORMS if what == "gradient_update" else _forms(what)
    return ValueError(f"{what}: {reason}.\n{forms}")


def _check_callable(what: str, name: str, value: Any) -> None:
    if not callable(value):
        raise ValueError(f"{what}: {name}={value!r} is not callable; expected a function")


def _check_optimizer(what: str, value: Any) -> None:
    if not isinstance(value, optax.GradientTransformation):
        raise ValueError(f"{what}: optimizer={value!r}: expected an optax.GradientTransformation "
                         "(e.g. optax.adam(3e-4))")


def _check_axis_name(what: str, value: Any) -> None:
    if value is None or isinstance(value, str):
        return
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        return
    raise ValueError(f"{what}: pmap_axis_name={value!r}: expected a mesh axis name (e.g. "
                     f"jaxtrainer.distributed.PMAP_AXIS_NAME == {AXIS_NAME!r}), a sequence of "
                     "names, or None (no synchronisation, one device)")


def _check_bound(what: str, pmap_axis_name: AxisName) -> None:
    """Check, while tracing, that some axis of ``pmap_axis_name`` is bound if any
    device axis is.

    Raises:
      ValueError: inside a mapped computation none of them is bound. The
        gradient would then come back summed over the axes that are bound and
        never be averaged; EvoRL's ``jax.lax.pmean`` fails on such a name too.
    """
    manual = tuple(getattr(jax.sharding.get_abstract_mesh(), "manual_axes", ()) or ())
    if manual and not trace_axes(pmap_axis_name):
        raise ValueError(
            f"{what}: pmap_axis_name={pmap_axis_name!r} is not bound here; the mapped axes "
            f"are {manual}. Pass jaxtrainer.distributed.PMAP_AXIS_NAME ({AXIS_NAME!r}, the "
            "axis every strategy binds), or None for no synchronisation")


def loss_and_pgrad(
    loss_fn: Callable[..., Any],
    pmap_axis_name: AxisName | None,
    has_aux: bool = False,
) -> Callable[..., tuple[Any, Any]]:
    """EvoRL's ``evorl.distributed.loss_and_pgrad``: ``jax.value_and_grad`` of
    ``loss_fn`` with the gradient averaged over the devices of ``pmap_axis_name``.

    Args:
      loss_fn: ``loss_fn(params, *args, **kwargs)`` returning ``loss: float32[]``,
        or ``(loss, aux)`` when ``has_aux``; differentiated with respect to its
        first argument, ``params`` (any pytree of float arrays).
      pmap_axis_name: the device axis to average over:
        :data:`~jaxtrainer.distributed.PMAP_AXIS_NAME` (the axis every strategy
        binds), another bound mesh axis name or a sequence of names, or
        ``None`` for no averaging (EvoRL's one-device case).
      has_aux: whether ``loss_fn`` returns ``(loss, aux)``.

    Returns:
      ``g(params, *args, **kwargs) -> (value, grads)``: ``value`` is what
      ``loss_fn`` returns (``loss`` or ``(loss, aux)``), computed on this
      device's data and *not* averaged (as in EvoRL; ``pmean`` it for a global
      figure); ``grads`` has the structure, shapes and dtypes of ``params`` and
      is the mean of the devices' own gradients, equal on every device. With
      ``pmap_axis_name=None`` this is ``jax.value_and_grad(loss_fn, has_aux)``
      itself; outside ``shard_map``/``pmap`` it computes the same.

    ``g`` differentiates with respect to :func:`local_copy` of ``params``
    (over the bound axes only), so each device's gradient is its own and the
    ``pmean`` gives the single-device gradient, as EvoRL's version does under
    ``jax.pmap``, in a strategy and in one's own ``shard_map(check_vma=True)``
    code alike.

    Raises:
      ValueError: ``loss_fn`` is not callable, ``pmap_axis_name`` is not a name,
        names or ``None``, ``has_aux`` is not a bool (all when building ``g``);
        inside a mapped computation, none of ``pmap_axis_name`` is bound (when
        ``g`` is traced, before compiling).
    """
    return _loss_and_pgrad(loss_fn, pmap_axis_name, has_aux, "loss_and_pgrad")


def _loss_and_pgrad(loss_fn: Callable[..., Any], pmap_axis_name: AxisName | None, has_aux: Any,
                    what: str) -> Callable[..., tuple[Any, Any]]:
    """:func:`loss_and_pgrad`, its errors naming the public function ``what``."""
    _check_callable(what, "loss_fn", loss_fn)
    _check_axis_name(what, pmap_axis_name)
    has_aux = arguments.flag(f"{what} has_aux", has_aux)
    value_and_grad = jax.value_and_grad(loss_fn, has_aux=has_aux)
    if pmap_axis_name is None:
        return value_and_grad

    def g(params: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        _check_bound(what, pmap_axis_name)
        value, grads = value_and_grad(local_copy(params, pmap_axis_name), *args, **kwargs)
        return value, pmean(grads, pmap_axis_name)

    return g


def _evorl_gradient_update(
    loss_fn: Callable[..., Any],
    optimizer: optax.GradientTransformation,
    pmap_axis_name: AxisName | None,
    has_aux: bool,
    what: str,
) -> Callable[..., tuple[Any, Any, optax.OptState]]:
    _check_optimizer(what, optimizer)
    value_and_pgrad = _loss_and_pgrad(loss_fn, pmap_axis_name, has_aux, what)

    def step(opt_state: optax.OptState, params: Any, *args: Any,
             **kwargs: Any) -> tuple[Any, Any, optax.OptState]:
        value, grads = value_and_pgrad(params, *args, **kwargs)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return value, optax.apply_updates(params, updates), opt_state

    return step


def _parse_gradient_call(loss_fn: Any, args: tuple, axis_name: Any, optimizer: Any, pmap_axis_name: Any,
           has_aux: Any) -> dict[str, Any]:
    """The call's form: ``{"form": "ours", "params", "opt_state", "optimizer",
    "args", "axis_name"}`` or ``{"form": "evorl", "optimizer", "pmap_axis_name",
    "has_aux"}``.

    Raises:
      ValueError: a call that fits neither form, or both (the message shows both).
    """
    bad = functools.partial(_form_error, "gradient_update")
    if not callable(loss_fn):
        raise bad(f"loss_fn={loss_fn!r} is not callable")
    evorl_positional = bool(args) and isinstance(args[0], optax.GradientTransformation)
    theirs = [f"{k}=" for k, v in (("pmap_axis_name", pmap_axis_name), ("has_aux", has_aux))
              if v is not _UNSET]
    if evorl_positional:
        theirs.insert(0, "an optimizer as second argument")
    elif not args and optimizer is not _UNSET:
        theirs.insert(0, "optimizer= with no params")
    ours = (["axis_name="] if axis_name is not _UNSET else []) + (
        [f"params ({type(args[0]).__name__}) as second argument"]
        if args and not evorl_positional else [])
    if theirs and ours:
        raise bad(f"the call mixes jaxtrainer's form ({', '.join(ours)}) with EvoRL's "
                  f"({', '.join(theirs)}); use one or the other")
    if theirs:
        if len(args) > 3:
            raise bad(f"{1 + len(args)} positional arguments given; EvoRL's form takes at most "
                      "4 (loss_fn, optimizer, pmap_axis_name, has_aux)")
        named = {"optimizer": optimizer, "pmap_axis_name": pmap_axis_name, "has_aux": has_aux}
        for name, value in zip(("optimizer", "pmap_axis_name", "has_aux"), args, strict=False):
            if named[name] is not _UNSET:
                raise bad(f"{name} given twice: positionally ({value!r}) and as {name}=")
            named[name] = value
        if named["pmap_axis_name"] is _UNSET:
            raise bad("pmap_axis_name missing: EvoRL's form needs it (PMAP_AXIS_NAME to average "
                      "over devices, None for none)")
        return {"form": "evorl", "optimizer": named["optimizer"],
                "pmap_axis_name": named["pmap_axis_name"],
                "has_aux": False if named["has_aux"] is _UNSET else named["has_aux"]}
    if optimizer is not _UNSET:
        if len(args) != 2:
            raise bad(f"optimizer= given with {len(args)} positional argument(s) after loss_fn; "
                      "jaxtrainer's form then takes exactly params and opt_state (extra loss "
                      "arguments need the optimizer as fourth argument)")
        params, opt_state, rest = args[0], args[1], ()
    else:
        if len(args) < 3:
            raise bad(f"{1 + len(args)} positional argument(s) given; jaxtrainer's form needs "
                      "loss_fn, params, opt_state, optimizer")
        params, opt_state, optimizer, rest = args[0], args[1], args[2], args[3:]
    if not callable(getattr(optimizer, "update", None)):
        raise bad(f"optimizer={optimizer!r}: expected an optax.GradientTransformation as fourth "
                  "argument")
    return {"form": "ours", "params": params, "opt_state": opt_state, "optimizer": optimizer,
            "args": rest, "axis_name": AXIS_NAME if axis_name is _UNSET else axis_name}


def gradient_update(
    loss_fn: Callable[..., Any],
    *args: Any,
    axis_name: AxisName = _UNSET,
    optimizer: optax.GradientTransformation = _UNSET,
    pmap_axis_name: AxisName | None = _UNSET,
    has_aux: bool = _UNSET,
) -> Any:
    """One optimizer step with gradients averaged over devices, in one of two forms.

    **jaxtrainer's form**, ``gradient_update(loss_fn, params, opt_state,
    optimizer, *args, axis_name=AXIS_NAME)``: ``loss_fn(params, *args) ->
    (loss: float32[], aux)`` is differentiated on this device's data (with
    respect to :func:`local_copy` of ``params``, so the gradient is this
    device's own); gradients, loss and aux are averaged with :func:`pmean` (a
    no-op on one device), then ``optimizer`` is applied. Every device applies
    the same averaged update, so replicated parameters stay bitwise equal (no
    replica drifts from the others). Returns ``(new_params, new_opt_state,
    loss, aux)``: params and optimizer state with the input's structure, shapes
    and dtypes; loss ``float32[]`` and aux averaged over devices.

    **EvoRL's form** (``evorl.distributed.gradient_update``),
    ``gradient_update(loss_fn, optimizer, pmap_axis_name, has_aux=False)``:
    builds and returns ``f(opt_state, params, *args, **kwargs) -> (value,
    new_params, new_opt_state)``. ``loss_fn(params, *args, **kwargs)`` returns
    ``loss: float32[]`` (or ``(loss, aux)`` when ``has_aux``); its gradient is
    averaged over the devices of ``pmap_axis_name`` (:func:`loss_and_pgrad`;
    ``None``: not averaged), then ``optimizer.update(grads, opt_state, params)``
    and ``optax.apply_updates`` give the new params. ``value`` is ``loss_fn``'s
    output on this device's data, not averaged, as in EvoRL. ``params`` is passed
    to ``optimizer.update`` as well (EvoRL omits it; only optimizers that read
    it, such as ``optax.adamw``, see a difference, and they need it).

    Both forms differentiate with respect to :func:`local_copy` of the params
    over the bound axes, so that in one's own ``shard_map(check_vma=True)``
    code, too, the averaged gradient is the single-device one (there the
    gradient with respect to replicated params would otherwise arrive already
    summed over devices).

    The forms are told apart by the second argument: an
    ``optax.GradientTransformation`` (or ``optimizer=`` with no params, or
    ``pmap_axis_name=``/``has_aux=``) selects EvoRL's form; params select ours.

    Raises:
      ValueError: a call that fits neither form, or mixes them (e.g. params with
        ``pmap_axis_name=``, or an optimizer second with ``axis_name=``), or a
        bad ``optimizer``, ``pmap_axis_name`` or ``has_aux``; the message shows
        both forms.
    """
    call = _parse_gradient_call(loss_fn, args, axis_name, optimizer, pmap_axis_name, has_aux)
    if call["form"] == "ours":
        return gradients.gradient_update(loss_fn, call["params"], call["opt_state"],
                                         call["optimizer"], *call["args"],
                                         axis_name=call["axis_name"])
    try:
        return _evorl_gradient_update(loss_fn, call["optimizer"], call["pmap_axis_name"],
                                      call["has_aux"], "gradient_update")
    except ValueError as err:  # a bad optimizer, pmap_axis_name or has_aux
        raise ValueError(f"{err}\n{_FORMS}") from None


def _no_params_field(agent_state: Any) -> ValueError:
    return ValueError(
        f"agent_gradient_update: agent_state of type {type(agent_state).__name__} has no params "
        "field with replace(params=...) (such as a flax.struct dataclass) and is not a mapping "
        "with a 'params' entry; pass attach_fn and detach_fn")


def _detach_params(agent_state: Any) -> Any:
    """``agent_state.params`` (or ``agent_state["params"]`` for a mapping)."""
    if isinstance(agent_state, Mapping) and "params" in agent_state:
        return agent_state["params"]
    if not isinstance(agent_state, Mapping) and hasattr(agent_state, "params"):
        return agent_state.params
    raise _no_params_field(agent_state)


def _attach_params(agent_state: Any, params: Any) -> Any:
    """``agent_state`` with ``params`` in place of its own: ``replace(params=...)``
    for a dataclass such as ``flax.struct.PyTreeNode``, a copy for a mapping."""
    if isinstance(agent_state, Mapping):
        return {**agent_state, "params": params}
    replace = getattr(agent_state, "replace", None)
    if not callable(replace):
        raise _no_params_field(agent_state)
    return replace(params=params)


def agent_gradient_update(
    loss_fn: Callable[..., Any],
    optimizer: optax.GradientTransformation,
    pmap_axis_name: AxisName | None,
    has_aux: bool = False,
    attach_fn: Callable[[Any, Any], Any] = _attach_params,
    detach_fn: Callable[[Any], Any] = _detach_params,
) -> Callable[..., tuple[Any, Any, optax.OptState]]:
    """EvoRL's ``evorl.distributed.agent_gradient_update``: EvoRL's
    :func:`gradient_update` for a loss written on the whole agent state.

    Args:
      loss_fn: ``loss_fn(agent_state, *args, **kwargs)`` (EvoRL: ``(agent_state,
        sample_batch, key)``) returning ``loss: float32[]``, or ``(loss, aux)``
        when ``has_aux``; differentiated with respect to the params inside
        ``agent_state``.
      optimizer: an ``optax.GradientTransformation`` for the params.
      pmap_axis_name: as in :func:`loss_and_pgrad`
        (:data:`~jaxtrainer.distributed.PMAP_AXIS_NAME`, or ``None``).
      has_aux: whether ``loss_fn`` returns ``(loss, aux)``.
      attach_fn: ``attach_fn(agent_state, params) -> agent_state`` with those
        params; default ``agent_state.replace(params=params)`` (a copy with
        ``"params"`` replaced for a mapping).
      detach_fn: ``detach_fn(agent_state) -> params``; default
        ``agent_state.params`` (``agent_state["params"]`` for a mapping).

    Returns:
      ``f(opt_state, agent_state, *args, **kwargs) -> (value, new_agent_state,
      new_opt_state)``: one optimizer step on the detached params with the
      gradient averaged over devices, the new params attached to
      ``agent_state`` (its other fields unchanged). ``value`` is ``loss_fn``'s
      output on this device's data, not averaged, as in EvoRL.

    The params are differentiated as :func:`local_copy`, so the averaged
    gradient is the single-device one in one's own ``shard_map(check_vma=True)``
    code too (see :func:`gradient_update`).

    Raises:
      ValueError: ``loss_fn``, ``attach_fn`` or ``detach_fn`` not callable, a bad
        ``optimizer``, ``pmap_axis_name`` or ``has_aux`` (when building ``f``);
        the default ``detach_fn``/``attach_fn`` given an agent state with no
        ``params`` field and ``replace``, and not a mapping with a ``"params"``
        entry (when ``f`` is called or traced).
    """
    what = "agent_gradient_update"
    _check_callable(what, "loss_fn", loss_fn)
    _check_callable(what, "attach_fn", attach_fn)
    _check_callable(what, "detach_fn", detach_fn)

    def params_loss(params: Any, agent_state: Any, *args: Any, **kwargs: Any) -> Any:
        return loss_fn(attach_fn(agent_state, params), *args, **kwargs)

    step = _evorl_gradient_update(params_loss, optimizer, pmap_axis_name, has_aux, what)

    def f(opt_state: optax.OptState, agent_state: Any, *args: Any,
          **kwargs: Any) -> tuple[Any, Any, optax.OptState]:
        value, params, opt_state = step(opt_state, detach_fn(agent_state), agent_state,
                                        *args, **kwargs)
        return value, attach_fn(agent_state, params), opt_state

    return f


# ---- populations -------------------------------------------------------------------
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
        extra = (call["batch_size"],) if what == "shmap_map" else ()
        return getattr(population, what)(fn, mesh, call["axis_names"], *extra)
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
    """``jax.vmap(fn)`` with the members split over devices, in either form.

    jaxtrainer's form (recommended), ``shmap_vmap(fn, mesh=None,
    axis_names=AXIS_NAME)`` (``axis_names`` also as the third positional
    argument): any population size ``P``, members padded, split over the mesh
    axes ``axis_names`` and gathered bit for bit into ``[P, ...]``; see
    :func:`jaxtrainer.distributed.population.shmap_vmap`, which it calls.

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

    Both forms of :func:`shmap_vmap`: jaxtrainer's ``shmap_map(fn, mesh=None,
    axis_names=AXIS_NAME, batch_size=None)`` (``axis_names`` and
    ``batch_size`` also positionally) and EvoRL's ``shmap_map(fn, mesh,
    in_specs, out_specs, check_vma=True)`` (``lax.map`` over the leading axis
    of each device's block; ``batch_size`` by keyword).

    Raises:
      ValueError: as :func:`shmap_vmap`; ``batch_size`` not a positive int.
    """
    return _build("shmap_map", population.local_lax_map, fn, mesh, specs, axis_names, in_specs,
                  out_specs, batch_size, shard_map_kwargs)


def tree_device_put(tree: Any, mesh: Mesh | jax.sharding.Sharding | jax.Device,
                    axis_names: AxisName | None = None) -> Any:
    """Put every leaf of ``tree`` on ``mesh``, or, as EvoRL's
    ``tree_device_put(tree, device_or_sharding)``, on a sharding or device.

    Args:
      tree: host or device arrays (typed PRNG keys included).
      mesh: a :class:`jax.sharding.Mesh`
        (:func:`jaxtrainer.distributed.population.tree_device_put`); or a
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
    return population.tree_device_put(tree, mesh, axis_names)
