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
uses 25,000 for MuJoCo budgets of 1e6); truncation bootstraps (it is not
termination); global sizes split over devices with device-averaged gradients
(replicas stay bitwise equal).

Each of TD3's three additions to DDPG has a switch (``twin_critics``,
``policy_noise``, ``policy_delay``); :class:`~jaxtrainer.algorithms.ddpg.DDPG`
is this class with all three off (one critic, no smoothing, no delay).

The collection, replay and learning loop are
:class:`~jaxtrainer.algorithms.offpolicy.OffPolicyModule`'s, as for SAC and DQN,
with the same optional observation normalisation and reward scaling as SAC
(``normalize_observations``, ``reward_scaling``, after Brax's SAC). TD3's
losses are functions of its networks (:func:`td3_critic_loss`,
:func:`td3_actor_loss`, over the pieces of
:mod:`~jaxtrainer.algorithms.critic_losses` and
:mod:`~jaxtrainer.algorithms.exploration`), which CEM-RL calls too.
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
from jaxtrainer.algorithms.critic_losses import clipped_double_q_loss, deterministic_actor_loss
from jaxtrainer.algorithms.exploration import (
    action_scale_bias,
    gaussian_exploration,
    smoothed_target_action,
)
from jaxtrainer.algorithms.hyperparams import hyperparam
from jaxtrainer.algorithms.networks import DeterministicActor
from jaxtrainer.algorithms.offpolicy_config import (
    ReplayLearnerConfig,
    check_normalization,
    check_stepping,
)
from jaxtrainer.algorithms.replay import EnvsAndReplay, Transition
from jaxtrainer.algorithms.target_update import soft_update
from jaxtrainer.distributed._gradient_step import averaged_update
from jaxtrainer.metrics import Mean


@dataclasses.dataclass(frozen=True)
class TD3LearnerConfig:
    """TD3's learner fields, declared once and composed (flat) into
    :class:`TD3Config` and :class:`~jaxtrainer.algorithms.erl.ERLConfig`
    (:func:`~jaxtrainer.algorithms._config_parts.composes`); documented on
    :class:`TD3Config`, checked by :func:`check_td3_learner`."""

    normalize_observations: bool = False
    reward_scaling: float = 1.0
    lr: float = 3e-4
    twin_critics: bool = True
    policy_delay: int = 2
    exploration_noise: float = 0.1
    policy_noise: float = 0.2
    noise_clip: float = 0.5


def check_td3_learner(config: Any) -> None:
    """The checks of :class:`TD3LearnerConfig`'s fields (``normalize_observations``
    and ``reward_scaling``: :func:`~jaxtrainer.algorithms.offpolicy_config.check_normalization`),
    in :class:`TD3Config` and :class:`~jaxtrainer.algorithms.erl.ERLConfig`.

    Raises:
      ValueError: a bad field, named (e.g. ``TD3Config.policy_delay=0``).
    """
    check_normalization(config)
    arguments.check_fields(config, arguments.flag, ("twin_critics",))
    arguments.check_fields(config, arguments.positive_int, ("policy_delay",), allow_none=False)
    arguments.check_fields(config, arguments.number, ("lr", "exploration_noise", "policy_noise",
                                                      "noise_clip"), low=0)


@dataclasses.dataclass(frozen=True)
@composes(TD3LearnerConfig)
class TD3Config(ReplayLearnerConfig):
    """TD3 hyperparameters. Sizes and step counts are global (over all devices).

    :class:`~jaxtrainer.algorithms.offpolicy_config.ReplayLearnerConfig`'s
    fields (CleanRL's defaults) with observation normalisation and reward
    scaling, TD3's learner fields (:class:`TD3LearnerConfig`, which
    :class:`~jaxtrainer.algorithms.erl.ERLConfig` composes too), how the module steps its envs, and the actor's and critics'
    own learning rates.

    Attributes:
      env, num_envs, train_frequency, gradient_steps, buffer_size, batch_size, learning_starts: as in :class:`~jaxtrainer.algorithms.offpolicy_config.OffPolicyConfig`
        (``env`` with continuous actions; an update is a critic step, with the
        delayed actor step; uniform random actions before ``learning_starts``).
      normalize_observations, reward_scaling: as in
        :class:`~jaxtrainer.algorithms.sac.SACConfig` (off: ``False``, 1).
      lr: Adam learning rate of the actor and the critics.
      actor_lr, critic_lr: the actor's / the critics' own learning rate;
        ``None``: ``lr``.
      tau: Polyak rate of the target actor and critics.
      twin_critics: two critics and the clipped double-Q target (``min`` of the
        two target critics); ``False``: one critic and the plain target, as DDPG.
      policy_delay: critic updates per actor (and target) update.
      exploration_noise: std of the behaviour noise, in units of the action scale.
      policy_noise: std of the target smoothing noise, in units of the action scale
        (0: no smoothing, the target actor's action as it is).
      noise_clip: the smoothing noise is clipped to ``+-noise_clip`` (same units).
      hidden_sizes, activation: the networks' hidden layers.
      network: their torso (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`;
        default ``mlp``).
    """

    num_envs: int = 4
    train_frequency: int = 1
    gradient_steps: int = 4
    actor_lr: float | None = None
    critic_lr: float | None = None

    def __post_init__(self) -> None:
        """The shared checks (:mod:`~jaxtrainer.algorithms.offpolicy_config`'s and
        :func:`check_td3_learner`), then the learning rates above.

        Raises:
          ValueError: a bad field, named (e.g. ``TD3Config.actor_lr=-1``).
        """
        super().__post_init__()
        check_td3_learner(self)
        check_stepping(self)
        arguments.check_fields(self, arguments.number, ("actor_lr", "critic_lr"), low=0,
                               allow_none=True)


# ---- TD3's losses, as functions of its networks (TD3's and CEM-RL's) ------------
def deterministic_action(actor: Any, actor_params: Any, obs: jax.Array,
                         env: envs.Env) -> jax.Array:
    """The deterministic action ``scale * actor(obs) + bias`` (CleanRL's): ``obs:
    [B, *observation_shape]`` -> ``float32[B, action_size]`` in the env's box
    (:func:`~jaxtrainer.algorithms.exploration.action_scale_bias`)."""
    scale, bias = action_scale_bias(env)
    return scale * actor.apply(actor_params, obs) + bias


def _td3_target_action(actor: Any, target_actor_params: Any, next_obs: jax.Array, key: jax.Array,
                  env: envs.Env, policy_noise: float, noise_std: Any,
                  noise_clip: float) -> jax.Array:
    """Target policy smoothing (:func:`~jaxtrainer.algorithms.exploration.smoothed_target_action`):
    ``clip(pi'(s') + clip(eps, +-noise_clip) * scale, low, high)`` with ``eps ~
    N(0, noise_std)``; with the config's ``policy_noise = 0`` (DDPG): the target
    actor's action ``pi'(s')`` itself (``key`` unused). ``noise_std``: the
    (traced) value of ``policy_noise``. ``next_obs: [B, *observation_shape]`` ->
    ``float32[B, action_size]``."""
    scale, _ = action_scale_bias(env)
    action = deterministic_action(actor, target_actor_params, next_obs, env)
    if policy_noise == 0:
        return action
    return smoothed_target_action(action, jax.random.normal(key, action.shape), noise_std,
                                  noise_clip, scale, jnp.asarray(env.action_low),
                                  jnp.asarray(env.action_high))


def td3_critic_loss(critic_params: Any, actor: Any, critic: Any, env: envs.Env,
                target_actor_params: Any, target_critic_params: Any, batch: Transition,
                key: jax.Array, gamma: Any, policy_noise: float, noise_std: Any,
                noise_clip: float) -> tuple[jax.Array, dict]:
    """TD3's critic loss (Fujimoto et al. 2018, Eq. 10):
    :func:`~jaxtrainer.algorithms.critic_losses.clipped_double_q_loss` at the
    smoothed :func:`_td3_target_action`; with one critic and no smoothing DDPG's
    ``mean((Q(s, a) - y)^2)``, ``y = r + gamma (1 - terminated) Q'(s', pi'(s'))``.
    ``(loss: float32[], {})``."""
    next_action = _td3_target_action(actor, target_actor_params, batch.next_obs, key, env,
                                policy_noise, noise_std, noise_clip)
    loss, _ = clipped_double_q_loss(critic, critic_params, target_critic_params, batch,
                                    next_action, gamma)
    return loss, {}


def td3_actor_loss(actor_params: Any, actor: Any, critic: Any, env: envs.Env, critic_params: Any,
               batch: Transition) -> tuple[jax.Array, dict]:
    """``-mean Q_1(s, pi(s))`` (:func:`~jaxtrainer.algorithms.critic_losses.deterministic_actor_loss`):
    ``(loss: float32[], {})``."""
    q = critic.apply(critic_params, batch.obs,
                     deterministic_action(actor, actor_params, batch.obs, env))
    return deterministic_actor_loss(q), {}


@struct.dataclass
class TD3Carry:
    """What one TD3 update changes (a ``lax.scan`` carry). Replicated.

    Attributes:
      actor_params, critic_params, target_actor_params, target_critic_params:
        network parameters.
      actor_opt, critic_opt: optax states (:func:`~jaxtrainer.algorithms.hyperparams.adam`).
      updates: ``int32[]`` critic updates done, which schedules the delayed actor
        and target updates.
      hyperparams: ``{name: float32[]}`` for every name in :attr:`TD3.TUNABLE`
        (read, never changed, by the updates).
    """

    actor_params: Any
    critic_params: Any
    target_actor_params: Any
    target_critic_params: Any
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    updates: jax.Array
    hyperparams: dict[str, jax.Array]


@struct.dataclass
@composes(EnvsAndReplay, after_own=True)
class TD3State(TD3Carry):
    """Training state: the :class:`TD3Carry` fields, then ``step`` (``int32[]``
    training steps done), then the envs and the replay
    (:class:`~jaxtrainer.algorithms.replay.EnvsAndReplay`), as
    :class:`~jaxtrainer.algorithms.sac.SACState`."""

    step: jax.Array


class TD3(offpolicy.OffPolicyModule):
    """TD3 on a continuous-action :mod:`jaxtrainer.envs` environment.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length``, and once learning started ``loss/critic`` and
    ``loss/actor`` (the latter over the step's delayed actor updates only).
    :meth:`evaluation_step`: the deterministic actor on fresh episodes (on
    normalised observations with ``normalize_observations``).

    Traced hyperparameters (``state.hyperparams``, :attr:`TUNABLE`): ``actor_lr``,
    ``critic_lr`` (both ``lr`` unless set), ``gamma``, ``tau``,
    ``exploration_noise``, and ``policy_noise`` when the config smooths the
    target (``policy_noise > 0``; not DDPG's).

    Args:
      config: hyperparameters; :class:`TD3Config` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.
    """

    name = "TD3"
    config_class = TD3Config
    carry_type = TD3Carry
    LOSSES = ("critic", "actor")
    TUNABLE = ("actor_lr", "critic_lr", "gamma", "tau", "exploration_noise", "policy_noise")
    TUNABLE_FALLBACK = (("actor_lr", "lr"), ("critic_lr", "lr"))
    LEARNING_RATES = (("actor_opt", "actor_lr"), ("critic_opt", "critic_lr"))

    def __init__(self, config: TD3Config | None = None, *, env: envs.Env | str | None = None,
                 **overrides: Any) -> None:
        super().__init__(config, env=env, **overrides)
        if self.config.policy_noise == 0:  # no target smoothing: nothing to tune there
            self.TUNABLE = tuple(n for n in TD3.TUNABLE if n != "policy_noise")
        hp = self.hyperparam_defaults()
        self.setup_actor_critic(DeterministicActor, hp["actor_lr"], hp["critic_lr"],
                                num_critics=2 if self.config.twin_critics else 1)

    # ---- TD3's losses on this module's networks --------------------------------
    def act(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        """The deterministic action ``scale * actor(obs) + bias`` (:func:`deterministic_action`)."""
        return deterministic_action(self.actor, actor_params, obs, self.env)

    def target_action(self, target_actor_params: Any, next_obs: jax.Array, key: jax.Array,
                      hyperparams: dict[str, jax.Array] | None = None) -> jax.Array:
        """:func:`_td3_target_action` with the config's smoothing (``policy_noise``
        from ``hyperparams`` when given, else the config's)."""
        cfg = self.config
        std = hyperparam(cfg, hyperparams, "policy_noise") if cfg.policy_noise else 0.0
        return _td3_target_action(self.actor, target_actor_params, next_obs, key, self.env,
                                 cfg.policy_noise, std, cfg.noise_clip)

    def critic_loss(self, critic_params: Any, target_actor_params: Any,
                    target_critic_params: Any, batch: Transition, key: jax.Array,
                    hyperparams: dict[str, jax.Array] | None = None,
                    ) -> tuple[jax.Array, dict]:
        """:func:`td3_critic_loss` with ``gamma`` and ``policy_noise`` from
        ``hyperparams`` (the config's when ``None``)."""
        cfg = self.config
        std = hyperparam(cfg, hyperparams, "policy_noise") if cfg.policy_noise else 0.0
        return td3_critic_loss(critic_params, self.actor, self.critic, self.env,
                               target_actor_params, target_critic_params, batch, key,
                               hyperparam(cfg, hyperparams, "gamma"),
                               cfg.policy_noise, std, cfg.noise_clip)

    def critic_update(self, critic_params: Any, critic_opt: optax.OptState,
                      target_actor_params: Any, target_critic_params: Any, batch: Transition,
                      key: jax.Array, hyperparams: dict[str, jax.Array] | None = None,
                      ) -> tuple[Any, optax.OptState, jax.Array]:
        """One gradient step of :meth:`critic_loss` (averaged over devices):
        ``(critic_params, critic_opt, loss: float32[])``."""
        critic_params, critic_opt, loss, _ = averaged_update(
            self.critic_loss, critic_params, critic_opt, self.critic_optimizer,
            target_actor_params, target_critic_params, batch, key, hyperparams)
        return critic_params, critic_opt, loss

    def actor_loss(self, actor_params: Any, critic_params: Any,
                   batch: Transition) -> tuple[jax.Array, dict]:
        """``-mean Q_1(s, pi(s))`` (:func:`td3_actor_loss`)."""
        return td3_actor_loss(actor_params, self.actor, self.critic, self.env, critic_params,
                              batch)

    # ---- policies -----------------------------------------------------------
    def explore(self, state: TD3State, obs: jax.Array, key: jax.Array) -> jax.Array:
        """Uniform random actions before ``learning_starts`` env steps, then the
        actor's action plus ``N(0, exploration_noise * scale)``, clipped to the box."""
        noise_key, random_key = jax.random.split(key)
        action = gaussian_exploration(self.env, self.act(state.actor_params, obs),
                                      state.hyperparams["exploration_noise"], noise_key)
        return self.warmup(state, action, random_key)

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs[n, ...], key) -> float32[n, action_size]``, the
        deterministic actor on raw observations; ``params`` is
        :meth:`policy_params` (``(actor_params, obs_stats)`` with
        ``normalize_observations``)."""
        def policy(params, obs, key):
            del key
            return self.act(params, obs)
        return self.normalizing(policy)

    # ---- Module -------------------------------------------------------------
    def init_state(self, key: jax.Array,
                   hyperparams: dict[str, jax.Array] | None = None) -> TD3State:
        """Networks (replicated), target networks equal to them; this device's envs
        and buffer share (sharded).
        ``hyperparams``: the state's :attr:`TUNABLE` values, ``{name: float32[]}``
        (``None``: :meth:`initial_hyperparams`); the optimizers' learning rates
        are set from them (:meth:`apply_hyperparams`)."""
        actor_params, critic_params, env_state, env_obs, buffer = self.init_actor_critic(key)
        hp = self.initial_hyperparams() if hyperparams is None else dict(hyperparams)
        zero = jnp.zeros((), jnp.int32)
        return self.apply_hyperparams(TD3State(
            actor_params=actor_params, critic_params=critic_params,
            target_actor_params=jax.tree.map(jnp.copy, actor_params),
            target_critic_params=jax.tree.map(jnp.copy, critic_params),
            actor_opt=self.actor_optimizer.init(actor_params),
            critic_opt=self.critic_optimizer.init(critic_params), updates=zero,
            hyperparams=hp, step=zero,
            env_state=env_state, obs=env_obs, buffer=buffer, obs_stats=self.init_obs_stats()))

    def split_update_key(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(sample_key, noise_key)``: ``split(key)``."""
        sample_key, noise_key = jax.random.split(key)
        return sample_key, noise_key

    def update_batch(self, carry: TD3Carry, noise_key: jax.Array,
                     batch: Transition) -> tuple[TD3Carry, dict]:
        """One critic update on ``batch`` (observations normalised, rewards
        scaled); every ``policy_delay``-th also updates the actor and moves both
        target networks (counted by ``carry.updates``, replicated). The actor
        loss is a :class:`~jaxtrainer.metrics.Mean` of count 0 on the other
        updates. ``gamma``, ``tau`` and ``policy_noise`` from ``carry.hyperparams``."""
        critic_params, critic_opt, critic_loss = self.critic_update(
            carry.critic_params, carry.critic_opt, carry.target_actor_params,
            carry.target_critic_params, batch, noise_key, carry.hyperparams)
        carry = carry.replace(critic_params=critic_params, critic_opt=critic_opt,
                              updates=carry.updates + 1)

        def delayed(carry):
            actor_params, actor_opt, loss, _ = averaged_update(
                self.actor_loss, carry.actor_params, carry.actor_opt, self.actor_optimizer,
                carry.critic_params, batch)
            targets = soft_update(
                (carry.target_actor_params, carry.target_critic_params),
                (actor_params, carry.critic_params), carry.hyperparams["tau"])
            carry = carry.replace(actor_params=actor_params, actor_opt=actor_opt,
                                  target_actor_params=targets[0], target_critic_params=targets[1])
            return carry, Mean(loss, jnp.ones((), jnp.float32))

        def wait(carry):
            return carry, Mean.empty()

        carry, actor_loss = jax.lax.cond(carry.updates % self.config.policy_delay == 0,
                                         delayed, wait, carry)
        return carry, {"critic": critic_loss, "actor": actor_loss}
