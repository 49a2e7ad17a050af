"""Soft Actor-Critic with automatic entropy tuning as a :class:`jaxtrainer.Module`.

SAC (Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
Reinforcement Learning with a Stochastic Actor", arXiv:1801.01290) in the
version with twin critics and a learned temperature (Haarnoja et al. 2018, "Soft
Actor-Critic Algorithms and Applications", arXiv:1812.05905): the temperature
``alpha`` is tuned so that the policy's entropy tracks ``target_entropy``
(``-action_dim`` by default).

Checked against CleanRL's ``cleanrl/sac_continuous_action.py``
(``vwxyzjn/cleanrl``): tanh-squashed Gaussian actor with ``log_std`` squashed
into ``[-5, 2]``, the change-of-variables correction
``log(scale * (1 - tanh(u)^2) + 1e-6)``, 256-256 ReLU networks, clipped double-Q
soft targets with ``tau = 0.005``, temperature loss ``-alpha * (log_pi +
target_entropy)``, Adam with ``policy_lr = 3e-4`` and ``q_lr = 1e-3``, uniform
random actions before ``learning_starts``. Differences, on purpose:

* the actor and the temperature are updated after every critic update
  (CleanRL's default ``policy_frequency=2`` does two actor updates every other
  step); the temperature loss uses the actor step's ``log_pi`` (no second pass);
* truncation is not termination (F19): bootstrapping from the observation the
  time limit cut;
* device-parallel, as every module here: global sizes, per-device envs and
  buffer share, device-averaged gradients (F2).
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
    LOG_2PI,
    MLP,
    OffPolicyModule,
    TwinCritic,
    action_scale_bias,
    flatten_obs,
    soft_update,
)
from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.distributed import gradient_update
from jaxtrainer.metrics import Last

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SquashedGaussianActor(nn.Module):
    """``obs -> (mean, log_std)``, each ``float32[..., action_dim]``; ``log_std`` is
    squashed into ``[LOG_STD_MIN, LOG_STD_MAX]`` with a tanh (SpinningUp, CleanRL)."""

    action_dim: int
    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = MLP(self.hidden_sizes, 0, self.activation)(flatten_obs(obs, self.obs_ndim))
        mean = nn.Dense(self.action_dim, name="mean")(x)
        log_std = jnp.tanh(nn.Dense(self.action_dim, name="log_std")(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return mean, log_std


def squashed_sample(mean: jax.Array, log_std: jax.Array, key: jax.Array, scale: jax.Array,
                    bias: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Reparameterised sample of ``a = scale * tanh(u) + bias``, ``u ~ N(mean, std)``.

    Returns ``(action: float32[..., d], log_prob: float32[...])`` with the
    change-of-variables correction ``- sum_d log(scale * (1 - tanh(u)^2) + 1e-6)``.
    """
    std = jnp.exp(log_std)
    noise = jax.random.normal(key, mean.shape, mean.dtype)
    u = mean + std * noise
    y = jnp.tanh(u)
    gauss = -0.5 * noise * noise - log_std - 0.5 * LOG_2PI
    log_prob = jnp.sum(gauss - jnp.log(scale * (1.0 - y * y) + 1e-6), axis=-1)
    return scale * y + bias, log_prob


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC hyperparameters. Sizes and step counts are global (over all devices).

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make` (continuous actions).
      num_envs: parallel environments.
      train_frequency: vectorised env steps per training step (``num_envs *
        train_frequency`` env steps each).
      gradient_steps: updates (critic, actor, temperature) per training step.
      buffer_size: replay capacity in transitions (a multiple of ``num_envs``).
      batch_size: transitions per update.
      learning_starts: env steps of uniform random actions before the first update.
      policy_lr: Adam learning rate of the actor.
      q_lr: Adam learning rate of the critics and of the temperature.
      gamma: discount factor.
      tau: Polyak rate of the target critics (updated after every update).
      init_alpha: initial temperature.
      autotune: learn the temperature; ``False`` keeps ``init_alpha``.
      target_entropy: entropy the temperature tunes toward; ``None`` is
        ``-action_dim`` (the SAC paper's heuristic).
      hidden_sizes: hidden widths of the actor and of each critic.
      activation: their activation.
      eval_episodes: fresh deterministic episodes per evaluation.
    """

    env: str = "Pendulum-v1"
    num_envs: int = 4
    train_frequency: int = 1
    gradient_steps: int = 4
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 5_000
    policy_lr: float = 3e-4
    q_lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    init_alpha: float = 1.0
    autotune: bool = True
    target_entropy: float | None = None
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    eval_episodes: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"SACConfig.tau={self.tau}: expected 0 < tau <= 1")
        if self.init_alpha <= 0:
            raise ValueError(f"SACConfig.init_alpha={self.init_alpha}: expected > 0")


@struct.dataclass
class SACState:
    """Training state; every leaf but ``env_state``, ``obs`` and the buffer's stored
    transitions is replicated.

    Attributes:
      actor_params, critic_params, target_critic_params: network parameters.
      log_alpha: ``float32[]`` log temperature.
      actor_opt, critic_opt, alpha_opt: optax states.
      step: ``int32[]`` training steps done. updates: ``int32[]`` updates done.
      env_state, obs: this device's envs (sharded). buffer: replay buffer.
    """

    actor_params: Any
    critic_params: Any
    target_critic_params: Any
    log_alpha: jax.Array
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    alpha_opt: optax.OptState
    step: jax.Array
    updates: jax.Array
    env_state: envs.EnvState
    obs: jax.Array
    buffer: Any


class SAC(OffPolicyModule):
    """SAC on a continuous-action :mod:`jaxtrainer.envs` environment (gymnax Box or brax).

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length``, and once learning started ``loss/critic`` (sum of
    both critics' mean squared errors), ``loss/actor``, ``loss/alpha``, ``alpha``
    (temperature after the log interval's last step, :class:`~jaxtrainer.Last`), ``entropy`` (``-E[log pi]`` on the
    batch). :meth:`evaluation_step`: ``eval/episode_return`` and
    ``eval/episode_length`` of the deterministic policy ``scale * tanh(mean) + bias``.

    Args:
      config: hyperparameters; :class:`SACConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.

    Raises:
      ValueError: the env's actions are discrete, or a size is not positive.
    """

    name = "SAC"

    def __init__(self, config: SACConfig | None = None, *, env: envs.Env | None = None,
                 **overrides: Any) -> None:
        config = config or SACConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self._setup_env(env)
        if self.env.discrete:
            raise ValueError(f"SAC needs continuous actions; {self.env.name} is discrete")
        obs_ndim = len(self.env.observation_shape)
        self.actor = SquashedGaussianActor(self.env.action_size, obs_ndim, config.hidden_sizes,
                                           config.activation)
        self.critic = TwinCritic(obs_ndim, config.hidden_sizes, config.activation)
        self.actor_optimizer = optax.adam(config.policy_lr)
        self.critic_optimizer = optax.adam(config.q_lr)
        self.alpha_optimizer = optax.adam(config.q_lr)

    @property
    def target_entropy(self) -> float:
        """The entropy the temperature tunes toward: ``-action_dim`` unless configured."""
        if self.config.target_entropy is not None:
            return float(self.config.target_entropy)
        return -float(self.env.action_size)

    def hparams(self) -> dict[str, Any]:
        hp = dataclasses.asdict(self.config)
        hp["hidden_sizes"] = list(hp["hidden_sizes"])
        hp["target_entropy"] = self.target_entropy
        return hp

    # ---- policies -----------------------------------------------------------
    def sample_action(self, actor_params: Any, obs: jax.Array,
                      key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(action, log_prob)`` from the squashed Gaussian policy."""
        mean, log_std = self.actor.apply(actor_params, obs)
        scale, bias = action_scale_bias(self.env)
        return squashed_sample(mean, log_std, key, scale, bias)

    def explore(self, state: SACState, obs: jax.Array, key: jax.Array) -> jax.Array:
        """Uniform random actions before ``learning_starts`` env steps, then policy samples."""
        policy_key, random_key = jax.random.split(key)
        action, _ = self.sample_action(state.actor_params, obs, policy_key)
        low = jnp.asarray(self.env.action_low)
        high = jnp.asarray(self.env.action_high)
        random = jax.random.uniform(random_key, action.shape, jnp.float32, low, high)
        warmup = self.env_steps_before(state.step) < self.config.learning_starts
        return jnp.where(warmup, random, action)

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        scale, bias = action_scale_bias(self.env)

        def policy(params, obs, key):
            del key
            mean, _ = self.actor.apply(params, obs)
            return scale * jnp.tanh(mean) + bias
        return policy

    def policy_params(self, state: SACState) -> Any:
        return state.actor_params

    # ---- Module -------------------------------------------------------------
    def init_state(self, key: jax.Array) -> SACState:
        actor_key, critic_key, env_key = jax.random.split(key, 3)
        obs = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        actor_params = self.actor.init(actor_key, obs)
        critic_params = self.critic.init(critic_key, obs, jnp.zeros((self.env.action_size,)))
        log_alpha = jnp.log(jnp.asarray(self.config.init_alpha, jnp.float32))
        env_state, env_obs, buffer = self.init_envs(env_key)
        zero = jnp.zeros((), jnp.int32)
        return SACState(actor_params, critic_params, jax.tree.map(jnp.copy, critic_params),
                        log_alpha, self.actor_optimizer.init(actor_params),
                        self.critic_optimizer.init(critic_params),
                        self.alpha_optimizer.init(log_alpha), zero, zero, env_state, env_obs,
                        buffer)

    def critic_loss(self, critic_params: Any, target_critic_params: Any, actor_params: Any,
                    alpha: jax.Array, batch: Transition, key: jax.Array) -> tuple[jax.Array, dict]:
        """``sum_i mean((Q_i(s, a) - y)^2)`` with the soft clipped double-Q target
        ``y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s'))``,
        ``a' ~ pi(.|s')``."""
        next_action, next_log_prob = self.sample_action(actor_params, batch.next_obs, key)
        q_next = jnp.min(self.critic.apply(target_critic_params, batch.next_obs, next_action), 0)
        not_done = 1.0 - batch.terminated.astype(jnp.float32)
        target = batch.reward + self.config.gamma * not_done * (q_next - alpha * next_log_prob)
        q = self.critic.apply(critic_params, batch.obs, batch.action)
        loss = jnp.sum(jnp.mean(jnp.square(q - jax.lax.stop_gradient(target)[None]), axis=1))
        return loss, {"q": jnp.mean(q)}

    def actor_loss(self, actor_params: Any, critic_params: Any, alpha: jax.Array,
                   batch: Transition, key: jax.Array) -> tuple[jax.Array, dict]:
        """``mean(alpha log pi(a|s) - min_i Q_i(s, a))``, ``a ~ pi(.|s)`` reparameterised."""
        action, log_prob = self.sample_action(actor_params, batch.obs, key)
        q = jnp.min(self.critic.apply(critic_params, batch.obs, action), 0)
        return jnp.mean(alpha * log_prob - q), {"log_prob": jnp.mean(log_prob)}

    def alpha_loss(self, log_alpha: jax.Array, mean_log_prob: jax.Array) -> tuple[jax.Array, dict]:
        """``-alpha * (E[log pi] + target_entropy)``: raises alpha while the entropy
        ``-E[log pi]`` is below the target, lowers it above."""
        loss = -jnp.exp(log_alpha) * (jax.lax.stop_gradient(mean_log_prob) + self.target_entropy)
        return loss, {}

    def update(self, carry: tuple, key: jax.Array, buffer: Any) -> tuple[tuple, dict]:
        """One SAC update on a fresh batch: critics, actor, temperature, target critics."""
        (actor_params, critic_params, target_params, log_alpha, actor_opt, critic_opt,
         alpha_opt) = carry
        sample_key, critic_key, actor_key = jax.random.split(key, 3)
        batch = self.buffer.sample(buffer, sample_key)
        alpha = jnp.exp(log_alpha)
        critic_params, critic_opt, critic_loss, _ = gradient_update(
            self.critic_loss, critic_params, critic_opt, self.critic_optimizer,
            target_params, actor_params, alpha, batch, critic_key)
        actor_params, actor_opt, actor_loss, aux = gradient_update(
            self.actor_loss, actor_params, actor_opt, self.actor_optimizer,
            critic_params, alpha, batch, actor_key)
        if self.config.autotune:
            log_alpha, alpha_opt, alpha_loss, _ = gradient_update(
                self.alpha_loss, log_alpha, alpha_opt, self.alpha_optimizer, aux["log_prob"])
        else:
            alpha_loss = jnp.zeros((), jnp.float32)
        target_params = soft_update(target_params, critic_params, self.config.tau)
        carry = (actor_params, critic_params, target_params, log_alpha, actor_opt, critic_opt,
                 alpha_opt)
        return carry, {"critic": critic_loss, "actor": actor_loss, "alpha": alpha_loss,
                       "entropy": -aux["log_prob"]}

    def training_step(self, state: SACState, key: jax.Array) -> tuple[SACState, dict]:
        """Collect ``num_envs * train_frequency`` transitions, then (after
        ``learning_starts``) ``gradient_steps`` updates."""
        collect_key, learn_key = jax.random.split(key)
        env_state, obs, buffer, infos = self.collect(state, collect_key)
        carry = (state.actor_params, state.critic_params, state.target_critic_params,
                 state.log_alpha, state.actor_opt, state.critic_opt, state.alpha_opt)
        carry, losses = self.learn(lambda c, k: self.update(c, k, buffer), carry, state.step,
                                   learn_key, ("critic", "actor", "alpha", "entropy"))
        (actor_params, critic_params, target_params, log_alpha, actor_opt, critic_opt,
         alpha_opt) = carry
        learned = self.learning(state.step).astype(jnp.int32) * self.config.gradient_steps
        new_state = SACState(actor_params, critic_params, target_params, log_alpha, actor_opt,
                             critic_opt, alpha_opt, state.step + 1, state.updates + learned,
                             env_state, obs, buffer)
        entropy = losses.pop("loss/entropy")
        metrics = {**self.episode_metrics(infos), **losses, "entropy": entropy,
                   "alpha": Last.of(jnp.exp(log_alpha))}
        return new_state, metrics
