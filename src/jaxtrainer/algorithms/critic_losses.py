"""The actor-critic losses of TD3, DDPG, SAC and CrossQ, as functions of arrays
(and, for the clipped double-Q loss, of a critic network and its parameters).

* critics: :func:`clipped_double_q_target` and :func:`critic_regression`
  (TD3's, DDPG's with one critic, SAC's with the entropy term, CrossQ's with
  both Q's from one pass), composed by :func:`clipped_double_q_loss`;
* actors: :func:`deterministic_actor_loss` (TD3, DDPG) and
  :func:`soft_actor_loss` (SAC, CrossQ);
* SAC's temperature: :func:`temperature_loss`.

Sources: Fujimoto, van Hoof and Meger 2018 (TD3, arXiv:1802.09477, Eq. 10 and
Algorithm 1); Lillicrap et al. 2016 (DDPG, arXiv:1509.02971, Algorithm 1);
Haarnoja et al. 2018 (SAC, arXiv:1812.05905, Eq. 5, 7 and 18); Bhatt et al.
2024 (CrossQ, arXiv:1902.05605); checked against CleanRL's
``td3_continuous_action_jax.py`` and ``sac_continuous_action.py``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer.algorithms.q_learning import bootstrap
from jaxtrainer.algorithms.replay import Transition


def clipped_double_q_target(q_next: jax.Array, reward: jax.Array, terminated: jax.Array,
                            gamma: Any, next_penalty: jax.Array | None = None) -> jax.Array:
    """``y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - next_penalty)``, ``float32[B]``.

    ``q_next``: ``float32[num_critics, B]``, each critic's value of ``(s', a')``
    (one critic: DDPG's plain target); ``next_penalty``: ``float32[B]``, SAC's
    ``alpha * log pi(a'|s')``, or ``None`` (TD3, DDPG). TD3's Eq. 10."""
    q_next = jnp.min(q_next, 0)
    if next_penalty is not None:
        q_next = q_next - next_penalty
    return bootstrap(reward, terminated, gamma, q_next)


def critic_regression(q: jax.Array, target: jax.Array) -> jax.Array:
    """``sum_i mean_b (Q_i(s_b, a_b) - y_b)^2``, ``float32[]``: each critic's mean
    squared error to the target, summed over the critics (CleanRL's
    ``qf1_loss + qf2_loss``). ``q: float32[num_critics, B]``, ``target: float32[B]``
    (held constant by the caller)."""
    return jnp.sum(jnp.mean(jnp.square(q - target[None]), axis=1))


def clipped_double_q_loss(critic: Any, critic_params: Any, target_critic_params: Any,
                          batch: Transition, next_action: jax.Array, gamma: Any,
                          next_penalty: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The twin critics' loss with the clipped double-Q target:
    :func:`critic_regression` of ``critic(s, a)`` to the constant
    :func:`clipped_double_q_target` of the target critics at ``(s', next_action)``.
    With a single critic (``num_critics=1``) this is DDPG's loss
    ``mean((Q(s, a) - y)^2)``, ``y = r + gamma (1 - terminated) Q'(s', a')``.

    Args:
      critic: a :class:`~jaxtrainer.algorithms.networks.TwinCritic` (of 1 or 2 critics).
      critic_params, target_critic_params: its parameters and the target's.
      batch: transitions, leaves ``[B, ...]``.
      next_action: ``float32[B, action_size]``, the action taken at ``s'``.
      gamma: discount.
      next_penalty: ``float32[B]`` subtracted from the next value (SAC's
        ``alpha * log pi(a'|s')``); ``None``: nothing (TD3).

    Returns:
      ``(loss: float32[], q: float32[num_critics, B])``.
    """
    target = clipped_double_q_target(critic.apply(target_critic_params, batch.next_obs,
                                                  next_action),
                                     batch.reward, batch.terminated, gamma, next_penalty)
    q = critic.apply(critic_params, batch.obs, batch.action)
    return critic_regression(q, jax.lax.stop_gradient(target)), q


def deterministic_actor_loss(q: jax.Array) -> jax.Array:
    """``-mean_b Q_1(s_b, pi(s_b))``, ``float32[]``: the deterministic policy
    gradient's objective on the first critic (TD3's Eq. 6, DDPG's).
    ``q: float32[num_critics, B]``."""
    return -jnp.mean(q[0])


def soft_actor_loss(q: jax.Array, log_prob: jax.Array, alpha: jax.Array) -> jax.Array:
    """``mean_b(alpha log pi(a_b|s_b) - min_i Q_i(s_b, a_b))``, ``float32[]``, with
    ``a_b ~ pi(.|s_b)`` reparameterised (SAC's Eq. 7 with the clipped double Q).
    ``q: float32[num_critics, B]``, ``log_prob: float32[B]``, ``alpha: float32[]``."""
    return jnp.mean(alpha * log_prob - jnp.min(q, 0))


def temperature_loss(log_alpha: jax.Array, mean_log_prob: jax.Array,
                     target_entropy: float) -> jax.Array:
    """``-alpha * (E[log pi] + target_entropy)``, ``float32[]``, with ``alpha =
    exp(log_alpha)`` (SAC's Eq. 18 in CleanRL's log-parameterised form): raises
    alpha while the entropy ``-E[log pi]`` is below the target, lowers it above.
    ``mean_log_prob`` (``float32[]``) is held constant."""
    return -jnp.exp(log_alpha) * (jax.lax.stop_gradient(mean_log_prob) + target_entropy)
