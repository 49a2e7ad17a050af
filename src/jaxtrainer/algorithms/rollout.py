"""The data of an on-policy update, as pure functions: the rollout (env steps
-> :class:`Rollout`, every leaf ``[num_steps, num_envs_per_device, ...]``), the
critic's values of it, and the minibatches cut from it.

* :func:`unroll` / :func:`unroll_recurrent`: ``num_steps`` steps of every env
  in one ``lax.scan`` with actions sampled from the policy, as PureJaxRL's
  ``_env_step`` (``luchris429/purejaxrl``, ``purejaxrl/ppo.py``); the actions'
  noise is drawn before the loop, the same bits as drawing inside it;
* :func:`chunked_values`, :func:`bootstrap_truncations`: the values GAE needs;
* :func:`minibatch_epochs` (PPO's, PQN's: samples) and
  :func:`trajectory_minibatch_epochs` (IMPALA's: whole trajectories): epochs of
  shuffled minibatches in ``lax.scan`` loops, as CleanRL's and PureJaxRL's
  ``_update_epoch``; :func:`minibatch_advantage_moments`: their advantage
  statistics over devices in one all-reduce an epoch.

The functions take the policy, critic and env step as callables (the module
binds its network, parameters and observation statistics), so they hold no
state and are tested on their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms.advantages import global_moments
from jaxtrainer.algorithms.permutation import permutation, take_rows
from jaxtrainer.distributed import axis_size

CRITIC_ROWS = 32768
"""The most observations one critic pass over a rollout values at once
(:func:`chunked_values`): a larger rollout is valued in chunks of whole steps, so
the critic's activations take a chunk's memory, not the rollout's (at 4096 envs
x 80 steps and 256 units, 320 MiB a layer)."""

EnvStep = Callable[[jax.Array, envs.EnvState, jax.Array], tuple[jax.Array, envs.EnvState, Any]]
"""``env_step(keys[n], env_state, action[n, ...]) -> (next_obs, env_state, info)``:
one step of ``n`` envs (the module's ``jax.vmap(env.step)`` on its env actions)."""


@struct.dataclass
class Rollout:
    """One rollout, every leaf ``[num_steps, num_envs_per_device, ...]``.

    ``obs``: observations acted on (raw, before any normalisation); ``action``: sampled (unclipped) actions;
    ``log_prob``, ``value``: ``float32``, under the rollout's parameters;
    ``info``: the env's :class:`jaxtrainer.envs.StepInfo`. With a recurrent
    core: ``start``, ``bool``, the observation began an episode (the carry was
    reset before it); ``carry``, the carry after each step (what the next
    observation, or ``info.final_obs``, is seen with). ``None`` without.
    With ``critic_input="global_state"``: ``critic_obs``,
    ``float32[..., critic_input_size]``, what the critic valued at each step
    (the env's ``critic_inputs``); ``None`` otherwise.
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    info: envs.StepInfo
    start: jax.Array | None = None
    carry: Any = None
    critic_obs: jax.Array | None = None


def _step_draws(key: jax.Array, num_steps: int, num_envs: int,
                noise: Callable[[jax.Array], Any]) -> tuple[Any, jax.Array]:
    """Every step's action noise and env keys, drawn before the loop: a step's key
    -> (action key, env key -> one per env), as drawing inside it. On CPU every
    draw inside a loop body is a small loop of its own (XLA's CPU lowering of
    the threefry hash is a 5-round ``while``)."""
    pairs = jax.vmap(jax.random.split)(jax.random.split(key, num_steps))
    action_noise = jax.vmap(noise)(pairs[:, 0])
    return action_noise, jax.vmap(lambda k: jax.random.split(k, num_envs))(pairs[:, 1])


def unroll(policy: Callable[[jax.Array], Any], values: Callable[[jax.Array], jax.Array],
            env_step: EnvStep, env_state: envs.EnvState, obs: jax.Array, key: jax.Array,
            num_steps: int, critic_inputs: Callable[[envs.EnvState], jax.Array] | None = None,
            ) -> tuple[envs.EnvState, jax.Array, Rollout]:
    """``num_steps`` steps of ``n`` envs from ``(env_state, obs[n, ...])`` in one
    ``lax.scan``, actions sampled from ``policy(obs) -> dist`` (batch ``[n]``).

    Only the actor runs inside the loop; ``values(obs[num_steps, n, ...]) ->
    float32[num_steps, n]`` values every observation after it (the values do not
    steer the rollout), which on small env batches saves most of a step's critic
    cost. With ``critic_inputs`` (a centralised critic) the critic values
    ``critic_inputs(env_state)`` of each step instead, kept as ``critic_obs``.
    Returns the env state and (raw) observations after the rollout and the
    :class:`Rollout`."""
    def one_step(carry, step_draws):
        env_state, obs = carry
        noise, env_keys = step_draws
        critic_obs = critic_inputs(env_state) if critic_inputs is not None else None
        dist = policy(obs)
        action = dist.sample_with(noise)
        log_prob = dist.log_prob(action)
        next_obs, env_state, info = env_step(env_keys, env_state, action)
        return (env_state, next_obs), (obs, action, log_prob, info, critic_obs)

    draws = _step_draws(key, num_steps, obs.shape[0], jax.eval_shape(policy, obs).noise)
    (env_state, obs), (traj_obs, action, log_prob, info, critic_obs) = jax.lax.scan(
        one_step, (env_state, obs), draws)
    value = values(traj_obs if critic_obs is None else critic_obs)
    return env_state, obs, Rollout(traj_obs, action, log_prob, value, info,
                                   critic_obs=critic_obs)


def unroll_recurrent(network_step: Callable[..., tuple[Any, Any, jax.Array]],
                      env_step: EnvStep, env_state: envs.EnvState, obs: jax.Array,
                      carry: Any, start: jax.Array, key: jax.Array, num_steps: int,
                      ) -> tuple[envs.EnvState, jax.Array, Any, jax.Array, Rollout]:
    """:func:`unroll` with a recurrent core: ``network_step(carry, obs[n, ...],
    start[n]) -> (carry, dist, value)`` (``dist`` and ``value`` of batch ``[1,
    n]``, one step of a sequence) runs the core from step to step, reset before an
    episode's first observation (``start``, ``bool[n]``: the previous step ended
    its episode); the values come from the same pass as the actions.

    Returns ``(env_state, obs, carry, start)`` after the rollout (what the next
    rollout continues from) and the :class:`Rollout` with ``start`` and ``carry``
    (the carry after each step, ``[num_steps, n, ...]``)."""
    def one_step(loop, step_draws):
        env_state, obs, carry, start = loop
        noise, env_keys = step_draws
        carry, dist, value = network_step(carry, obs, start)
        action = dist.sample_with(noise)
        log_prob = dist.log_prob(action)[0]
        action = action[0]
        next_obs, env_state, info = env_step(env_keys, env_state, action)
        return ((env_state, next_obs, carry, info.done),
                (obs, start, action, log_prob, value[0], carry, info))

    draws = _step_draws(key, num_steps, obs.shape[0],
                        jax.eval_shape(network_step, carry, obs, start)[1].noise)
    (env_state, obs, carry, start), out = jax.lax.scan(
        one_step, (env_state, obs, carry, start), draws)
    traj_obs, traj_start, action, log_prob, value, carries, info = out
    return env_state, obs, carry, start, Rollout(traj_obs, action, log_prob, value, info,
                                                traj_start, carries)


def chunked_values(value: Callable[[jax.Array], jax.Array], obs: jax.Array) -> jax.Array:
    """``value`` of ``obs`` (leaves ``[steps, n, ...]``), ``float32[steps, n]``: one
    batched pass, or with more than :data:`CRITIC_ROWS` observations a
    ``lax.map`` over chunks of whole steps (the same values: each is a function
    of its own observation only)."""
    steps, n = jax.tree.leaves(obs)[0].shape[:2]
    chunk = max(1, CRITIC_ROWS // n)
    return value(obs) if chunk >= steps else jax.lax.map(value, obs, batch_size=chunk)


def bootstrap_truncations(values: Callable[[Any], jax.Array], truncated: jax.Array,
                          next_values: jax.Array, final_obs: Any) -> jax.Array:
    """``next_values`` (``float32[num_steps, n]``) with ``V(final_obs)`` at every
    truncated step (``truncated``, ``bool[num_steps, n]``) but the last (which
    ``next_values`` holds); ``final_obs`` (leaves ``[num_steps, n, ...]``) is what
    the critic, ``values(obs[1, n, ...]) -> float32[1, n]``, values there. Each
    iteration of a ``lax.while_loop`` values every env's first truncated step not
    yet valued, a critic pass over ``n`` observations; it runs as many times as
    one env truncated most often in the rollout: at most once when the rollout
    is shorter than the time limit, not at all without truncations."""
    todo = truncated.at[-1].set(False)
    steps, n = todo.shape
    envs_ = jnp.arange(n)

    def value_next_truncation(carry):
        todo, next_values = carry
        step = jnp.argmax(todo, axis=0)  # each env's first step still to value (0: none)
        final = jax.tree.map(lambda x: x[step, envs_][None], final_obs)
        value = values(final)[0]
        hit = jnp.logical_and(todo, jnp.arange(steps)[:, None] == step)
        return jnp.logical_and(todo, ~hit), jnp.where(hit, value, next_values)

    return jax.lax.while_loop(lambda carry: jnp.any(carry[0]), value_next_truncation,
                              (todo, next_values))[1]


def minibatch_advantage_moments(advantages: jax.Array, epoch_key: jax.Array,
                                num_minibatches: int) -> jax.Array | None:
    """``float32[num_minibatches, 2]``: the global advantage (mean, variance) of each
    minibatch of the epoch :func:`minibatch_epochs` cuts with ``epoch_key``, in one
    all-reduce for the epoch instead of one per minibatch; ``None`` on one device
    (each minibatch computes its own, as without a device axis). ``advantages``:
    ``float32[n, ...]``, this device's share, shuffled along its first axis."""
    if axis_size() == 1:
        return None
    perm = permutation(epoch_key, advantages.shape[0])
    shares = jnp.take(advantages, perm, axis=0).reshape(num_minibatches, -1)
    return global_moments(shares)


def minibatch_epochs(step: Callable[[Any, dict[str, jax.Array]], tuple[Any, dict]],
                     carry: Any, batch: dict[str, jax.Array], key: jax.Array, epochs: int,
                     num_minibatches: int,
                     extra: Callable[[jax.Array], dict[str, jax.Array]] | None = None,
                     ) -> tuple[Any, dict[str, jax.Array]]:
    """``epochs`` passes over ``batch`` (leaves ``[n, ...]``, this device's
    share), each shuffled with its own key and cut into ``num_minibatches``
    minibatches of ``n / num_minibatches``, ``carry, aux = step(carry,
    minibatch)`` on each in a ``lax.scan``. ``extra(epoch_key)``: leaves
    ``[num_minibatches, ...]`` added to the minibatches (PPO's Brax entropy keys
    and advantage moments). Returns the carry and ``aux`` stacked as
    ``[epochs, num_minibatches, ...]``."""
    size = jax.tree.leaves(batch)[0].shape[0]

    def epoch(carry, epoch_key):
        perm = permutation(epoch_key, size)
        shuffled = jax.tree.map(lambda x: x.reshape((num_minibatches, -1) + x.shape[1:]),
                                take_rows(batch, perm))
        if extra is not None:
            shuffled = {**shuffled, **extra(epoch_key)}
        return jax.lax.scan(step, carry, shuffled)

    return jax.lax.scan(epoch, carry, jax.random.split(key, epochs))


def trajectory_minibatch_epochs(step: Callable[[Any, dict[str, jax.Array]], tuple[Any, dict]],
                                carry: Any, batch: dict[str, jax.Array], key: jax.Array,
                                epochs: int, num_minibatches: int,
                                ) -> tuple[Any, dict[str, jax.Array]]:
    """:func:`minibatch_epochs` over whole trajectories: ``batch`` leaves
    ``[num_steps, n, ...]``; each epoch shuffles the ``n`` envs and cuts them into
    ``num_minibatches`` minibatches ``[num_steps, n / num_minibatches, ...]``
    (with one minibatch: all envs, unshuffled). Returns the carry and ``aux``
    stacked as ``[epochs, num_minibatches, ...]``."""
    envs_here = jax.tree.leaves(batch)[0].shape[1]

    def epoch(carry, epoch_key):
        if num_minibatches == 1:  # no shuffle needed: one minibatch of every env
            return jax.lax.scan(step, carry, jax.tree.map(lambda x: x[None], batch))
        perm = permutation(epoch_key, envs_here)
        shuffled = jax.tree.map(
            lambda x: jnp.moveaxis(jnp.take(x, perm, axis=1).reshape(
                (x.shape[0], num_minibatches, -1) + x.shape[2:]), 1, 0), batch)
        return jax.lax.scan(step, carry, shuffled)

    return jax.lax.scan(epoch, carry, jax.random.split(key, epochs))


def check_minibatch_fields(config: Any) -> None:
    """Check ``update_epochs`` and ``num_minibatches`` (PPO's and IMPALA's configs).

    Raises:
      ValueError: a count that is not a positive int (named).
    """
    arguments.check_fields(config, arguments.positive_int,
                           ("update_epochs", "num_minibatches"), allow_none=False)
