"""Twin Delayed DDPG as a :class:`jaxtrainer.Module`.

TD3 (Fujimoto, van Hoof and Meger 2018, "Addressing Function Approximation Error
in Actor-Critic Methods", arXiv:1802.09477): a deterministic actor, clipped
double-Q targets from twin critics, target policy smoothing (clipped Gaussian
noise on the target action) and delayed updates (the actor and all target
networks change once every ``policy_delay`` critic updates).

Checked against CleanRL's ``cleanrl/td3_continuous_action_jax.py``
(``vwxyzjn/cleanrl``): 256-256 ReLU networks, ``tanh`` actor scaled to the
action box, exploration noise ``N(0, exploration_noise * scale)``, smoothing noise
``clip(N(0, policy_noise) , +-noise_clip) * scale``, Adam 3e-4, ``tau = 0.005``,
``policy_delay = 2``, batch 256, actor loss ``-mean Q_1(s, pi(s))``. Differences,
on purpose: ``learning_starts`` is 5,000 env steps in the Pendulum recipe (CleanRL
uses 25,000 for MuJoCo budgets of 1e6); truncation bootstraps (F19); global sizes
split over devices with device-averaged gradients (F2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import envs
from jaxtrainer.algorithms.offpolicy import (
    MLP,
    OffPolicyModule,
    TwinCritic,
    action_scale_bias,
    flatten_obs,
    soft_update,
)
from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.distributed import gradient_update
from jaxtrainer.metrics import Mean


class DeterministicActor(nn.Module):
    """``obs -> tanh(MLP(obs))`` in ``[-1, 1]^action_dim`` (scaled to the box outside)."""

    action_dim: int
    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return jnp.tanh(MLP(self.hidden_sizes, self.action_dim, self.activation)(
            flatten_obs(obs, self.obs_ndim)))


class TD3Losses:
    """TD3's deterministic policy and losses, shared by :class:`TD3` and
    :class:`~jaxtrainer.algorithms.cem_rl.CEMRL`.

    A mixin: the class using it sets ``self.env`` (continuous actions),
    ``self.actor`` (a :class:`DeterministicActor`), ``self.critic`` (a
    :class:`~jaxtrainer.algorithms.offpolicy.TwinCritic`) and ``self.config``
    with ``gamma``, ``policy_noise`` and ``noise_clip``.
    """

    def act(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        """The deterministic action ``scale * actor(obs) + bias``."""
        scale, bias = action_scale_bias(self.env)
        return scale * self.actor.apply(actor_params, obs) + bias

    def target_action(self, target_actor_params: Any, next_obs: jax.Array,
                      key: jax.Array) -> jax.Array:
        """Target policy smoothing: ``clip(pi'(s') + clip(eps, +-noise_clip * scale),
        low, high)`` with ``eps ~ N(0, policy_noise * scale)``."""
        cfg = self.config
        scale, _ = action_scale_bias(self.env)
        action = self.act(target_actor_params, next_obs)
        noise = jnp.clip(jax.random.normal(key, action.shape) * cfg.policy_noise,
                         -cfg.noise_clip, cfg.noise_clip) * scale
        return jnp.clip(action + noise, jnp.asarray(self.env.action_low),
                        jnp.asarray(self.env.action_high))

    def critic_loss(self, critic_params: Any, target_actor_params: Any,
                    target_critic_params: Any, batch: Transition,
                    key: jax.Array) -> tuple[jax.Array, dict]:
        """``sum_i mean((Q_i(s, a) - y)^2)``, ``y = r + gamma (1 - terminated)
        min_i Q'_i(s', a'_smoothed)``."""
        next_action = self.target_action(target_actor_params, batch.next_obs, key)
        q_next = jnp.min(self.critic.apply(target_critic_params, batch.next_obs, next_action), 0)
        not_done = 1.0 - batch.terminated.astype(jnp.float32)
        target = jax.lax.stop_gradient(batch.reward + self.config.gamma * not_done * q_next)
        q = self.critic.apply(critic_params, batch.obs, batch.action)
        return jnp.sum(jnp.mean(jnp.square(q - target[None]), axis=1)), {}

    def actor_loss(self, actor_params: Any, critic_params: Any,
                   batch: Transition) -> tuple[jax.Array, dict]:
        """``-mean Q_1(s, pi(s))``."""
        q = self.critic.apply(critic_params, batch.obs, self.act(actor_params, batch.obs))
        return -jnp.mean(q[0]), {}


@dataclasses.dataclass(frozen=True)
class TD3Config:
    """TD3 hyperparameters. Sizes and step counts are global (over all devices).

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make` (continuous actions).
      num_envs, train_frequency, gradient_steps, buffer_size, batch_size,
        learning_starts: as in :class:`~jaxtrainer.algorithms.sac.SACConfig`.
      lr: Adam learning rate of the actor and the critics.
      gamma: discount factor.
      tau: Polyak rate of the target actor and critics.
      policy_delay: critic updates per actor (and target) update.
      exploration_noise: std of the behaviour noise, in units of the action scale.
      policy_noise: std of the target smoothing noise, in units of the action scale.
      noise_clip: the smoothing noise is clipped to ``+-noise_clip`` (same units).
      hidden_sizes, activation: the networks' hidden layers.
      eval_episodes: fresh deterministic episodes per evaluation.
    """

    env: str = "Pendulum-v1"
    num_envs: int = 4
    train_frequency: int = 1
    gradient_steps: int = 4
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 5_000
    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    policy_delay: int = 2
    exploration_noise: float = 0.1
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    eval_episodes: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"TD3Config.tau={self.tau}: expected 0 < tau <= 1")
        if not isinstance(self.policy_delay, int) or self.policy_delay < 1:
            raise ValueError(f"TD3Config.policy_delay={self.policy_delay!r}: expected an int >= 1")


@struct.dataclass
class TD3State:
    """Training state (as :class:`~jaxtrainer.algorithms.sac.SACState`, without a
    temperature and with a target actor). ``updates``: ``int32[]`` critic updates
    done, which schedules the delayed actor updates."""

    actor_params: Any
    critic_params: Any
    target_actor_params: Any
    target_critic_params: Any
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    step: jax.Array
    updates: jax.Array
    env_state: envs.EnvState
    obs: jax.Array
    buffer: Any


class TD3(TD3Losses, OffPolicyModule):
    """TD3 on a continuous-action :mod:`jaxtrainer.envs` environment.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length``, and once learning started ``loss/critic`` and
    ``loss/actor`` (the latter over the step's delayed actor updates only).
    :meth:`evaluation_step`: the deterministic actor on fresh episodes.

    Args:
      config: hyperparameters; :class:`TD3Config` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.
    """

    name = "TD3"

    def __init__(self, config: TD3Config | None = None, *, env: envs.Env | None = None,
                 **overrides: Any) -> None:
        config = config or TD3Config()
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self._setup_env(env)
        if self.env.discrete:
            raise ValueError(f"TD3 needs continuous actions; {self.env.name} is discrete")
        obs_ndim = len(self.env.observation_shape)
        self.actor = DeterministicActor(self.env.action_size, obs_ndim, config.hidden_sizes,
                                        config.activation)
        self.critic = TwinCritic(obs_ndim, config.hidden_sizes, config.activation)
        self.actor_optimizer = optax.adam(config.lr)
        self.critic_optimizer = optax.adam(config.lr)

    def hparams(self) -> dict[str, Any]:
        hp = dataclasses.asdict(self.config)
        hp["hidden_sizes"] = list(hp["hidden_sizes"])
        return hp

    # ---- policies -----------------------------------------------------------
    def explore(self, state: TD3State, obs: jax.Array, key: jax.Array) -> jax.Array:
        """Uniform random actions before ``learning_starts`` env steps, then the
        actor's action plus ``N(0, exploration_noise * scale)``, clipped to the box."""
        noise_key, random_key = jax.random.split(key)
        scale, _ = action_scale_bias(self.env)
        low = jnp.asarray(self.env.action_low)
        high = jnp.asarray(self.env.action_high)
        action = self.act(state.actor_params, obs)
        noise = jax.random.normal(noise_key, action.shape) * self.config.exploration_noise * scale
        action = jnp.clip(action + noise, low, high)
        random = jax.random.uniform(random_key, action.shape, jnp.float32, low, high)
        warmup = self.env_steps_before(state.step) < self.config.learning_starts
        return jnp.where(warmup, random, action)

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        def policy(params, obs, key):
            del key
            return self.act(params, obs)
        return policy

    def policy_params(self, state: TD3State) -> Any:
        return state.actor_params

    # ---- Module -------------------------------------------------------------
    def init_state(self, key: jax.Array) -> TD3State:
        actor_key, critic_key, env_key = jax.random.split(key, 3)
        obs = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        actor_params = self.actor.init(actor_key, obs)
        critic_params = self.critic.init(critic_key, obs, jnp.zeros((self.env.action_size,)))
        env_state, env_obs, buffer = self.init_envs(env_key)
        zero = jnp.zeros((), jnp.int32)
        return TD3State(actor_params, critic_params, jax.tree.map(jnp.copy, actor_params),
                        jax.tree.map(jnp.copy, critic_params),
                        self.actor_optimizer.init(actor_params),
                        self.critic_optimizer.init(critic_params), zero, zero, env_state,
                        env_obs, buffer)

    def update(self, carry: tuple, key: jax.Array, buffer: Any) -> tuple[tuple, dict]:
        """One critic update; every ``policy_delay``-th also updates the actor and
        moves both target networks (counted by ``updates``, replicated)."""
        (actor_params, critic_params, target_actor, target_critic, actor_opt, critic_opt,
         updates) = carry
        sample_key, noise_key = jax.random.split(key)
        batch = self.buffer.sample(buffer, sample_key)
        critic_params, critic_opt, critic_loss, _ = gradient_update(
            self.critic_loss, critic_params, critic_opt, self.critic_optimizer,
            target_actor, target_critic, batch, noise_key)
        updates = updates + 1

        def delayed(args):
            actor_params, actor_opt, target_actor, target_critic = args
            actor_params, actor_opt, loss, _ = gradient_update(
                self.actor_loss, actor_params, actor_opt, self.actor_optimizer,
                critic_params, batch)
            target_actor = soft_update(target_actor, actor_params, self.config.tau)
            target_critic = soft_update(target_critic, critic_params, self.config.tau)
            return (actor_params, actor_opt, target_actor, target_critic), (loss, 1.0)

        def wait(args):
            return args, (jnp.zeros((), jnp.float32), 0.0)

        (actor_params, actor_opt, target_actor, target_critic), actor_loss = jax.lax.cond(
            updates % self.config.policy_delay == 0, delayed, wait,
            (actor_params, actor_opt, target_actor, target_critic))
        carry = (actor_params, critic_params, target_actor, target_critic, actor_opt,
                 critic_opt, updates)
        return carry, {"critic": critic_loss, "actor_total": actor_loss[0],
                       "actor_count": jnp.asarray(actor_loss[1], jnp.float32)}

    def training_step(self, state: TD3State, key: jax.Array) -> tuple[TD3State, dict]:
        """Collect ``num_envs * train_frequency`` transitions, then (after
        ``learning_starts``) ``gradient_steps`` critic updates with delayed actor
        and target updates."""
        collect_key, learn_key = jax.random.split(key)
        env_state, obs, buffer, infos = self.collect(state, collect_key)
        carry = (state.actor_params, state.critic_params, state.target_actor_params,
                 state.target_critic_params, state.actor_opt, state.critic_opt, state.updates)
        n = self.config.gradient_steps

        def run(carry):
            carry, losses = jax.lax.scan(lambda c, k: self.update(c, k, buffer), carry,
                                         jax.random.split(learn_key, n))
            one = jnp.ones((), jnp.float32)
            return carry, {"loss/critic": Mean(jnp.mean(losses["critic"]), one),
                           "loss/actor": Mean(jnp.sum(losses["actor_total"]),
                                              jnp.sum(losses["actor_count"]))}

        def skip(carry):
            zero = Mean(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
            return carry, {"loss/critic": zero, "loss/actor": zero}

        carry, losses = jax.lax.cond(self.learning(state.step), run, skip, carry)
        (actor_params, critic_params, target_actor, target_critic, actor_opt, critic_opt,
         updates) = carry
        new_state = TD3State(actor_params, critic_params, target_actor, target_critic, actor_opt,
                             critic_opt, state.step + 1, updates, env_state, obs, buffer)
        return new_state, {**self.episode_metrics(infos), **losses}

