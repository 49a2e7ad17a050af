"""EvoRL's gradient helpers (``evorl.distributed.gradients``): :func:`loss_and_pgrad`,
:func:`gradient_update`, :func:`agent_gradient_update`.

They build a function once and call it in the step, with EvoRL's argument order
and return values, and differentiate with respect to
:func:`~jaxtrainer.distributed._gradient_step.local_copy` of the params, so the
averaged gradient is the single-device one under every strategy. jaxtrainer's
one-call step is :func:`jaxtrainer.distributed.averaged_update`; called through
``gradient_update`` in that form it still runs, with a ``DeprecationWarning``,
until 0.3.0.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import optax

from jaxtrainer import _arguments as arguments
from jaxtrainer.aliases import warn_changed
from jaxtrainer.compat.evorl.unset import UNSET as _UNSET
from jaxtrainer.distributed import _gradient_step as gradient_step
from jaxtrainer.distributed._axis import AXIS_NAME, AxisName, pmean, trace_axes
from jaxtrainer.distributed._gradient_step import local_copy

__all__ = ["agent_gradient_update", "gradient_update", "loss_and_pgrad"]


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
    """The error for a call of ``gradient_update`` that fits neither of its forms,
    or mixes them: the reason, then both forms written out."""
    return ValueError(f"{what}: {reason}.\n{_FORMS}")


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
    """EvoRL's ``gradient_update``: build an optimizer step whose gradients are
    averaged over devices.

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

    It differentiates with respect to :func:`local_copy` of the params
    over the bound axes, so that in one's own ``shard_map(check_vma=True)``
    code, too, the averaged gradient is the single-device one (there the
    gradient with respect to replicated params would otherwise arrive already
    summed over devices).

    jaxtrainer's one-call step is :func:`jaxtrainer.distributed.averaged_update`
    (``(loss_fn, params, opt_state, optimizer, *args) -> (params, opt_state,
    loss, aux)``); a call of this function in that form still runs, with a
    ``DeprecationWarning``, until 0.3.0.

    Raises:
      ValueError: a call that fits neither form, or mixes them (e.g. params with
        ``pmap_axis_name=``, or an optimizer second with ``axis_name=``), or a
        bad ``optimizer``, ``pmap_axis_name`` or ``has_aux``; the message shows
        both forms.
    """
    call = _parse_gradient_call(loss_fn, args, axis_name, optimizer, pmap_axis_name, has_aux)
    if call["form"] == "ours":
        warn_changed("jaxtrainer.distributed.gradient_update(loss_fn, params, opt_state, "
                     "optimizer, *args)", "jaxtrainer.distributed.averaged_update(loss_fn, "
                     "params, opt_state, optimizer, *args)")
        return gradient_step.averaged_update(loss_fn, call["params"], call["opt_state"],
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

