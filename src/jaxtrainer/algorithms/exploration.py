"""Exploration and target-policy noise of the off-policy learners, as functions
of arrays (the caller draws the keys).

* :func:`action_scale_bias`: the map of ``[-1, 1]`` onto an env's action box;
* :func:`gaussian_exploration`: TD3's and DDPG's behaviour noise;
* :func:`smoothed_target_action`: TD3's target policy smoothing (clipped noise);
* :func:`uniform_warmup`: uniform random actions before learning starts (SAC, TD3);
* :func:`epsilon_greedy` and :func:`linear_schedule`: DQN's and PQN's behaviour policy.

Sources: Fujimoto, van Hoof and Meger 2018 (TD3, arXiv:1802.09477, Eq. 14-15 and
Algorithm 1); CleanRL's ``td3_continuous_action_jax.py``, ``sac_continuous_action.py``
and ``dqn_jax.py`` (``vwxyzjn/cleanrl``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrainer import envs


def action_scale_bias(env: envs.Env) -> tuple[jax.Array, jax.Array]:
    """``(scale, bias)``, ``float32[action_size]`` each, with ``action = scale * u +
    bias`` mapping ``u in [-1, 1]`` onto the env's box (CleanRL's ``action_scale`` /
    ``action_bias``)."""
    low = jnp.asarray(env.action_low, jnp.float32)
    high = jnp.asarray(env.action_high, jnp.float32)
    return (high - low) / 2.0, (high + low) / 2.0


def gaussian_exploration(env: envs.Env, action: jax.Array, std: Any,
                         key: jax.Array) -> jax.Array:
    """``clip(action + eps, low, high)`` with ``eps ~ N(0, std * scale)``: TD3's
    behaviour noise (CleanRL's ``td3_continuous_action_jax.py``), ``std`` in units
    of the action scale (:func:`action_scale_bias`). ``action: float32[..., action_size]``
    -> the same shape; ``std``: a number or a ``float32[]``."""
    scale, _ = action_scale_bias(env)
    noise = jax.random.normal(key, action.shape) * std * scale
    return jnp.clip(action + noise, jnp.asarray(env.action_low), jnp.asarray(env.action_high))


def smoothed_target_action(action: jax.Array, normal: jax.Array, std: Any, noise_clip: float,
                           scale: jax.Array, low: jax.Array, high: jax.Array) -> jax.Array:
    """TD3's target policy smoothing (Fujimoto et al. 2018, Eq. 14):
    ``clip(action + clip(normal * std, -noise_clip, noise_clip) * scale, low, high)``.

    Args:
      action: ``float32[B, action_size]``, the target actor's action ``pi'(s')``.
      normal: standard normal draws of the same shape (``jax.random.normal``).
      std: ``policy_noise``, a number or ``float32[]``, in units of the action scale.
      noise_clip: the noise's bound, same units.
      scale: ``float32[action_size]`` (:func:`action_scale_bias`).
      low, high: the action box, ``float32[action_size]``.

    Returns:
      ``float32[B, action_size]``. As CleanRL's ``td3_continuous_action_jax.py``.
    """
    noise = jnp.clip(normal * std, -noise_clip, noise_clip) * scale
    return jnp.clip(action + noise, low, high)


def uniform_warmup(action: jax.Array, key: jax.Array, low: jax.Array, high: jax.Array,
                   warmup: jax.Array) -> jax.Array:
    """``action`` (``float32[n, action_size]``), or while ``warmup`` (``bool[]``)
    uniform random actions in ``[low, high)`` (CleanRL's SAC and TD3 before
    ``learning_starts``)."""
    random = jax.random.uniform(key, action.shape, jnp.float32, low, high)
    return jnp.where(warmup, random, action)


def epsilon_greedy(key: jax.Array, q_values: jax.Array, epsilon: jax.Array) -> jax.Array:
    """``int32[B]``: a uniform random action with probability ``epsilon``, else
    argmax of ``q_values: float32[B, num_actions]`` (Mnih et al. 2015)."""
    explore_key, action_key = jax.random.split(key)
    greedy = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    random = jax.random.randint(action_key, greedy.shape, 0, q_values.shape[-1], jnp.int32)
    return jnp.where(jax.random.uniform(explore_key, greedy.shape) < epsilon, random, greedy)


def linear_schedule(start: float, end: float, duration: float, t: jax.Array) -> jax.Array:
    """``start`` moving linearly to ``end`` over ``t in [0, duration]``, then ``end``.

    ``optax.linear_schedule`` evaluated at ``t`` (any numeric type), as
    ``float32[]``; ``duration <= 0`` gives ``end`` (optax would hold ``start``).
    (CleanRL's ``linear_schedule`` in ``dqn_jax.py``, with ``t`` in env steps.)
    """
    if duration <= 0:
        return jnp.asarray(end, jnp.float32)
    schedule = optax.linear_schedule(start, end, duration)
    return jnp.asarray(schedule(jnp.asarray(t, jnp.float32)), jnp.float32)
