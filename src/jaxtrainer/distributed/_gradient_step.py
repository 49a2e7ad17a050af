"""Data-parallel gradient steps: :func:`averaged_update` and :func:`local_copy`.

Every strategy runs ``training_step`` with ``jax.pmap``'s semantics, where each
device's gradient with respect to replicated parameters is its own, so a
hand-written ``pmean(jax.grad(loss_fn)(params))`` is already the mean over
devices, the gradient a single device computes on all rows;
:func:`averaged_update` gives the same in one call. It differentiates with
respect to :func:`local_copy` of the parameters, which keeps that meaning in
one's own ``jax.shard_map(..., check_vma=True)`` code, where the gradient with
respect to a replicated (device-invariant) input comes back already *summed*
over devices (the transpose of the implicit broadcast is a ``psum``) and a
``pmean`` of it would leave N times the mean.

EvoRL's gradient helpers (``loss_and_pgrad``, ``agent_gradient_update`` and
``gradient_update(loss_fn, optimizer, pmap_axis_name)``, which builds a step
function) are in :mod:`jaxtrainer.compat.evorl.gradients`, found at EvoRL's
paths :mod:`jaxtrainer.distributed` and
:mod:`jaxtrainer.distributed.gradients`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from jaxtrainer.distributed._axis import AXIS_NAME, AxisName, cast_varying, pmean, trace_axes

__all__ = ["averaged_update", "local_copy"]


def _manual_axes(axis_name: AxisName) -> tuple[str, ...]:
    """The axes of ``axis_name`` bound in this trace by ``shard_map`` (or
    ``jax.pmap``, which is built on it): the axes whose values may be typed
    replicated. An axis bound by ``jax.vmap(axis_name=...)`` is not one."""
    manual = frozenset(getattr(jax.sharding.get_abstract_mesh(), "manual_axes", ()) or ())
    return tuple(a for a in trace_axes(axis_name) if a in manual)


def local_copy(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Mark replicated values as per-device ("varying") before differentiating.

    Module code run by a strategy never needs it: there every device's gradient
    is its own already (``jax.pmap``'s semantics). In one's own ``shard_map``
    code with ``check_vma=True``, the gradient with respect to a replicated
    input of a loss computed on per-device data is already *summed* over
    devices (the transpose of the implicit broadcast is a ``psum``); taking
    gradients with respect to ``local_copy(params)`` instead gives each device
    its own gradient, which :func:`averaged_update` then averages with ``pmean``.

    ``tree``: any pytree of arrays; shapes, dtypes and values are kept (a type
    cast, ``lax.pcast(..., to="varying")``; no data moves). Only the axes of
    ``axis_name`` that ``shard_map`` (or ``jax.pmap``) binds are cast: identity
    outside a mapped axis and for axes bound by ``jax.vmap(axis_name=...)``.
    """
    return cast_varying(tree, _manual_axes(axis_name))


def _gradient_step(
    loss_fn: Callable[..., tuple[jax.Array, Any]],
    params: Any,
    opt_state: optax.OptState,
    optimizer: optax.GradientTransformation,
    args: tuple,
    axis_name: AxisName,
    average_aux: bool = True,
) -> tuple[Any, optax.OptState, jax.Array, Any]:
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        local_copy(params, axis_name), *args)
    if average_aux:
        grads, loss, aux = pmean((grads, loss, aux), axis_name)
    else:
        grads, loss = pmean((grads, loss), axis_name)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, aux


def averaged_update(
    loss_fn: Callable[..., tuple[jax.Array, Any]],
    params: Any,
    opt_state: optax.OptState,
    optimizer: optax.GradientTransformation,
    *args: Any,
    axis_name: AxisName = AXIS_NAME,
    average_aux: bool = True,
) -> tuple[Any, optax.OptState, jax.Array, Any]:
    """One optimizer step with gradients averaged over devices.

    ``loss_fn(params, *args) -> (loss: float32[], aux)`` is differentiated on
    this device's data (with respect to :func:`local_copy` of ``params``, so the
    gradient is this device's own); gradients, loss and aux are averaged with
    :func:`~jaxtrainer.distributed.pmean` over ``axis_name`` (a no-op on one
    device; ``average_aux=False`` leaves ``aux`` this device's own, e.g.
    per-sample values of this device's batch), then ``optimizer`` is applied (``optimizer.update(grads,
    opt_state, params)``, ``optax.apply_updates``). Every device applies the
    same averaged update, so replicated parameters stay bitwise equal.

    Returns:
      ``(new_params, new_opt_state, loss, aux)``: params and optimizer state
      with the input's structure, shapes and dtypes; ``loss: float32[]`` and
      ``aux`` averaged over devices.

    Raises:
      ValueError: ``loss_fn`` is not callable, or ``optimizer`` has no ``update``
        (e.g. the arguments of EvoRL's ``(loss_fn, optimizer,
        pmap_axis_name)``, which :func:`jaxtrainer.distributed.gradient_update`
        takes).
    """
    if not callable(loss_fn):
        raise ValueError(f"averaged_update: loss_fn={loss_fn!r} is not callable")
    if not callable(getattr(optimizer, "update", None)):
        raise ValueError(f"averaged_update: optimizer={optimizer!r}: expected an "
                         "optax.GradientTransformation as fourth argument")
    return _gradient_step(loss_fn, params, opt_state, optimizer, args, axis_name, average_aux)
