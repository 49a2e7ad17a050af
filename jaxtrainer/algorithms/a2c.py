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
actor and critic. It reuses :class:`~jaxtrainer.algorithms.PPO`'s rollout, GAE
with truncation bootstrapping (F19), evaluation and device handling; only the
loss and the single full-batch update differ. The value loss is
``0.5 * (V - R)^2`` (SB3 uses ``(V - R)^2`` with the same ``vf_coef``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrainer import envs
from jaxtrainer.algorithms.networks import ActorCritic
from jaxtrainer.algorithms.ppo import PPO, PPOState, normalize_advantages
from jaxtrainer.distributed import gradient_update, local_size
from jaxtrainer.metrics import Last, Mean


@dataclasses.dataclass(frozen=True)
class A2CConfig:
    """A2C hyperparameters. Sizes are global (over all devices).

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make`.
      num_envs: parallel environments.
      num_steps: rollout length per env per update (``num_envs * num_steps`` env
        steps per update).
      total_updates: updates the learning rate anneals over (when ``anneal_lr``);
        ``None`` (default): the Trainer's budget (see :meth:`PPO.configure_budget`).
      lr: learning rate. anneal_lr: anneal it linearly to 0 over ``total_updates``.
      optimizer: ``"rmsprop"`` (decay 0.99, eps 1e-5, as A3C/SB3) or ``"adam"``.
      gamma: discount. gae_lambda: 1.0 gives ``n``-step returns.
      ent_coef, vf_coef: entropy bonus and value-loss coefficients.
      max_grad_norm: global gradient-norm clip.
      normalize_advantages: standardise advantages over the global batch.
      activation, hidden_sizes: the actor's and critic's MLPs.
      eval_episodes: fresh greedy episodes per evaluation.
    """

    env: str = "CartPole-v1"
    num_envs: int = 8
    num_steps: int = 5
    total_updates: int | None = None
    lr: float = 7e-4
    anneal_lr: bool = False
    optimizer: str = "rmsprop"
    gamma: float = 0.99
    gae_lambda: float = 1.0
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = False
    activation: str = "tanh"
    hidden_sizes: tuple[int, ...] = (64, 64)
    eval_episodes: int = 32

    # PPO's machinery reads these: one epoch of one minibatch.
    update_epochs = 1
    num_minibatches = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        for name in ("num_envs", "num_steps", "total_updates", "eval_episodes"):
            value = getattr(self, name)
            if name == "total_updates" and value is None:
                continue
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"A2CConfig.{name}={value!r}: expected a positive int")
        if self.optimizer not in ("rmsprop", "adam"):
            raise ValueError(f"A2CConfig.optimizer={self.optimizer!r}: 'rmsprop' or 'adam'")

    @property
    def minibatch_size(self) -> int:
        return self.num_envs * self.num_steps


class A2C(PPO):
    """A2C on a :mod:`jaxtrainer.envs` environment, discrete or continuous actions.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length``, ``loss/total``, ``loss/policy``, ``loss/value``,
    ``loss/entropy``, ``lr`` (the learning rate of the log interval's last update,
    :class:`~jaxtrainer.Last`). :meth:`evaluation_step`: ``eval/episode_return``,
    ``eval/episode_length`` of the greedy policy.

    Args:
      config: hyperparameters; :class:`A2CConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.
    """

    def __init__(self, config: A2CConfig | None = None, *, env: envs.Env | None = None,
                 **overrides: Any) -> None:
        config = config or A2CConfig()
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self.env = env if env is not None else envs.make(config.env)
        self.env_steps_per_step = config.num_envs * config.num_steps
        self.network = ActorCritic(
            action_dim=self.env.num_actions if self.env.discrete else self.env.action_size,
            discrete=self.env.discrete,
            obs_ndim=len(self.env.observation_shape),
            hidden_sizes=config.hidden_sizes,
            activation=config.activation,
        )
        self.optimizer = optax.inject_hyperparams(self.base_optimizer)(
            learning_rate=config.lr, max_grad_norm=config.max_grad_norm)

    TUNABLE = ("lr", "ent_coef", "vf_coef", "max_grad_norm", "gamma", "gae_lambda")
    """Hyperparameters kept in :attr:`PPOState.hyperparams` (traced, tunable by PBT)."""

    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """Global-norm clip then RMSprop (decay 0.99, eps 1e-5; SB3's) or Adam."""
        if self.config.optimizer == "rmsprop":
            opt = optax.rmsprop(learning_rate, decay=0.99, eps=1e-5)
        else:
            opt = optax.adam(learning_rate, eps=1e-5)
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)

    def validate(self, num_devices: int) -> None:
        """Raises ValueError when ``num_envs`` or ``eval_episodes`` does not split
        over ``num_devices``."""
        for name in ("num_envs", "eval_episodes"):
            value = getattr(self.config, name)
            if value % num_devices:
                raise ValueError(f"A2C: {name}={value} is not divisible by the {num_devices} "
                                 f"devices; use a multiple of {num_devices}")

    def hparams(self) -> dict[str, Any]:
        hp = dataclasses.asdict(self.config)
        hp["hidden_sizes"] = list(hp["hidden_sizes"])
        hp["total_updates"] = self.total_updates
        return hp

    def a2c_loss(self, params: Any, batch: dict[str, jax.Array],
                 hp: dict[str, jax.Array]) -> tuple[jax.Array, dict]:
        """``-mean(A log pi(a|s)) + vf_coef * 0.5 * mean((V - R)^2) - ent_coef * mean(H)``,
        coefficients from ``hp`` (:attr:`PPOState.hyperparams`)."""
        dist, value = self.network.apply(params, batch["obs"])
        policy_loss = -jnp.mean(batch["advantage"] * dist.log_prob(batch["action"]))
        value_loss = 0.5 * jnp.mean(jnp.square(value - batch["target"]))
        entropy = jnp.mean(dist.entropy())
        total = policy_loss + hp["vf_coef"] * value_loss - hp["ent_coef"] * entropy
        return total, {"policy": policy_loss, "value": value_loss, "entropy": entropy}

    def training_step(self, state: PPOState, key: jax.Array) -> tuple[PPOState, dict]:
        """A ``num_steps`` rollout of every env, then one gradient step on all of it
        (gradients averaged over devices, so it is the one-device step on the
        global batch)."""
        cfg = self.config
        env_state, obs, traj = self.rollout(state.params, state.env_state, state.obs, key)
        hp = state.hyperparams
        advantages, targets = self.advantages_and_targets(state.params, traj, hp)
        if cfg.normalize_advantages:
            advantages = normalize_advantages(advantages)
        n = cfg.num_steps * local_size(cfg.num_envs, "num_envs")
        batch = {"obs": traj.obs, "action": traj.action,
                 "advantage": jax.lax.stop_gradient(advantages),
                 "target": jax.lax.stop_gradient(targets)}
        batch = jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), batch)
        opt_state = self._set_optimizer_hyperparams(state.opt_state, hp, state.update_count)
        params, opt_state, loss, aux = gradient_update(
            self.a2c_loss, state.params, opt_state, self.optimizer, batch, hp)
        done = traj.info.done
        metrics = {
            "train/episode_return": Mean.of(traj.info.episode_return, mask=done),
            "train/episode_length": Mean.of(traj.info.episode_length, mask=done),
            "loss/total": loss, **{f"loss/{k}": v for k, v in aux.items()},
            "lr": Last.of(self._learning_rate(hp, state.update_count)),
        }
        return PPOState(params, opt_state, state.update_count + 1, env_state, obs, hp), metrics
