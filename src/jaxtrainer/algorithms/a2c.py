"""Advantage Actor-Critic (A2C) as a :class:`jaxtrainer.Module`.

A2C is the synchronous, batched variant of A3C (Mnih et al. 2016, "Asynchronous
Methods for Deep Reinforcement Learning", arXiv:1602.01783): every update
collects ``num_steps`` steps from ``num_envs`` envs with the current policy and
takes ONE gradient step on ``-A log pi(a|s) + vf_coef (V - R)^2 / 2 - ent_coef H``
over the whole rollout, with ``n``-step returns (``gae_lambda = 1``) or GAE.

Checked against Stable-Baselines3's ``stable_baselines3/a2c/a2c.py``
(``DLR-RM/stable-baselines3``) and its RL-Zoo CartPole-v1 settings: ``num_steps =
5``, RMSprop (decay 0.99, eps 1e-5) at 7e-4, ``gae_lambda = 1``, ``vf_coef =
0.5``, ``ent_coef = 0``, gradient-norm clip 0.5, 8 envs, separate 64-64 tanh
actor and critic. It shares PPO's rollout, GAE with truncation bootstrapping,
state, schedule, evaluation and device handling
(:class:`~jaxtrainer.algorithms.onpolicy.OnPolicyModule`); only the loss
(:func:`a2c_loss`) and the single full-batch update differ. The value loss is
``0.5 * (V - R)^2`` (SB3 uses ``(V - R)^2`` with the same ``vf_coef``).
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
from jaxtrainer.algorithms.normalization import RunningStatistics
from jaxtrainer.algorithms.onpolicy import OnPolicyConfig, OnPolicyModule
from jaxtrainer.algorithms.rollout import Rollout
from jaxtrainer.distributed._gradient_step import averaged_update


@dataclasses.dataclass(frozen=True)
@composes(ActorCriticConfig, GAEConfig, ent_coef=0.0, normalize_advantages=False, gae_lambda=1.0)
class A2CConfig(OnPolicyConfig):
    """A2C hyperparameters. Sizes are global (over all devices).

    The fields of :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig` and
    the GAE fields PPO composes too (:class:`~jaxtrainer.algorithms.advantages.GAEConfig`:
    ``unroll_length``, ``gae_lambda``, ``bootstrap_truncation``, ``critic_input``) with SB3's
    RL-Zoo CartPole-v1 defaults (see the module docstring), plus ``optimizer``.

    Attributes:
      num_envs: parallel environments.
      num_steps: rollout length per env per update (``num_envs * num_steps`` env
        steps per update).
      total_updates: updates the learning rate anneals over (when ``anneal_lr``);
        ``None`` (default): the Trainer's budget (see :meth:`A2C.configure_budget`).
      lr: learning rate.
      anneal_lr: anneal it linearly to 0 over ``total_updates``.
      optimizer: ``"rmsprop"`` (decay 0.99, eps 1e-5, as A3C/SB3) or ``"adam"``.
      gamma: discount.
      gae_lambda: GAE's lambda; 1.0 gives ``n``-step returns.
      ent_coef, vf_coef: entropy bonus and value-loss coefficients.
      max_grad_norm: global gradient-norm clip.
      normalize_advantages: standardise advantages over the global batch.
      reward_scaling: rewards are multiplied by it for learning (GAE) only;
        logged episode returns are unscaled.
      activation, hidden_sizes: the actor's and critic's MLPs.
      critic_hidden_sizes: the critic's hidden widths when they differ from
        ``hidden_sizes`` (``None``: the same).
      unroll_length: GAE over segments of this many steps (as PPO's); ``None``:
        over the whole rollout.
      eval_episodes: fresh greedy episodes per evaluation.
      network: the torso before both MLPs
        (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`; default ``mlp``).
    """

    num_envs: int = 8
    num_steps: int = 5
    lr: float = 7e-4
    anneal_lr: bool = False
    optimizer: str = "rmsprop"

    def __post_init__(self) -> None:
        """The shared checks (:class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig`'s,
        :func:`~jaxtrainer.algorithms.actor_critic.check_actor_critic`,
        :func:`~jaxtrainer.algorithms.advantages.check_gae_fields`), then ``optimizer``.

        Raises:
          ValueError: a bad field, named (``optimizer`` not ``"rmsprop"``/``"adam"``).
        """
        super().__post_init__()
        check_actor_critic(self)
        check_gae_fields(self)
        arguments.check_fields(self, arguments.one_of, ("optimizer",), choices=("rmsprop", "adam"))


def a2c_loss(dist: Distribution, value: jax.Array, batch: dict[str, jax.Array],
             vf_coef: Any, ent_coef: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The advantage actor-critic loss (Mnih et al. 2016, arXiv:1602.01783,
    Algorithm S3; SB3's ``a2c.py`` ``train``)::

        total = -mean(A log pi(a|s)) + vf_coef * 0.5 * mean((V - R)^2) - ent_coef * mean(H)

    ``dist``: the policy on the batch (batch shape ``[B]``, or ``[T, B]``);
    ``value``: ``float32`` of that shape; ``batch``: ``action``, ``advantage``
    (``A``) and ``target`` (``R``) in that shape. Returns ``(total, {"policy",
    "value", "entropy"})``, all ``float32[]``."""
    policy_loss = -jnp.mean(batch["advantage"] * dist.log_prob(batch["action"]))
    value_loss = 0.5 * jnp.mean(jnp.square(value - batch["target"]))
    entropy = jnp.mean(dist.entropy())
    total = policy_loss + vf_coef * value_loss - ent_coef * entropy
    return total, {"policy": policy_loss, "value": value_loss, "entropy": entropy}


class A2C(OnPolicyModule):
    """A2C on a :mod:`jaxtrainer.envs` environment, discrete or continuous actions.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length``, ``loss/total``, ``loss/policy``, ``loss/value``,
    ``loss/entropy``, ``lr`` (the learning rate of the log interval's last update,
    :class:`~jaxtrainer.Last`). :meth:`evaluation_step`: ``eval/episode_return``,
    ``eval/episode_length`` of the greedy policy.

    Args:
      config: hyperparameters; :class:`A2CConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env``.
      **overrides: replace fields of ``config``.
    """

    config_class = A2CConfig
    TUNABLE = ("lr", "ent_coef", "vf_coef", "max_grad_norm", "gamma", "gae_lambda")
    """Hyperparameters kept in :attr:`OnPolicyState.hyperparams` (traced, tunable by PBT)."""

    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """Global-norm clip then RMSprop (decay 0.99, eps 1e-5; SB3's) or Adam."""
        if self.config.optimizer == "rmsprop":
            opt = optax.rmsprop(learning_rate, decay=0.99, eps=1e-5)
        else:
            opt = optax.adam(learning_rate, eps=1e-5)
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)

    def step_keys(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The update draws no randomness: the rollout gets the step's key as it is."""
        return key, key

    def advantages_and_targets(self, params: Any, traj: Rollout,
                               hyperparams: dict[str, jax.Array] | None = None,
                               obs_stats: RunningStatistics | None = None,
                               last_obs: jax.Array | None = None,
                               critic_obs_stats: RunningStatistics | None = None,
                               ) -> tuple[jax.Array, jax.Array]:
        """GAE as PPO's, ``float32[num_steps, num_envs_per_device]``; with
        ``normalize_advantages`` the advantages are standardised over the whole
        global batch (PPO does it per minibatch)."""
        advantages, targets = super().advantages_and_targets(params, traj, hyperparams,
                                                             obs_stats, last_obs,
                                                             critic_obs_stats)
        if self.config.normalize_advantages:
            advantages = normalize_advantages(advantages)
        return advantages, targets

    def loss(self, params: Any, batch: dict[str, jax.Array],
             hp: dict[str, jax.Array]) -> tuple[jax.Array, dict]:
        """:func:`a2c_loss` of the policy and values of ``params`` on ``batch``
        (leaves ``[B, ...]``), coefficients from ``hp``
        (:attr:`~jaxtrainer.algorithms.onpolicy.OnPolicyState.hyperparams`)."""
        dist, value, batch = self.forward(params, batch)
        return a2c_loss(dist, value, batch, hp["vf_coef"], hp["ent_coef"])

    def update(self, params: Any, opt_state: Any, batch: dict[str, jax.Array],
               hp: dict[str, jax.Array], key: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
        """One gradient step on the whole rollout (gradients averaged over devices,
        so it is the one-device step on the global batch)."""
        del key
        params, opt_state, loss, aux = averaged_update(
            self.loss, params, opt_state, self.optimizer, batch, hp)
        return params, opt_state, {"total": loss, **aux}
