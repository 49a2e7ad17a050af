"""Data-parallel gradient step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from jaxtrainer.distributed.axis import AXIS_NAME, AxisName, pmean, to_varying


def local_copy(tree: Any, axis_name: AxisName = AXIS_NAME) -> Any:
    """Mark replicated values as per-device ("varying") before differentiating.

    Under ``shard_map`` with ``check_vma=True``, the gradient with respect to a
    replicated input of a loss computed on per-device data is already *summed*
    over devices (the transpose of the implicit broadcast is a ``psum``). Taking
    gradients with respect to ``local_copy(params)`` instead gives each device
    its own gradient, which :func:`gradient_update` then averages with ``pmean``.
    Identity outside a mapped axis.
    """
    return to_varying(tree, axis_name)


def gradient_update(
    loss_fn: Callable[..., tuple[jax.Array, Any]],
    params: Any,
    opt_state: optax.OptState,
    optimizer: optax.GradientTransformation,
    *args: Any,
    axis_name: AxisName = AXIS_NAME,
) -> tuple[Any, optax.OptState, jax.Array, Any]:
    """One optimizer step with gradients averaged over devices.

    ``loss_fn(params, *args) -> (loss: float32[], aux)`` is differentiated on this
    device's data (with respect to :func:`local_copy` of ``params``, so the
    gradient is this device's own); gradients, loss and aux are averaged with :func:`pmean` (a no-op
    on one device), then ``optimizer`` is applied. Every device applies the same
    averaged update, so replicated parameters stay bitwise equal (no replica
    drifts from the others).

    Returns:
      ``(new_params, new_opt_state, loss, aux)``, loss and aux averaged over devices.
    """
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        local_copy(params, axis_name), *args)
    grads, loss, aux = pmean((grads, loss, aux), axis_name)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, aux
