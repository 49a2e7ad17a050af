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
* truncation is not termination: bootstrapping from the observation the time
  limit cut;
* device-parallel, as every module here: global sizes, per-device envs and
  buffer share, device-averaged gradients (replicas stay bitwise equal).

Optional, off by default: observation normalisation and reward scaling as in
Brax's SAC (``normalize_observations``, ``reward_scaling``; see
:mod:`~jaxtrainer.algorithms.offpolicy`).

The collection, replay and learning loop are
:class:`~jaxtrainer.algorithms.offpolicy.OffPolicyModule`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms import offpolicy
from jaxtrainer.algorithms._config_parts import composes
from jaxtrainer.algorithms.critic_losses import (
    clipped_double_q_loss,
    soft_actor_loss,
    temperature_loss,
)
from jaxtrainer.algorithms.distributions import LOG_2PI
from jaxtrainer.algorithms.exploration import action_scale_bias
from jaxtrainer.algorithms.hyperparams import adam, hyperparam
from jaxtrainer.algorithms.networks import SquashedGaussianActor
from jaxtrainer.algorithms.offpolicy_config import (
    ReplayLearnerConfig,
    check_normalization,
    check_stepping,
)
from jaxtrainer.algorithms.replay import EnvsAndReplay, Transition
from jaxtrainer.algorithms.target_update import soft_update
from jaxtrainer.distributed._gradient_step import averaged_update
from jaxtrainer.metrics import Last


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


def check_sac(config: Any) -> None:
    """The checks of SAC's fields (learning rates, temperature), in
    :class:`SACConfig` (and so :class:`~jaxtrainer.algorithms.crossq.CrossQConfig`).

    Raises:
      ValueError: a bad field, named (e.g. ``SACConfig.init_alpha=0``).
    """
    arguments.check_fields(config, arguments.number, ("policy_lr", "q_lr"), low=0)
    arguments.check_fields(config, arguments.number, ("alpha_lr",), low=0, allow_none=True)
    arguments.check_fields(config, arguments.number, ("init_alpha",), low=0, low_open=True)
    arguments.check_fields(config, arguments.number, ("target_entropy",), allow_none=True)
    arguments.check_fields(config, arguments.flag, ("autotune",))


@dataclasses.dataclass(frozen=True)
class SACConfig(ReplayLearnerConfig):
    """SAC hyperparameters. Sizes and step counts are global (over all devices).

    :class:`~jaxtrainer.algorithms.offpolicy_config.ReplayLearnerConfig`'s fields (with
    its defaults, CleanRL's), how the module steps its envs, observation
    normalisation and reward scaling, plus the learning rates and the
    temperature's. :class:`~jaxtrainer.algorithms.crossq.CrossQConfig` builds on it.

    Attributes:
      env, num_envs, train_frequency, gradient_steps, buffer_size, batch_size, learning_starts: as in :class:`~jaxtrainer.algorithms.offpolicy_config.OffPolicyConfig`
        (``env`` with continuous actions; an update is a critic, an actor and a
        temperature step; uniform random actions before ``learning_starts``).
      normalize_observations: act and learn on observations normalised with
        running statistics of every observation collected (Brax's SAC option of
        the same name; see :mod:`~jaxtrainer.algorithms.offpolicy`). The replay
        buffer keeps raw observations; the statistics are in the state.
      reward_scaling: rewards are multiplied by it in the critics' targets only
        (Brax's SAC ``reward_scaling``); logged returns stay raw. A number >= 0.
      policy_lr: Adam learning rate of the actor.
      q_lr: Adam learning rate of the critics (and of the temperature unless
        ``alpha_lr`` is set).
      alpha_lr: Adam learning rate of the temperature; ``None``: ``q_lr`` (CleanRL's).
      tau: Polyak rate of the target critics (updated after every update).
      init_alpha: initial temperature.
      autotune: learn the temperature; ``False`` keeps ``init_alpha``.
      target_entropy: entropy the temperature tunes toward; ``None`` is
        ``-action_dim`` (the SAC paper's heuristic).
      hidden_sizes: hidden widths of the actor and of each critic.
      activation: their activation.
      network: the torso of the actor and of each critic before their hidden
        layers (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`; default ``mlp``).
    """

    normalize_observations: bool = False
    reward_scaling: float = 1.0
    num_envs: int = 4
    train_frequency: int = 1
    gradient_steps: int = 4
    policy_lr: float = 3e-4
    q_lr: float = 1e-3
    alpha_lr: float | None = None
    init_alpha: float = 1.0
    autotune: bool = True
    target_entropy: float | None = None

    def __post_init__(self) -> None:
        """:func:`~jaxtrainer.algorithms.offpolicy_config.check_replay_learner`,
        :func:`~jaxtrainer.algorithms.offpolicy_config.check_normalization`,
        :func:`~jaxtrainer.algorithms.offpolicy_config.check_stepping`, then
        :func:`check_sac`."""
        super().__post_init__()
        check_normalization(self)
        check_stepping(self)
        check_sac(self)


@struct.dataclass
class SACCarry:
    """What one SAC update changes (a ``lax.scan`` carry). Replicated.

    Attributes:
      actor_params, critic_params, target_critic_params: network parameters.
      log_alpha: ``float32[]`` log temperature.
      actor_opt, critic_opt, alpha_opt: optax states
        (:func:`~jaxtrainer.algorithms.hyperparams.adam`).
      hyperparams: ``{name: float32[]}`` for every name in :attr:`SAC.TUNABLE`
        (read, never changed, by the updates).
    """

    actor_params: Any
    critic_params: Any
    target_critic_params: Any
    log_alpha: jax.Array
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    alpha_opt: optax.OptState
    hyperparams: dict[str, jax.Array]


@struct.dataclass
@composes(EnvsAndReplay, after_own=True)
class SACState(SACCarry):
    """Training state: the :class:`SACCarry` fields, then

    Attributes:
      step: ``int32[]`` training steps done. updates: ``int32[]`` updates done.
      env_state, obs, buffer, obs_stats: the envs and the replay
        (:class:`~jaxtrainer.algorithms.replay.EnvsAndReplay`).
    """

    step: jax.Array
    updates: jax.Array


class SAC(offpolicy.OffPolicyModule):
    """SAC on a continuous-action :mod:`jaxtrainer.envs` environment (gymnax Box or brax).

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length``, and once learning started ``loss/critic`` (sum of
    both critics' mean squared errors), ``loss/actor``, ``loss/alpha``, ``alpha``
    (temperature after the log interval's last step, :class:`~jaxtrainer.Last`), ``entropy`` (``-E[log pi]`` on the
    batch). :meth:`evaluation_step`: ``eval/episode_return`` and
    ``eval/episode_length`` of the deterministic policy ``scale * tanh(mean) + bias``
    (on normalised observations with ``normalize_observations``).

    Traced hyperparameters (``state.hyperparams``, :attr:`TUNABLE`): ``policy_lr``,
    ``q_lr``, ``alpha_lr``, ``gamma``, ``tau``, and with ``autotune=False`` the
    fixed temperature ``init_alpha``.

    Args:
      config: hyperparameters; :class:`SACConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.

    Raises:
      ValueError: the env's actions are discrete or multi-discrete, or a size is
        not positive.
    """

    name = "SAC"
    config_class = SACConfig
    carry_type = SACCarry
    LOSSES = ("critic", "actor", "alpha", "entropy")
    TUNABLE = ("policy_lr", "q_lr", "alpha_lr", "gamma", "tau")
    TUNABLE_FALLBACK = (("alpha_lr", "q_lr"),)
    LEARNING_RATES = (("actor_opt", "policy_lr"), ("critic_opt", "q_lr"),
                      ("alpha_opt", "alpha_lr"))

    def __init__(self, config: SACConfig | None = None, *, env: envs.Env | str | None = None,
                 **overrides: Any) -> None:
        super().__init__(config, env=env, **overrides)
        if not self.config.autotune:  # the fixed temperature is a number in the state too
            self.TUNABLE = (*SAC.TUNABLE, "init_alpha")
        hp = self.hyperparam_defaults()
        self.setup_actor_critic(SquashedGaussianActor, hp["policy_lr"], hp["q_lr"])
        self.alpha_optimizer = adam(hp["alpha_lr"])

    @property
    def target_entropy(self) -> float:
        """The entropy the temperature tunes toward: ``-action_dim`` unless configured."""
        if self.config.target_entropy is not None:
            return float(self.config.target_entropy)
        return -float(self.env.action_size)

    def hparams(self) -> dict[str, Any]:
        return {**super().hparams(), "target_entropy": self.target_entropy}

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
        return self.warmup(state, action, random_key)

    def sample_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """As :meth:`greedy_policy`, an action sampled from the squashed Gaussian."""
        return self.normalizing(lambda params, obs, key: self.sample_action(params, obs, key)[0])

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs[n, ...], key) -> float32[n, action_size]``, the
        deterministic ``scale * tanh(mean) + bias`` on raw observations;
        ``params`` is :meth:`policy_params` (``(actor_params, obs_stats)`` with
        ``normalize_observations``)."""
        scale, bias = action_scale_bias(self.env)

        def policy(params, obs, key):
            del key
            mean, _ = self.actor.apply(params, obs)
            return scale * jnp.tanh(mean) + bias
        return self.normalizing(policy)

    # ---- Module -------------------------------------------------------------
    def init_state(self, key: jax.Array,
                   hyperparams: dict[str, jax.Array] | None = None) -> SACState:
        """Networks and temperature (replicated), target critics equal to the
        critics; this device's envs and buffer share (sharded).
        ``hyperparams``: the state's :attr:`TUNABLE` values, ``{name: float32[]}``
        (``None``: :meth:`initial_hyperparams`); the optimizers' learning rates
        (:meth:`apply_hyperparams`) and the fixed temperature without
        ``autotune`` are set from them."""
        actor_params, critic_params, env_state, env_obs, buffer = self.init_actor_critic(key)
        hp = self.initial_hyperparams() if hyperparams is None else dict(hyperparams)
        log_alpha = jnp.log(hp["init_alpha"] if "init_alpha" in hp
                            else jnp.asarray(self.config.init_alpha, jnp.float32))
        zero = jnp.zeros((), jnp.int32)
        return self.apply_hyperparams(SACState(
            actor_params=actor_params, critic_params=critic_params,
            target_critic_params=jax.tree.map(jnp.copy, critic_params), log_alpha=log_alpha,
            actor_opt=self.actor_optimizer.init(actor_params),
            critic_opt=self.critic_optimizer.init(critic_params),
            alpha_opt=self.alpha_optimizer.init(log_alpha),
            hyperparams=hp, step=zero, updates=zero,
            env_state=env_state, obs=env_obs, buffer=buffer, obs_stats=self.init_obs_stats()))

    def critic_loss(self, critic_params: Any, target_critic_params: Any, actor_params: Any,
                    alpha: jax.Array, batch: Transition, key: jax.Array,
                    hyperparams: dict[str, jax.Array] | None = None) -> tuple[jax.Array, dict]:
        """``sum_i mean((Q_i(s, a) - y)^2)`` with the soft clipped double-Q target
        ``y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s'))``,
        ``a' ~ pi(.|s')``; ``gamma`` from ``hyperparams`` (the config's when ``None``)."""
        next_action, next_log_prob = self.sample_action(actor_params, batch.next_obs, key)
        loss, q = clipped_double_q_loss(
            self.critic, critic_params, target_critic_params, batch, next_action,
            hyperparam(self.config, hyperparams, "gamma"), alpha * next_log_prob)
        return loss, {"q": jnp.mean(q)}

    def actor_loss(self, actor_params: Any, critic_params: Any, alpha: jax.Array,
                   batch: Transition, key: jax.Array) -> tuple[jax.Array, dict]:
        """``mean(alpha log pi(a|s) - min_i Q_i(s, a))``, ``a ~ pi(.|s)`` reparameterised
        (:func:`~jaxtrainer.algorithms.critic_losses.soft_actor_loss`)."""
        action, log_prob = self.sample_action(actor_params, batch.obs, key)
        q = self.critic.apply(critic_params, batch.obs, action)
        return soft_actor_loss(q, log_prob, alpha), {"log_prob": jnp.mean(log_prob)}

    def alpha_loss(self, log_alpha: jax.Array, mean_log_prob: jax.Array) -> tuple[jax.Array, dict]:
        """``-alpha * (E[log pi] + target_entropy)``
        (:func:`~jaxtrainer.algorithms.critic_losses.temperature_loss`): raises alpha
        while the entropy ``-E[log pi]`` is below the target, lowers it above."""
        return temperature_loss(log_alpha, mean_log_prob, self.target_entropy), {}

    def split_update_key(self, key: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """``(sample_key, (critic_key, actor_key))``: ``split(key, 3)``."""
        sample_key, critic_key, actor_key = jax.random.split(key, 3)
        return sample_key, (critic_key, actor_key)

    def update_batch(self, carry: SACCarry, keys: tuple[jax.Array, jax.Array],
                     batch: Transition) -> tuple[SACCarry, dict]:
        """One SAC update on ``batch`` (observations normalised, rewards scaled):
        critics, actor, temperature, target critics, with ``gamma``, ``tau`` (and
        the fixed temperature ``init_alpha`` without ``autotune``) from
        ``carry.hyperparams``."""
        hp = carry.hyperparams
        critic_key, actor_key = keys
        log_alpha = carry.log_alpha if self.config.autotune else jnp.log(hp["init_alpha"])
        alpha = jnp.exp(log_alpha)
        critic_params, critic_opt, critic_loss, _ = averaged_update(
            self.critic_loss, carry.critic_params, carry.critic_opt, self.critic_optimizer,
            carry.target_critic_params, carry.actor_params, alpha, batch, critic_key, hp)
        actor_params, actor_opt, actor_loss, aux = averaged_update(
            self.actor_loss, carry.actor_params, carry.actor_opt, self.actor_optimizer,
            critic_params, alpha, batch, actor_key)
        alpha_opt = carry.alpha_opt
        alpha_loss = jnp.zeros((), jnp.float32)
        if self.config.autotune:
            log_alpha, alpha_opt, alpha_loss, _ = averaged_update(
                self.alpha_loss, log_alpha, alpha_opt, self.alpha_optimizer, aux["log_prob"])
        target_params = soft_update(carry.target_critic_params, critic_params, hp["tau"])
        carry = SACCarry(actor_params, critic_params, target_params, log_alpha, actor_opt,
                         critic_opt, alpha_opt, hp)
        return carry, {"critic": critic_loss, "actor": actor_loss, "alpha": alpha_loss,
                       "entropy": -aux["log_prob"]}

    def after_learning(self, state: SACState, new_state: SACState,
                       losses: dict) -> tuple[SACState, dict]:
        """Metrics ``loss/critic``, ``loss/actor``, ``loss/alpha``, ``entropy`` and
        ``alpha`` (the temperature after this step, :class:`~jaxtrainer.Last`)."""
        entropy = losses.pop("loss/entropy")
        return new_state, {**losses, "entropy": entropy,
                           "alpha": Last.of(jnp.exp(new_state.log_alpha))}
