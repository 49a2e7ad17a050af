"""Proximal Policy Optimization as a :class:`jaxtrainer.Module`.

PPO with the clipped surrogate objective (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms", arXiv:1707.06347) and generalized advantage estimation
(Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", arXiv:1506.02438).

Checked against PureJaxRL's single-file PPO (``luchris429/purejaxrl``,
``purejaxrl/ppo.py``): same network layout and initialisation, same
hyperparameter defaults, same clipped value loss, per-minibatch advantage
normalisation and linearly annealed Adam. Differences, on purpose:

* truncation is not termination: gymnax 1.x reports both, and for a transition
  cut by the time limit the GAE target bootstraps from ``V(final_obs)``, the
  value of the observation the episode reached;
* device-parallel: sizes are global, each device collects
  ``num_envs / num_devices`` envs, advantages are normalised with global
  statistics and gradients are averaged over devices
  (:func:`jaxtrainer.distributed.averaged_update`), so an update is the
  one-device update on the same global minibatch and replicas stay bitwise
  equal;
* the learning rate stays at 0 after ``total_updates`` instead of going negative;
* the training loop, devices, logging and evaluation live outside the module.

One ``training_step`` (:meth:`~jaxtrainer.algorithms.onpolicy.OnPolicyModule.training_step`,
shared with A2C) is one PPO update, in order:

1. a ``num_steps`` rollout of all envs in one ``lax.scan``
   (:func:`jaxtrainer.algorithms.rollout.unroll`);
2. GAE advantages and value targets in a reverse ``lax.scan``
   (:func:`jaxtrainer.algorithms.advantages.compute_gae`);
3. :meth:`PPO.update`: ``update_epochs`` epochs of ``num_minibatches`` shuffled
   minibatches (:func:`jaxtrainer.algorithms.rollout.minibatch_epochs`), each
   advantage-standardised
   (:func:`jaxtrainer.algorithms.advantages.normalize_advantages`) and one
   gradient step on :func:`ppo_loss`.

The reading set and a walk through it: ``docs/guides/read-an-algorithm.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms._config_parts import composes
from jaxtrainer.algorithms.actor_critic import ActorCriticConfig, check_actor_critic
from jaxtrainer.algorithms.advantages import GAEConfig, check_gae_fields, normalize_advantages
from jaxtrainer.algorithms.distributions import Distribution
from jaxtrainer.algorithms.onpolicy import OnPolicyConfig, OnPolicyModule, OnPolicyState
from jaxtrainer.algorithms.rollout import (
    check_minibatch_fields,
    minibatch_advantage_moments,
    minibatch_epochs,
)
from jaxtrainer.distributed._gradient_step import averaged_update

PPOState = OnPolicyState
"""PPO's training state: :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyState`."""


@dataclasses.dataclass(frozen=True)
@composes(ActorCriticConfig, GAEConfig)
class PPOConfig(OnPolicyConfig):
    """PPO hyperparameters. Sizes are global (over all devices).

    The fields and defaults of :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig`
    (PureJaxRL's CartPole PPO), documented there unless PPO's use needs more
    words, plus the minibatch, GAE and clipping ones.

    Attributes:
      lr: Adam learning rate (initial one when annealing).
      max_grad_norm: global gradient-norm clip; ``float('inf')`` (YAML ``.inf``): none,
        as Brax's PPO by default.
      normalize_advantages: standardise advantages per minibatch (global mean and
        standard deviation over all devices' minibatch shares).
      update_epochs: passes over each rollout.
      num_minibatches: minibatches per epoch; the global minibatch size
        ``num_envs * num_steps / num_minibatches`` must split over the devices.
      unroll_length: GAE runs over segments of this many steps, each bootstrapped
        from the value where it ends, as Brax's PPO computes it per unroll;
        ``None`` (default): over the whole rollout (PureJaxRL's). ``num_steps``
        must be a multiple of it.
      gae_lambda: GAE's lambda. With 1.0 the advantages are ``n``-step returns.
      bootstrap_truncation: a transition cut by the time limit bootstraps from
        ``V(final_obs)`` (the critic values the final observations of the
        rollout's last step and of its truncated steps). ``False``: PureJaxRL's
        terminal-only bootstrapping, every episode end (time limit included) is
        terminal and only the observations after the rollout are valued; faster,
        biased on time-limited tasks.
      critic_input: what the critic reads. ``"observation"`` (default): each
        env's own observation, as the actor. ``"global_state"``: a centralised
        critic (MAPPO: Yu et al. 2022, "The Surprising Effectiveness of PPO in
        Cooperative Multi-Agent Games", arXiv:2103.01955) on each env's critic
        input from the env (a multi-agent env seen through
        :class:`~jaxtrainer.envs.AgentsAsEnvs`: its game's global state and its
        agent's one-hot id), while the actor reads the agent's own
        observation. Needs a feedforward network on flat inputs (``network``'s
        default ``mlp`` torso, no core) and ``normalize_observations=False``.
      clip_eps: PPO ratio clip (and value clip) epsilon.
      clip_value_loss: PureJaxRL's clipped value loss
        ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, +-clip_eps) - R)^2)``;
        ``False`` uses ``0.5 * (V - R)^2``.
    """

    update_epochs: int = 4
    num_minibatches: int = 4
    clip_eps: float = 0.2
    clip_value_loss: bool = True

    def __post_init__(self) -> None:
        """The shared checks (:class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig`'s,
        :func:`check_actor_critic`, :func:`check_minibatch_fields`,
        :func:`check_gae_fields`), then the clipping fields and the minibatch split.

        Raises:
          ValueError: a bad field (named), or ``num_envs * num_steps`` not
            divisible by ``num_minibatches``.
        """
        super().__post_init__()
        check_actor_critic(self)
        check_minibatch_fields(self)
        check_gae_fields(self)
        arguments.check_fields(self, arguments.number, ("clip_eps",), low=0)
        arguments.check_fields(self, arguments.flag, ("clip_value_loss",))
        if self.network.core is not None:
            if self.num_envs % self.num_minibatches:
                raise ValueError(
                    f"PPOConfig: with network.core={self.network.core!r} a minibatch is whole "
                    f"sequences of num_envs / num_minibatches envs: num_envs={self.num_envs} is "
                    f"not divisible by num_minibatches={self.num_minibatches}")
            return
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ValueError(
                f"PPOConfig: num_envs * num_steps = {self.num_envs} * {self.num_steps} = {batch} "
                f"is not divisible by num_minibatches={self.num_minibatches}")

    @property
    def minibatch_size(self) -> int:
        """Global minibatch size: ``num_envs * num_steps // num_minibatches`` samples."""
        return self.num_envs * self.num_steps // self.num_minibatches


def ppo_loss(dist: Distribution, value: jax.Array, batch: dict[str, jax.Array],
             clip_eps: Any, vf_coef: Any, ent_coef: Any, clip_value_loss: bool = True,
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The clipped surrogate objective (Schulman et al. 2017, arXiv:1707.06347,
    eq. 7) with PureJaxRL's clipped value loss (``purejaxrl/ppo.py``, ``_loss_fn``)
    and an entropy bonus::

        r     = exp(log pi(a|s) - log pi_old(a|s))
        total = -mean(min(r A, clip(r, 1 - clip_eps, 1 + clip_eps) A))
                + vf_coef * value_loss - ent_coef * mean(H)

    ``value_loss = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, +-clip_eps)
    - R)^2))``, or ``0.5 * mean((V - R)^2)`` without ``clip_value_loss``.

    Args:
      dist: the current policy on the minibatch (batch shape ``[B]``, or
        ``[T, B]`` for sequences); ``value``: ``float32`` of the same shape.
      batch: ``action``, ``log_prob`` (``pi_old``), ``value`` (``V_old``),
        ``advantage`` (``A``), ``target`` (``R``), ``float32`` in ``value``'s shape;
        optionally ``key``, the entropy's sample key (a tanh-squashed policy).
      clip_eps, vf_coef, ent_coef: ``float32[]`` (traced) or floats.

    Returns:
      ``(total, {"policy", "value", "entropy", "approx_kl"})``, all ``float32[]``;
      ``approx_kl = mean((r - 1) - log r)``.
    """
    log_prob = dist.log_prob(batch["action"])
    log_ratio = log_prob - batch["log_prob"]
    ratio = jnp.exp(log_ratio)
    adv = batch["advantage"]
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
    policy_loss = -jnp.mean(surrogate)

    value_err = jnp.square(value - batch["target"])
    if clip_value_loss:
        clipped = batch["value"] + jnp.clip(value - batch["value"], -clip_eps, clip_eps)
        value_err = jnp.maximum(value_err, jnp.square(clipped - batch["target"]))
    value_loss = 0.5 * jnp.mean(value_err)

    entropy = jnp.mean(dist.entropy(batch.get("key")))
    total = policy_loss + vf_coef * value_loss - ent_coef * entropy
    approx_kl = jnp.mean((ratio - 1.0) - log_ratio)
    return total, {"policy": policy_loss, "value": value_loss, "entropy": entropy,
                   "approx_kl": approx_kl}


class PPO(OnPolicyModule):
    """PPO on a :mod:`jaxtrainer.envs` environment, discrete or continuous actions.

    The rollout, GAE and state are
    :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyModule`'s; PPO adds the
    clipped-surrogate loss (:func:`ppo_loss`) and its epochs of minibatch steps
    (:meth:`update`).

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length`` (:class:`~jaxtrainer.metrics.Mean` over the episodes
    completed during the rollout), ``loss/total``, ``loss/policy``,
    ``loss/value``, ``loss/entropy``, ``loss/approx_kl`` (means over the update's
    minibatches; approx_kl is ``E[(r - 1) - log r]``), ``lr`` (the learning rate of
    the log interval's last update, :class:`~jaxtrainer.Last`). :meth:`evaluation_step`:
    ``eval/episode_return``, ``eval/episode_length`` of the greedy policy.

    Args:
      config: hyperparameters; :class:`PPOConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env`` (an environment name).
      **overrides: replace fields of ``config``, e.g. ``PPO(num_envs=8)``.
        With ``total_updates=None`` (default) the learning rate anneals over the
        Trainer's budget (:meth:`configure_budget`).
    """

    config_class = PPOConfig
    TUNABLE = ("lr", "ent_coef", "vf_coef", "clip_eps", "max_grad_norm", "gamma", "gae_lambda")
    """Hyperparameters kept in :attr:`PPOState.hyperparams` (traced, tunable by PBT)."""

    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """Global-norm clip then Adam (eps 1e-5, PureJaxRL's), for
        ``optax.inject_hyperparams``."""
        return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                           optax.adam(learning_rate=learning_rate, eps=1e-5))

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices``, before compiling.

        Raises:
          ValueError: ``num_envs``, ``eval_episodes`` or the minibatch size is not
            a multiple of ``num_devices`` (the message names the value and count).
        """
        super().validate(num_devices)
        cfg = self.config
        if self.recurrent:
            envs_per_minibatch = cfg.num_envs // cfg.num_minibatches
            if envs_per_minibatch % num_devices:
                raise ValueError(
                    f"PPO: a minibatch's envs, num_envs/num_minibatches = {cfg.num_envs}/"
                    f"{cfg.num_minibatches} = {envs_per_minibatch}, are not divisible by the "
                    f"{num_devices} devices (a recurrent core trains on whole sequences); "
                    "change num_envs or num_minibatches")
            return
        if cfg.minibatch_size % num_devices:
            raise ValueError(
                f"PPO: minibatch size num_envs*num_steps/num_minibatches = {cfg.num_envs}*"
                f"{cfg.num_steps}/{cfg.num_minibatches} = {cfg.minibatch_size} is not divisible "
                f"by the {num_devices} devices; change num_envs, num_steps or num_minibatches")

    def loss(self, params: Any, batch: dict[str, jax.Array],
             hp: dict[str, jax.Array]) -> tuple[jax.Array, dict]:
        """:func:`ppo_loss` of the policy and values of ``params`` on a minibatch
        (leaves ``[B, ...]``; with a recurrent core whole sequences,
        :meth:`~jaxtrainer.algorithms.onpolicy.OnPolicyModule.forward`),
        coefficients from ``hp``."""
        dist, value, batch = self.forward(params, batch)
        return ppo_loss(dist, value, batch, hp["clip_eps"], hp["vf_coef"], hp["ent_coef"],
                        self.config.clip_value_loss)

    def update(self, params: Any, opt_state: Any, batch: dict[str, jax.Array],
               hp: dict[str, jax.Array], key: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
        """``update_epochs`` x ``num_minibatches`` clipped-surrogate gradient steps.

        Each device shuffles its own share of the rollout every epoch and
        contributes ``minibatch_size / num_devices`` samples to every global
        minibatch; advantage statistics and gradients are global. With a
        recurrent core the shuffled units are envs, so sequences stay whole
        (``num_envs / num_minibatches`` envs a minibatch, as PureJaxRL's
        ``ppo_rnn.py`` and sb3-contrib's RecurrentPPO). Returns the
        losses as ``float32[update_epochs, num_minibatches]``.
        """
        cfg = self.config

        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            minibatch = dict(minibatch)
            moments = minibatch.pop("advantage_moments", None)
            if cfg.normalize_advantages:
                minibatch["advantage"] = normalize_advantages(minibatch["advantage"],
                                                              moments=moments)
            params, opt_state, loss, aux = averaged_update(
                self.loss, params, opt_state, self.optimizer, minibatch, hp)
            return (params, opt_state), {"total": loss, **aux}

        def extra(epoch_key):
            out = {}
            if self.network.tanh_normal:  # Brax's entropy: one sample per minibatch
                out["key"] = jax.random.split(jax.random.fold_in(epoch_key, 1),
                                              cfg.num_minibatches)
            moments = (minibatch_advantage_moments(batch["advantage"], epoch_key,
                                                   cfg.num_minibatches)
                       if cfg.normalize_advantages else None)
            if moments is not None:  # over devices: one all-reduce an epoch
                out["advantage_moments"] = moments
            return out

        (params, opt_state), losses = minibatch_epochs(
            minibatch_step, (params, opt_state), batch, key, cfg.update_epochs,
            cfg.num_minibatches, extra)
        return params, opt_state, losses
