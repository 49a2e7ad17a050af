"""Fresh-episode rollouts of a population of deterministic actors into a replay
buffer: what :class:`~jaxtrainer.algorithms.CEMRL` and
:class:`~jaxtrainer.algorithms.ERL` evaluate their members with.

Each of this device's ``L`` actors plays ``episodes_per_member`` fresh episodes
(parallel envs reset from the actor's own key) for a fixed ``rollout_steps``
env steps; every raw transition goes into this device's share of the replay
buffer (one row per env, actor-major), so the number of env steps is exact
whatever the episodes do. An actor's fitness is the mean over its envs of the
first episode's raw return (a partial return when ``rollout_steps`` cuts it).
With observation statistics the actors act on observations normalised with
them (fixed over the rollout, so fitnesses are comparable) and the rollout's
observations, every device's, are merged into them afterwards, as Brax's ES
trainer does after its population's rollouts (``brax/training/agents/es/train.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer import envs
from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms.exploration import gaussian_exploration
from jaxtrainer.algorithms.normalization import normalize_obs
from jaxtrainer.algorithms.replay import ReplayBuffer, Transition
from jaxtrainer.metrics import Mean


def rollout_members(env: envs.Env, act: Callable[[Any, jax.Array], jax.Array], params: Any,
                    keys: jax.Array, replay: ReplayBuffer, buffer: Any,
                    episodes_per_member: int, rollout_steps: int,
                    obs_stats: normalization.RunningStatistics | None = None,
                    noise_std: jax.Array | None = None,
                    ) -> tuple[jax.Array, Any, normalization.RunningStatistics | None,
                               dict[str, Mean]]:
    """Roll out this device's ``L`` actors into ``buffer`` (see the module docstring).

    Args:
      env: a continuous-action :class:`~jaxtrainer.envs.Env`.
      act: ``act(actor_params, obs[E, ...]) -> float32[E, action_size]``, one
        actor's deterministic action (e.g. TD3's ``act``).
      params: the actors' parameters, leaves ``[L, ...]``.
      keys: ``key[L]``, actor ``i``'s key (its resets and env noise).
      replay: the :class:`~jaxtrainer.algorithms.replay.ReplayBuffer` whose global
        ``num_envs`` counts ``L * episodes_per_member`` rows on every device.
      buffer: this device's buffer share.
      episodes_per_member: ``E``, parallel fresh episodes per actor.
      rollout_steps: env steps of every env.
      obs_stats: statistics (replicated) the actors' inputs are normalised with
        during the whole rollout; ``None``: raw inputs.
      noise_std: ``float32[L]``: actor ``i`` explores with
        :func:`~jaxtrainer.algorithms.exploration.gaussian_exploration` of std
        ``noise_std[i]`` (action-scale units), drawn from ``fold_in(step_key, 1)``
        of each env step's key; ``None``: no noise (and no draws).

    Returns:
      ``(fitness float32[L], buffer, obs_stats, metrics)``: ``obs_stats`` with
      every observation acted on merged in, over all devices (``None`` when given
      ``None``); ``metrics``: ``train/episode_return`` and
      ``train/episode_length`` of the episodes completed in the rollout.
    """
    num_local, num_ep = keys.shape[0], episodes_per_member
    reset_keys, run_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
    obs, env_state = jax.vmap(lambda k: env.reset_batch(k, num_ep))(reset_keys)

    def rows(x):
        return x.reshape((num_local * num_ep,) + x.shape[2:])

    def one_step(carry, step_keys):
        obs, env_state, buffer, finished, first_return = carry
        action = jax.vmap(act)(params, normalize_obs(obs_stats, obs))
        if noise_std is not None:
            noise_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(step_keys)
            action = jax.vmap(lambda a, s, k: gaussian_exploration(env, a, s, k))(
                action, noise_std, noise_keys)
        next_obs, env_state, info = jax.vmap(env.step_batch)(step_keys, env_state, action)
        buffer = replay.add(buffer, Transition(
            rows(obs), rows(action), rows(info.reward), jax.tree.map(rows, info.final_obs),
            rows(info.terminated)))
        first_end = jnp.logical_and(info.done, jnp.logical_not(finished))
        first_return = jnp.where(first_end, info.episode_return, first_return)
        finished = jnp.logical_or(finished, info.done)
        seen = () if obs_stats is None else obs
        return (next_obs, env_state, buffer, finished, first_return), (
            info.episode_return, info.episode_length, info.done, seen)

    finished = jnp.zeros((num_local, num_ep), jnp.bool_)
    first_return = jnp.zeros((num_local, num_ep), jnp.float32)
    step_keys = jax.vmap(lambda k: jax.random.split(k, rollout_steps))(run_keys)
    (_, env_state, buffer, finished, first_return), (ret, length, done, seen) = jax.lax.scan(
        one_step, (obs, env_state, buffer, finished, first_return),
        jnp.moveaxis(step_keys, 1, 0))
    if obs_stats is not None:  # seen: [rollout_steps, L, episodes_per_member, *shape]
        obs_stats = normalization.update(obs_stats, seen)
    # an episode the rollout cut short counts with its partial return
    episode = jnp.where(finished, first_return, env_state.episode_return)
    metrics = {"train/episode_return": Mean.of(ret, mask=done),
               "train/episode_length": Mean.of(length, mask=done)}
    return jnp.mean(episode, axis=1), buffer, obs_stats, metrics


__all__ = ["rollout_members"]
