"""Target-network updates: Polyak averaging (a hard copy at rate 1) and its
periodic form.

Sources: the soft update of DDPG (Lillicrap et al. 2016, arXiv:1509.02971,
Algorithm 1: ``theta' <- tau theta + (1 - tau) theta'``), kept by TD3 and SAC;
DQN's periodic hard copy (Mnih et al. 2015) is ``tau = 1`` every
``target_update_interval`` steps (CleanRL's ``dqn_jax.py`` uses
``optax.incremental_update`` for both).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax


def soft_update(target: Any, online: Any, tau: Any) -> Any:
    """Polyak averaging ``target <- tau * online + (1 - tau) * target`` leaf by leaf
    (``optax.incremental_update``); ``tau = 1`` copies ``online`` (a hard update).

    ``target``, ``online``: pytrees of the same structure (float leaves of any
    shape); returns one of that structure and dtypes.
    ``tau``: a Python number, or a traced ``float32[]`` (a tunable hyperparameter
    in ``state.hyperparams``), with which ``tau == 1`` still copies ``online``
    exactly (``lax.cond``) and another value gives what the same constant gives,
    bit for bit on XLA:CPU. (A ``jnp.where`` fused with the average would change
    which of its two products XLA:CPU contracts into a fused multiply-add, hence
    the ``cond``.)"""
    if isinstance(tau, (int, float)):
        if tau == 1.0:
            return jax.tree.map(lambda o: o, online)
        return optax.incremental_update(online, target, tau)
    tau = jnp.asarray(tau)
    return jax.lax.cond(tau == 1.0, lambda: jax.tree.map(lambda o: o, online),
                        lambda: optax.incremental_update(online, target, tau))


def periodic_soft_update(target: Any, online: Any, tau: float, step: jax.Array,
                         every: int) -> Any:
    """:func:`soft_update` when ``step % every == 0``, else ``target`` unchanged.
    ``step``: ``int32[]`` counter of gradient updates done, counting this one (from 1)."""
    updated = soft_update(target, online, tau)
    if every == 1:
        return updated
    do = (step % every) == 0
    return jax.tree.map(lambda u, t: jnp.where(do, u, t), updated, target)
