"""Data-parallel gradient step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from jaxtrainer.distributed.axis import AXIS_NAME, AxisName, pmean


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
    device's data; gradients, loss and aux are averaged with :func:`pmean` (a no-op
    on one device), then ``optimizer`` is applied. Every device applies the same
    averaged update, so replicated parameters stay bitwise equal (F2).

    Returns:
      ``(new_params, new_opt_state, loss, aux)``, loss and aux averaged over devices.
    """
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *args)
    grads, loss, aux = pmean((grads, loss, aux), axis_name)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, aux
