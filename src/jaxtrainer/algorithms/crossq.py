"""CrossQ: SAC without target networks, made stable by batch renormalisation.

Bhatt, Palenicek, Belousov, Argus, Amiranashvili, Brox and Peters 2024,
"CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater Sample
Efficiency and Simplicity", ICLR 2024, arXiv:1902.05605. The critics and the
actor normalise their layers with batch renormalisation
(:class:`~jaxtrainer.algorithms.batch_renorm.BatchRenorm`); the critic loss
evaluates ``Q(s, a)`` and ``Q(s', a')`` in one forward pass over the
concatenated batch, so both are normalised with the statistics of their
mixture, and the bootstrap value comes from the critics themselves: no target
network and no Polyak averaging.

Checked against sbx's ``sbx/crossq`` (``araffin/sbx``, the reference's JAX
port): critics of 1024-1024 units and an actor of 256-256, each layer followed
by batch renormalisation (momentum 0.99, corrections after 100,000 training
calls), the input too; Adam with ``b1 = 0.5`` and learning rate 1e-3 for the
critics, the actor and the temperature; the actor and temperature updated once
every ``policy_delay = 3`` critic updates; loss ``0.5 * sum_i mean((Q_i - y)^2)``.
Device-parallel as every module here: batch statistics are averaged over the
devices, so the replicas keep equal parameters and running statistics.

The collection, replay, temperature and policies are
:class:`~jaxtrainer.algorithms.sac.SAC`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms._config_parts import composes
from jaxtrainer.algorithms.batch_renorm import BatchRenorm
from jaxtrainer.algorithms.critic_losses import (
    clipped_double_q_target,
    critic_regression,
    soft_actor_loss,
)
from jaxtrainer.algorithms.exploration import action_scale_bias
from jaxtrainer.algorithms.hyperparams import adam
from jaxtrainer.algorithms.networks import LOG_STD_MAX, LOG_STD_MIN, activation
from jaxtrainer.algorithms.replay import EnvsAndReplay, Transition
from jaxtrainer.algorithms.sac import SAC, SACConfig, squashed_sample
from jaxtrainer.distributed._gradient_step import averaged_update
from jaxtrainer.metrics import Last, Mean


class _Renormed(nn.Module):
    """``[B, d] -> [B, hidden_sizes[-1]]``: batch renormalisation of the input,
    then ``Dense -> activation -> BatchRenorm`` per hidden layer (sbx's layout)."""

    hidden_sizes: Sequence[int]
    activation: str
    momentum: float
    warmup_steps: int

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        act = activation(self.activation)
        x = BatchRenorm(self.momentum, warmup_steps=self.warmup_steps)(x, train)
        for size in self.hidden_sizes:
            x = BatchRenorm(self.momentum, warmup_steps=self.warmup_steps)(
                act(nn.Dense(size)(x)), train)
        return x


class CrossQCritic(nn.Module):
    """``num_critics`` Q networks: ``(obs[B, ...], action[B, d]) -> float32[num_critics, B]``,
    each over the flattened observation and the action (``train``: batch
    statistics, updated; else the running ones)."""

    hidden_sizes: Sequence[int] = (1024, 1024)
    activation: str = "relu"
    num_critics: int = 2
    momentum: float = 0.99
    warmup_steps: int = 100_000

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array, train: bool = False) -> jax.Array:
        x = jnp.concatenate([obs.reshape(obs.shape[0], -1), action.astype(jnp.float32)], -1)
        return jnp.stack([
            nn.Dense(1, name=f"q{i + 1}_head")(_Renormed(
                self.hidden_sizes, self.activation, self.momentum, self.warmup_steps,
                name=f"q{i + 1}")(x, train))[:, 0]
            for i in range(self.num_critics)])


class CrossQActor(nn.Module):
    """SAC's squashed Gaussian actor with batch renormalisation:
    ``obs[B, ...] -> (mean, log_std)``, each ``float32[B, action_dim]``, ``log_std``
    squashed into ``[LOG_STD_MIN, LOG_STD_MAX]`` as SAC's."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    momentum: float = 0.99
    warmup_steps: int = 100_000

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False) -> tuple[jax.Array, jax.Array]:
        x = _Renormed(self.hidden_sizes, self.activation, self.momentum, self.warmup_steps)(
            obs.reshape(obs.shape[0], -1), train)
        mean = nn.Dense(self.action_dim, name="mean")(x)
        log_std = jnp.tanh(nn.Dense(self.action_dim, name="log_std")(x))
        return mean, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)


@dataclasses.dataclass(frozen=True)
class CrossQConfig(SACConfig):
    """CrossQ hyperparameters: :class:`~jaxtrainer.algorithms.sac.SACConfig`'s
    fields (``tau`` unused: there are no target networks) with sbx's defaults,
    plus

    Attributes:
      num_envs, train_frequency, gradient_steps: as in
        :class:`~jaxtrainer.algorithms.offpolicy_config.OffPolicyConfig`.
      buffer_size: replay capacity in transitions.
      batch_size: transitions per update.
      learning_starts: env steps collected before the first update.
      hidden_sizes: the actor's hidden layer widths (``critic_hidden_sizes``: the critics').
      policy_delay: critic updates per actor and temperature update.
      critic_hidden_sizes: hidden widths of each critic (``hidden_sizes``: the actor's).
      adam_b1: Adam's ``b1`` for every optimizer (the paper's 0.5).
      momentum: the batch renormalisation's running-statistics decay.
      renorm_warmup_steps: training calls of a layer before its renormalisation
        corrections start.

    SAC's fields, with the meaning and checks they have there
    (:class:`~jaxtrainer.algorithms.sac.SACConfig`, :func:`~jaxtrainer.algorithms.sac.check_sac`):
    ``env``, ``num_envs``, ``train_frequency``, ``gradient_steps``, ``buffer_size``,
    ``batch_size``, ``learning_starts``, ``normalize_observations``, ``reward_scaling``,
    ``policy_lr``, ``q_lr``, ``alpha_lr``, ``tau``, ``init_alpha``, ``autotune``,
    ``target_entropy``, ``hidden_sizes``, ``activation``, ``network``.
    """

    policy_lr: float = 1e-3
    critic_hidden_sizes: tuple[int, ...] = (1024, 1024)
    policy_delay: int = 3
    adam_b1: float = 0.5
    momentum: float = 0.99
    renorm_warmup_steps: int = 100_000

    def __post_init__(self) -> None:
        """:class:`~jaxtrainer.algorithms.sac.SACConfig`'s checks, then the fields above."""
        super().__post_init__()
        arguments.check_fields(self, arguments.sizes, ("critic_hidden_sizes",))
        arguments.check_fields(self, arguments.positive_int, ("policy_delay",), allow_none=False)
        arguments.check_fields(self, arguments.non_negative_int, ("renorm_warmup_steps",))
        arguments.check_fields(self, arguments.number, ("adam_b1", "momentum"), low=0, high=1)
        if self.network.torso != "mlp":
            raise arguments.field_error(self, "network", self.network.torso,
                                        ": CrossQ's networks read the flattened observation "
                                        "(torso mlp) only", part=".torso")


@struct.dataclass
class CrossQCarry:
    """What one CrossQ update changes (a ``lax.scan`` carry). Replicated.

    Attributes:
      actor_params, critic_params: network parameters.
      actor_stats, critic_stats: their batch renormalisation statistics.
      log_alpha: ``float32[]`` log temperature.
      actor_opt, critic_opt, alpha_opt: optax states.
      hyperparams: ``{name: float32[]}`` (:attr:`CrossQ.TUNABLE`).
      updates: ``int32[]`` critic updates done (the actor's delay counts them).
    """

    actor_params: Any
    critic_params: Any
    actor_stats: Any
    critic_stats: Any
    log_alpha: jax.Array
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    alpha_opt: optax.OptState
    hyperparams: dict[str, jax.Array]
    updates: jax.Array


@struct.dataclass
@composes(EnvsAndReplay, after_own=True)
class CrossQState(CrossQCarry):
    """Training state: the :class:`CrossQCarry` fields, then ``step``, the
    envs and the replay (:class:`~jaxtrainer.algorithms.replay.EnvsAndReplay`)
    as :class:`~jaxtrainer.algorithms.sac.SACState`'s."""

    step: jax.Array


class CrossQ(SAC):
    """CrossQ on a continuous-action :mod:`jaxtrainer.envs` environment.

    Metrics: SAC's (``loss/critic``, ``loss/actor``, ``loss/alpha``,
    ``entropy``, ``alpha``; the actor's and temperature's losses are means
    over the updates that changed them). Traced hyperparameters
    (:attr:`TUNABLE`): ``policy_lr``, ``q_lr``, ``alpha_lr``, ``gamma``.

    Args:
      config: hyperparameters; :class:`CrossQConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.

    Raises:
      ValueError: the env's actions are discrete, or a bad field (named).
    """

    name = "CrossQ"
    config_class = CrossQConfig
    carry_type = CrossQCarry
    TUNABLE = ("policy_lr", "q_lr", "alpha_lr", "gamma")

    def __init__(self, config: CrossQConfig | None = None, *, env: envs.Env | str | None = None,
                 **overrides: Any) -> None:
        super().__init__(config, env=env, **overrides)
        if not self.config.autotune:
            self.TUNABLE = (*CrossQ.TUNABLE, "init_alpha")
        cfg, hp = self.config, self.hyperparam_defaults()
        renorm = dict(momentum=cfg.momentum, warmup_steps=cfg.renorm_warmup_steps)
        self.actor = CrossQActor(self.env.action_size, cfg.hidden_sizes, cfg.activation, **renorm)
        self.critic = CrossQCritic(cfg.critic_hidden_sizes, cfg.activation, **renorm)
        self.actor_optimizer = adam(hp["policy_lr"], b1=cfg.adam_b1)
        self.critic_optimizer = adam(hp["q_lr"], b1=cfg.adam_b1)
        self.alpha_optimizer = adam(hp["alpha_lr"], b1=cfg.adam_b1)

    # ---- policies: the actor's parameters with its running statistics ---------
    def policy_params(self, state: CrossQState) -> Any:
        """``{"params", "batch_stats"}`` of the actor (with
        ``normalize_observations``, paired with ``state.obs_stats``)."""
        variables = {"params": state.actor_params, "batch_stats": state.actor_stats}
        return (variables, state.obs_stats) if self.normalize_observations else variables

    def explore(self, state: CrossQState, obs: jax.Array, key: jax.Array) -> jax.Array:
        """Uniform random actions before ``learning_starts`` env steps, then policy samples."""
        policy_key, random_key = jax.random.split(key)
        variables = {"params": state.actor_params, "batch_stats": state.actor_stats}
        action, _ = self.sample_action(variables, obs, policy_key)
        return self.warmup(state, action, random_key)

    # ---- Module ----------------------------------------------------------------
    def init_state(self, key: jax.Array,
                   hyperparams: dict[str, jax.Array] | None = None) -> CrossQState:
        """Networks, statistics and temperature (replicated); this device's envs
        and buffer share (sharded)."""
        actor_key, critic_key, env_key = jax.random.split(key, 3)
        obs = jnp.zeros((1, *self.env.observation_shape), self.env.observation_dtype)
        actor = self.actor.init(actor_key, obs)
        critic = self.critic.init(critic_key, obs, jnp.zeros((1, self.env.action_size)))
        env_state, env_obs, buffer = self.init_envs(env_key)
        hp = self.initial_hyperparams() if hyperparams is None else dict(hyperparams)
        log_alpha = jnp.log(hp["init_alpha"] if "init_alpha" in hp
                            else jnp.asarray(self.config.init_alpha, jnp.float32))
        zero = jnp.zeros((), jnp.int32)
        return self.apply_hyperparams(CrossQState(
            actor_params=actor["params"], critic_params=critic["params"],
            actor_stats=actor["batch_stats"], critic_stats=critic["batch_stats"],
            log_alpha=log_alpha, actor_opt=self.actor_optimizer.init(actor["params"]),
            critic_opt=self.critic_optimizer.init(critic["params"]),
            alpha_opt=self.alpha_optimizer.init(log_alpha), hyperparams=hp, updates=zero,
            step=zero, env_state=env_state, obs=env_obs, buffer=buffer,
            obs_stats=self.init_obs_stats()))

    def crossq_critic_loss(self, critic_params: Any, critic_stats: Any, batch: Transition,
                           next_action: jax.Array, next_entropy_term: jax.Array, gamma: Any,
                           ) -> tuple[jax.Array, dict]:
        """``0.5 * sum_i mean((Q_i(s, a) - y)^2)``, ``y = r + gamma (1 - terminated)
        (min_i Q_i(s', a') - alpha log pi(a'|s'))`` with both Q's from one pass of
        the critics over ``[s; s']`` (batch statistics of the mixture; the new
        running statistics in the aux)."""
        q, updates = self.critic.apply(
            {"params": critic_params, "batch_stats": critic_stats},
            jnp.concatenate([batch.obs, batch.next_obs]),
            jnp.concatenate([batch.action, next_action]), train=True, mutable=["batch_stats"])
        q, q_next = jnp.split(q, 2, axis=1)
        target = jax.lax.stop_gradient(clipped_double_q_target(
            q_next, batch.reward, batch.terminated, gamma, next_entropy_term))
        loss = 0.5 * critic_regression(q, target)
        return loss, {"stats": updates["batch_stats"], "q": jnp.mean(q)}

    def crossq_actor_loss(self, actor_params: Any, actor_stats: Any, critic: Any,
                          alpha: jax.Array, obs: jax.Array, key: jax.Array,
                          ) -> tuple[jax.Array, dict]:
        """``mean(alpha log pi(a|s) - min_i Q_i(s, a))``, the actor in training
        mode (batch statistics, updated), the critics with their running ones."""
        (mean, log_std), updates = self.actor.apply(
            {"params": actor_params, "batch_stats": actor_stats}, obs, train=True,
            mutable=["batch_stats"])
        scale, bias = action_scale_bias(self.env)
        action, log_prob = squashed_sample(mean, log_std, key, scale, bias)
        q = self.critic.apply(critic, obs, action)
        return soft_actor_loss(q, log_prob, alpha), {"stats": updates["batch_stats"],
                                                "log_prob": jnp.mean(log_prob)}

    def update_batch(self, carry: CrossQCarry, keys: tuple[jax.Array, jax.Array],
                     batch: Transition) -> tuple[CrossQCarry, dict]:
        """One critic update on ``batch``; every ``policy_delay``-th also an actor
        and a temperature update (counted by ``carry.updates``). ``keys``: SAC's
        :meth:`~jaxtrainer.algorithms.sac.SAC.split_update_key`, the next
        actions' key and the actor's."""
        hp = carry.hyperparams
        next_key, actor_key = keys
        log_alpha = carry.log_alpha if self.config.autotune else jnp.log(hp["init_alpha"])
        alpha = jnp.exp(log_alpha)
        actor = {"params": carry.actor_params, "batch_stats": carry.actor_stats}
        next_action, next_log_prob = self.sample_action(actor, batch.next_obs, next_key)
        critic_params, critic_opt, critic_loss, aux = averaged_update(
            self.crossq_critic_loss, carry.critic_params, carry.critic_opt,
            self.critic_optimizer, carry.critic_stats, batch, next_action,
            alpha * next_log_prob, hp["gamma"])
        carry = carry.replace(critic_params=critic_params, critic_stats=aux["stats"],
                              critic_opt=critic_opt, updates=carry.updates + 1)

        def delayed(carry):
            critic = {"params": carry.critic_params, "batch_stats": carry.critic_stats}
            actor_params, actor_opt, actor_loss, aux = averaged_update(
                self.crossq_actor_loss, carry.actor_params, carry.actor_opt,
                self.actor_optimizer, carry.actor_stats, critic, alpha, batch.obs, actor_key)
            log_alpha, alpha_opt = carry.log_alpha, carry.alpha_opt
            alpha_loss = jnp.zeros((), jnp.float32)
            if self.config.autotune:
                log_alpha, alpha_opt, alpha_loss, _ = averaged_update(
                    self.alpha_loss, log_alpha, alpha_opt, self.alpha_optimizer, aux["log_prob"])
            carry = carry.replace(actor_params=actor_params, actor_stats=aux["stats"],
                                  actor_opt=actor_opt, log_alpha=log_alpha, alpha_opt=alpha_opt)
            one = jnp.ones((), jnp.float32)
            return carry, (Mean(actor_loss, one), Mean(alpha_loss, one),
                           Mean(-aux["log_prob"], one))

        def wait(carry):
            return carry, (Mean.empty(), Mean.empty(), Mean.empty())

        carry, (actor_loss, alpha_loss, entropy) = jax.lax.cond(
            carry.updates % self.config.policy_delay == 0, delayed, wait, carry)
        return carry, {"critic": critic_loss, "actor": actor_loss, "alpha": alpha_loss,
                       "entropy": entropy}

    def after_learning(self, state: CrossQState, new_state: CrossQState,
                       losses: dict) -> tuple[CrossQState, dict]:
        """SAC's metrics (the temperature after this step as ``alpha``)."""
        entropy = losses.pop("loss/entropy")
        return new_state, {**losses, "entropy": entropy,
                           "alpha": Last.of(jnp.exp(new_state.log_alpha))}

