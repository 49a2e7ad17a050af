"""What DQN, SAC and TD3 share: networks, target updates, schedules, and a base
Module that collects transitions into a :class:`~jaxtrainer.algorithms.replay.ReplayBuffer`.

One ``training_step`` of an off-policy module:

1. steps every env ``train_frequency`` times with the exploration policy and
   writes each transition to this device's share of the replay buffer
   (``env_steps_per_step = num_envs * train_frequency``, global);
2. once ``learning_starts`` env steps have been collected (over all devices),
   runs ``gradient_steps`` updates, each on a fresh global batch of
   ``batch_size`` transitions (``batch_size / num_devices`` sampled by each device
   from its own envs' transitions) with gradients averaged over devices, so
   replicated parameters stay bitwise equal (FIELD_REPORTS F2). Before that the
   update is skipped (``lax.cond`` on a replicated counter) and loss metrics are
   not reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrainer import envs
from jaxtrainer.algorithms.replay import ReplayBuffer, Transition
from jaxtrainer.distributed import fold_in_device, local_size, vary_like
from jaxtrainer.metrics import Mean
from jaxtrainer.module import Module

_ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


# ---- math -----------------------------------------------------------------
def linear_schedule(start: float, end: float, duration: float, t: jax.Array) -> jax.Array:
    """``start`` moving linearly to ``end`` over ``t in [0, duration]``, then ``end``.

    ``float32[]`` for ``t`` of any numeric type; ``duration <= 0`` gives ``end``.
    (CleanRL's ``linear_schedule`` in ``dqn_jax.py``, with ``t`` in env steps.)
    """
    if duration <= 0:
        return jnp.asarray(end, jnp.float32)
    frac = jnp.clip(jnp.asarray(t, jnp.float32) / duration, 0.0, 1.0)
    return jnp.asarray(start + (end - start) * frac, jnp.float32)


def soft_update(target: Any, online: Any, tau: float) -> Any:
    """Polyak averaging ``target <- tau * online + (1 - tau) * target`` leaf by leaf;
    ``tau = 1`` copies ``online`` (a hard update)."""
    if tau == 1.0:
        return jax.tree.map(lambda o: o, online)
    return jax.tree.map(lambda t, o: tau * o + (1.0 - tau) * t, target, online)


def periodic_soft_update(target: Any, online: Any, tau: float, step: jax.Array,
                         every: int) -> Any:
    """:func:`soft_update` when ``step % every == 0``, else ``target`` unchanged.
    ``step``: ``int32[]`` counter of gradient updates done, counting this one (from 1)."""
    updated = soft_update(target, online, tau)
    if every == 1:
        return updated
    do = (step % every) == 0
    return jax.tree.map(lambda u, t: jnp.where(do, u, t), updated, target)


# ---- networks ---------------------------------------------------------------
class MLP(nn.Module):
    """Dense layers (flax's default LeCun-normal init, as CleanRL) with an
    activation after each; then a linear head of ``out`` units when ``out > 0``.
    Input ``float32[..., d]``."""

    hidden_sizes: Sequence[int]
    out: int = 0
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = _ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(nn.Dense(size)(x))
        if self.out:
            x = nn.Dense(self.out)(x)
        return x


def flatten_obs(obs: jax.Array, obs_ndim: int) -> jax.Array:
    """``[..., *observation_shape] -> float32[..., observation_size]``."""
    batch = obs.shape[:obs.ndim - obs_ndim]
    return obs.reshape(batch + (-1,)).astype(jnp.float32)


class QNetwork(nn.Module):
    """Discrete action values: ``obs[..., *observation_shape] -> float32[..., num_actions]``."""

    num_actions: int
    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (120, 84)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return MLP(self.hidden_sizes, self.num_actions, self.activation)(
            flatten_obs(obs, self.obs_ndim))


class TwinCritic(nn.Module):
    """Two independent Q(s, a) MLPs (clipped double Q, Fujimoto et al. 2018):
    ``(obs[..., *obs_shape], action[..., d]) -> float32[2, ...]``."""

    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([flatten_obs(obs, self.obs_ndim), action.astype(jnp.float32)], -1)
        q1 = MLP(self.hidden_sizes, 1, self.activation, name="q1")(x)[..., 0]
        q2 = MLP(self.hidden_sizes, 1, self.activation, name="q2")(x)[..., 0]
        return jnp.stack([q1, q2])


# ---- the shared module ------------------------------------------------------
class OffPolicyModule(Module):
    """Base of :class:`~jaxtrainer.algorithms.DQN`, ``SAC`` and ``TD3``.

    Subclasses set ``self.config`` (with ``env``, ``num_envs``, ``train_frequency``,
    ``gradient_steps``, ``buffer_size``, ``batch_size``, ``learning_starts``,
    ``eval_episodes``) and call :meth:`_setup_env`; they implement
    :meth:`explore` (the behaviour policy), :meth:`greedy_policy` and
    :meth:`policy_params`.
    """

    name = "OffPolicy"

    def _setup_env(self, env: envs.Env | None) -> None:
        cfg = self.config
        for field in ("num_envs", "train_frequency", "gradient_steps", "buffer_size",
                      "batch_size", "eval_episodes"):
            value = getattr(cfg, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {field}={value!r}: expected a positive int")
        if not isinstance(cfg.learning_starts, int) or cfg.learning_starts < 0:
            raise ValueError(f"{self.name}: learning_starts={cfg.learning_starts!r}: "
                             "expected an int >= 0")
        self.env = env if env is not None else envs.make(cfg.env)
        self.buffer = ReplayBuffer(cfg.buffer_size, cfg.batch_size, cfg.num_envs)
        self.env_steps_per_step = cfg.num_envs * cfg.train_frequency

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices``.

        Raises:
          ValueError: ``num_envs``, ``batch_size`` or ``eval_episodes`` is not a
            multiple of ``num_devices`` (the message names the value and count).
        """
        self.buffer.validate(num_devices, self.name)
        if self.config.eval_episodes % num_devices:
            raise ValueError(
                f"{self.name}: eval_episodes={self.config.eval_episodes} is not divisible by "
                f"the {num_devices} devices; use a multiple of {num_devices}")

    # ---- to implement -----------------------------------------------------
    def explore(self, state: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
        """Behaviour actions for this device's envs, within the env's bounds."""
        raise NotImplementedError

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs[n, ...], key) -> actions[n, ...]`` for evaluation."""
        raise NotImplementedError

    def policy_params(self, state: Any) -> Any:
        """What :meth:`greedy_policy` takes as ``params``."""
        raise NotImplementedError

    # ---- shared pieces ----------------------------------------------------
    def env_steps_before(self, step: jax.Array) -> jax.Array:
        """``int32[]`` global env steps collected before training step ``step``."""
        return step * self.env_steps_per_step

    def learning(self, step: jax.Array) -> jax.Array:
        """``bool[]``: training step ``step`` (from 0) updates, i.e. by its end at
        least ``learning_starts`` env steps have been collected. Replicated."""
        return self.env_steps_before(step + 1) >= self.config.learning_starts

    def init_envs(self, key: jax.Array) -> tuple[envs.EnvState, jax.Array, Any]:
        """This device's ``num_envs / num_devices`` envs reset from
        ``fold_in_device(key)`` and an empty buffer share (both sharded)."""
        env_key = fold_in_device(key)
        obs, env_state = self.env.reset_batch(env_key, local_size(self.config.num_envs,
                                                                  "num_envs"))
        obs, env_state = vary_like((obs, env_state), env_key)
        action = jnp.zeros(self.env.action_shape,
                           jnp.int32 if self.env.discrete else jnp.float32)
        example = Transition(obs[0], action, jnp.zeros((), jnp.float32), obs[0],
                             jnp.zeros((), jnp.bool_))
        return env_state, obs, self.buffer.init(example, like=env_key)

    def collect(self, state: Any, key: jax.Array) -> tuple[envs.EnvState, jax.Array, Any,
                                                           envs.StepInfo]:
        """``train_frequency`` steps of this device's envs with :meth:`explore`,
        each step's transitions added to the buffer. Returns the new env state,
        observations, buffer and the stacked :class:`~jaxtrainer.envs.StepInfo`
        (``[train_frequency, num_envs_per_device]``)."""
        def one_step(carry, step_key):
            env_state, obs, buffer = carry
            act_key, env_key = jax.random.split(step_key)
            action = self.explore(state, obs, act_key)
            next_obs, env_state, info = self.env.step_batch(env_key, env_state, action)
            buffer = self.buffer.add(buffer, Transition(
                obs, action, info.reward, info.final_obs, info.terminated))
            env_state, next_obs = vary_like((env_state, next_obs), key)
            return (env_state, next_obs, buffer), info

        carry = (state.env_state, state.obs, state.buffer)
        (env_state, obs, buffer), infos = jax.lax.scan(
            one_step, carry, jax.random.split(key, self.config.train_frequency))
        return env_state, obs, buffer, infos

    def learn(self, update: Callable[[Any, jax.Array], tuple[Any, dict]], carry: Any,
              step: jax.Array, key: jax.Array, loss_names: Sequence[str]) -> tuple[Any, dict]:
        """``gradient_steps`` calls of ``update(carry, key) -> (carry, losses)`` when
        :meth:`learning` says so, else ``carry`` unchanged. Returns the carry and
        the losses as :class:`Mean` (count 0, i.e. unreported, when skipped)."""
        n = self.config.gradient_steps

        def run(carry):
            carry, losses = jax.lax.scan(update, carry, jax.random.split(key, n))
            return carry, {k: Mean(jnp.mean(losses[k]), jnp.ones((), jnp.float32))
                           for k in loss_names}

        def skip(carry):
            zero = Mean(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
            return carry, {k: zero for k in loss_names}

        carry, losses = jax.lax.cond(self.learning(step), run, skip, carry)
        return carry, {f"loss/{k}": v for k, v in losses.items()}

    @staticmethod
    def episode_metrics(infos: envs.StepInfo) -> dict[str, Mean]:
        """``train/episode_return`` and ``train/episode_length`` over the episodes
        completed in ``infos`` (FIELD_REPORTS F17)."""
        return {"train/episode_return": Mean.of(infos.episode_return, mask=infos.done),
                "train/episode_length": Mean.of(infos.episode_length, mask=infos.done)}

    def evaluation_step(self, state: Any, key: jax.Array) -> dict[str, Mean]:
        """Greedy policy on ``eval_episodes`` fresh episodes (split over devices),
        completed episodes only (F18): ``eval/episode_return``, ``eval/episode_length``."""
        num = local_size(self.config.eval_episodes, "eval_episodes")
        result = envs.evaluate_policy(self.env, self.greedy_policy(),
                                      self.policy_params(state), key, num)
        return {f"eval/{name}": value for name, value in result.items()}


def action_scale_bias(env: envs.Env) -> tuple[jax.Array, jax.Array]:
    """``(scale, bias)`` with ``action = scale * u + bias`` mapping ``u in [-1, 1]``
    onto the env's box (CleanRL's ``action_scale`` / ``action_bias``)."""
    low = jnp.asarray(env.action_low, jnp.float32)
    high = jnp.asarray(env.action_high, jnp.float32)
    return (high - low) / 2.0, (high + low) / 2.0


LOG_2PI = math.log(2.0 * math.pi)
