"""PQN: parallelised Q-learning without a replay buffer or a target network.

Gallici, Fellows, Ellis, Pou, Masmitja, Foerster and Martin 2024, "Simplifying
Deep Temporal Difference Learning", arXiv:2407.04811: many environments step
in parallel with an epsilon-greedy policy, the rollout's Q(lambda) returns
(Watkins-style lambda-returns over ``max_a Q``) are computed with the network
that acted, and a LayerNorm Q-network regresses them in epochs of minibatches,
as PPO does with its rollout. There is no buffer and no target network: the
LayerNorm keeps the bootstrapped regression stable.

Checked against CleanRL's ``cleanrl/pqn.py`` (``vwxyzjn/cleanrl``): the same
120-84 ReLU Q-network with a LayerNorm after each hidden layer (orthogonal
``sqrt(2)`` initialisation), RAdam, gradient-norm clip 10, MSE loss, epsilon from
1 to 0.05 over half the run's env steps, learning rate annealed to 0, and the
CartPole defaults (4 envs x 128 steps, 4 epochs of 4 minibatches, lambda 0.65,
500,000 env steps). Differences, on purpose:

* truncation is not termination: a step the time limit cut bootstraps from
  ``max_a Q`` of the observation it cut (``final_obs``), where CleanRL treats
  every episode end as terminal;
* device-parallel: sizes are global, each device steps ``num_envs /
  num_devices`` envs and contributes ``minibatch_size / num_devices`` samples
  to every minibatch; gradients are averaged (replicas stay bitwise equal).

The state, learning-rate schedule, traced hyperparameters and evaluation are
:class:`~jaxtrainer.algorithms.onpolicy.OnPolicyModule`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms.exploration import epsilon_greedy, linear_schedule
from jaxtrainer.algorithms.networks import QNetwork
from jaxtrainer.algorithms.onpolicy import OnPolicyConfig, OnPolicyModule, OnPolicyState
from jaxtrainer.algorithms.q_learning import q_lambda_returns
from jaxtrainer.algorithms.rollout import check_minibatch_fields, minibatch_epochs
from jaxtrainer.algorithms.torsos import torso_factory
from jaxtrainer.distributed import local_size
from jaxtrainer.distributed._gradient_step import averaged_update
from jaxtrainer.envs.base import refuse_multi_discrete
from jaxtrainer.envs.evaluation import episode_metrics
from jaxtrainer.metrics import Last

PQNState = OnPolicyState
"""PQN's training state: :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyState`
(``params`` are the Q-network's)."""


@dataclasses.dataclass(frozen=True)
class PQNConfig(OnPolicyConfig):
    """PQN's hyperparameters, CleanRL ``pqn.py``'s CartPole defaults. Sizes are
    global (over all devices). The fields of
    :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig` (no actor-critic ones)
    with PQN's defaults, plus the epochs and minibatches, Q(lambda)'s and the
    exploration schedule's.

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make` (discrete actions).
      num_envs: parallel environments, over all devices.
      num_steps: rollout length per env per update; one update consumes
        ``num_envs * num_steps`` env steps.
      update_epochs: passes over each rollout.
      num_minibatches: minibatches per epoch.
      total_updates: updates the learning rate anneals over and the exploration
        schedule is a fraction of; ``None``: the run's budget (the Trainer's).
      lr: RAdam's learning rate (the initial one when annealing), ``>= 0``.
      anneal_lr: anneal the learning rate linearly to 0 over ``total_updates``.
      gamma: discount factor.
      q_lambda: lambda of the Q(lambda) returns (0: one-step targets, 1: Monte
        Carlo returns within the rollout).
      epsilon_start, epsilon_end: exploration rate at the first env step and
        after ``exploration_fraction`` of the run's env steps.
      exploration_fraction: the fraction of ``total_updates`` (in env steps) over
        which epsilon falls linearly.
      max_grad_norm: global gradient-norm clip.
      activation: hidden activation.
      hidden_sizes: hidden layer widths of the Q-network.
      layer_norm: a LayerNorm after each hidden layer (PQN's stabiliser).
      bootstrap_truncation: a step the time limit cut bootstraps from ``max_a Q``
        of the observation it cut; ``False``: every episode end is terminal
        (CleanRL's ``pqn.py``).
      reward_scaling: rewards are multiplied by it for learning only (purejaxql's
        ``REW_SCALE``); logged episode returns are unscaled.
      normalize_observations: unused by PQN (kept ``False``; the state's
        ``obs_stats`` stays ``None``).
      eval_episodes: fresh greedy episodes per evaluation, global.
      network: the torso before the hidden layers
        (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`, e.g.
        ``{"torso": "cnn"}`` for MinAtar); no recurrent core.
    """

    max_grad_norm: float = 10.0
    activation: str = "relu"
    hidden_sizes: tuple[int, ...] = (120, 84)
    update_epochs: int = 4
    num_minibatches: int = 4
    q_lambda: float = 0.65
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_fraction: float = 0.5
    layer_norm: bool = True
    bootstrap_truncation: bool = True

    def __post_init__(self) -> None:
        """The shared checks (:class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig`'s,
        :func:`~jaxtrainer.algorithms.rollout.check_minibatch_fields`), then PQN's.

        Raises:
          ValueError: a bad field (named), a rate outside ``[0, 1]``,
            ``normalize_observations=True`` or a recurrent ``network.core``.
        """
        super().__post_init__()
        check_minibatch_fields(self)
        arguments.check_fields(self, arguments.number, (
            "q_lambda", "epsilon_start", "epsilon_end", "exploration_fraction"), low=0, high=1)
        arguments.check_fields(self, arguments.flag, ("layer_norm", "bootstrap_truncation"))
        if self.normalize_observations:
            raise arguments.field_error(self, "normalize_observations", True,
                                        ": PQN does not normalise observations (its LayerNorm "
                                        "does); leave it false")
        if self.network.core is not None:
            raise arguments.field_error(self, "network", self.network.core,
                                        ": PQN has no recurrent core; leave network.core unset",
                                        part=".core")

    @property
    def minibatch_size(self) -> int:
        """``num_envs * num_steps // num_minibatches`` (global)."""
        return self.num_envs * self.num_steps // self.num_minibatches


class PQN(OnPolicyModule):
    """PQN on a discrete-action :mod:`jaxtrainer.envs` environment.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length`` (episodes completed during the rollout), ``loss/td``
    (mean squared error to the Q(lambda) returns over the update's minibatches),
    ``q_mean`` (mean Q of the rollout's actions), ``epsilon`` and ``lr`` (this
    update's, :class:`~jaxtrainer.Last`). :meth:`evaluation_step`:
    ``eval/episode_return``, ``eval/episode_length`` of the greedy policy.

    Traced hyperparameters (``state.hyperparams``, :attr:`TUNABLE`): ``lr``,
    ``gamma``, ``q_lambda``, ``epsilon_start``, ``epsilon_end`` and
    ``max_grad_norm``.

    Args:
      config: hyperparameters; :class:`PQNConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env``.
      **overrides: replace fields of ``config``, e.g. ``PQN(num_envs=32)``.

    Raises:
      ValueError: the env's actions are not discrete (naming its action space).
    """

    config_class = PQNConfig
    _ASYMMETRIC = False  # no critic
    TUNABLE = ("lr", "gamma", "q_lambda", "epsilon_start", "epsilon_end", "max_grad_norm")

    def __init__(self, config: PQNConfig | None = None, *, env: Any = None,
                 **overrides: Any) -> None:
        super().__init__(config, env=env, **overrides)
        refuse_multi_discrete(self.env, "PQN", "Discrete(n)")
        if not self.env.discrete:
            raise ValueError(f"PQN needs discrete actions; {self.env.name} has a Box action space")

    def make_network(self) -> QNetwork:
        """The LayerNorm Q-network (:class:`~jaxtrainer.algorithms.networks.QNetwork`,
        every layer orthogonal ``sqrt(2)`` with zero bias, as CleanRL's ``layer_init``)."""
        cfg = self.config
        return QNetwork(self.env.num_actions, len(self.env.observation_shape), cfg.hidden_sizes,
                        cfg.activation,
                        torso_factory(cfg.network, self.env.observation_shape, math.sqrt(2),
                                      owner=type(self).__name__,
                                      observation_layout=self.env.observation_layout),
                        layer_norm=cfg.layer_norm, orthogonal_scale=math.sqrt(2),
                        head_scale=math.sqrt(2))

    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """Global-norm clip then RAdam (CleanRL's ``optim.RAdam``)."""
        return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                           optax.radam(learning_rate=learning_rate))

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices``.

        Raises:
          ValueError: ``num_envs``, ``eval_episodes`` or the minibatch size is not
            a multiple of ``num_devices`` (the message names the value and count).
        """
        super().validate(num_devices)
        arguments.split_over_devices("PQN", num_devices,
                                     minibatch_size=self.config.minibatch_size)

    # ---- policies ------------------------------------------------------------
    def greedy_policy(self) -> Callable[..., Any]:
        """``policy(params, obs[n, ...], key) -> int32[n]``: argmax of Q."""
        def policy(params, obs, key):
            del key
            return jnp.argmax(self.network.apply(params, obs), axis=-1).astype(jnp.int32)
        return policy

    def sample_policy(self) -> None:
        """None: the trained policy is the greedy one (exploration is epsilon's)."""
        return None

    def policy_params(self, state: PQNState) -> Any:
        return state.params

    def epsilon(self, env_steps: jax.Array, hp: dict[str, jax.Array]) -> jax.Array:
        """Exploration rate after ``env_steps`` global env steps, ``float32[]``:
        ``epsilon_start`` to ``epsilon_end`` linearly over ``exploration_fraction``
        of ``total_updates * env_steps_per_step`` env steps.

        Raises:
          ValueError: ``total_updates=None`` outside a Trainer (no budget).
        """
        if self.total_updates is None:
            raise ValueError("PQN: the exploration schedule needs the run's budget: train it "
                             "with a Trainer, or set total_updates")
        duration = self.config.exploration_fraction * self.total_updates * self.env_steps_per_step
        return linear_schedule(hp["epsilon_start"], hp["epsilon_end"], duration, env_steps)

    # ---- training ------------------------------------------------------------
    def pqn_rollout(self, state: PQNState, key: jax.Array) -> tuple[Any, jax.Array, dict]:
        """``num_steps`` epsilon-greedy steps of this device's envs in one
        ``lax.scan``; returns the env state and observations after it and the
        rollout (``obs``, ``action``, ``q_taken``, ``info``; ``[num_steps, n, ...]``)."""
        params, hp = state.params, state.hyperparams
        num_envs = state.obs.shape[0]
        before = state.update_count * self.env_steps_per_step

        def one_step(carry, xs):
            env_state, obs = carry
            t, step_key = xs
            act_key, env_key = jax.random.split(step_key)
            q = self.network.apply(params, obs)
            eps = self.epsilon(before + (t + 1) * self.config.num_envs, hp)
            action = epsilon_greedy(act_key, q, eps)
            next_obs, env_state, info = jax.vmap(self.env.step)(
                jax.random.split(env_key, num_envs), env_state, action)
            q_taken = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
            return (env_state, next_obs), (obs, action, q_taken, info)

        steps = jnp.arange(self.config.num_steps)
        (env_state, obs), (traj_obs, action, q_taken, info) = jax.lax.scan(
            one_step, (state.env_state, state.obs),
            (steps, jax.random.split(key, self.config.num_steps)))
        return env_state, obs, {"obs": traj_obs, "action": action, "q_taken": q_taken,
                                "info": info}

    def loss(self, params: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, dict]:
        """Mean squared error of ``Q(obs, action)`` to the returns (CleanRL's
        ``F.mse_loss``) on a minibatch (leaves ``[B, ...]``)."""
        q = self.network.apply(params, batch["obs"])
        q_taken = jnp.take_along_axis(q, batch["action"][:, None], axis=-1)[:, 0]
        return jnp.mean(jnp.square(q_taken - batch["target"])), {}

    def training_step(self, state: PQNState, key: jax.Array) -> tuple[PQNState, dict]:
        """One update: an epsilon-greedy rollout of every env, its Q(lambda)
        returns (one batched pass of the network over the observations after
        each step), then ``update_epochs`` x ``num_minibatches`` regression steps."""
        cfg = self.config
        rollout_key, update_key = jax.random.split(key)
        env_state, obs, traj = self.pqn_rollout(state, rollout_key)
        hp, info = state.hyperparams, traj["info"]
        next_q = jnp.max(self.network.apply(state.params, info.final_obs), axis=-1)
        ends = info.terminated if cfg.bootstrap_truncation else info.done
        reward = info.reward * jnp.asarray(cfg.reward_scaling, info.reward.dtype)
        targets = q_lambda_returns(reward, ends, info.done, next_q, hp["gamma"], hp["q_lambda"])
        size = cfg.num_steps * local_size(cfg.num_envs, "num_envs")
        batch = jax.tree.map(lambda x: x.reshape((size,) + x.shape[2:]),
                             {"obs": traj["obs"], "action": traj["action"], "target": targets})
        opt_state = self._set_optimizer_hyperparams(state.opt_state, hp, state.update_count)

        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            params, opt_state, loss, _ = averaged_update(self.loss, params, opt_state,
                                                         self.optimizer, minibatch)
            return (params, opt_state), loss

        (params, opt_state), losses = minibatch_epochs(
            minibatch_step, (state.params, opt_state), batch, update_key, cfg.update_epochs,
            cfg.num_minibatches)
        after = (state.update_count + 1) * self.env_steps_per_step
        metrics = {
            **episode_metrics(info),
            "loss/td": jnp.mean(losses),
            "q_mean": jnp.mean(traj["q_taken"]),
            "epsilon": Last.of(self.epsilon(after, hp)),
            "lr": Last.of(self._learning_rate(hp, state.update_count)),
        }
        return state.replace(params=params, opt_state=opt_state,
                             update_count=state.update_count + 1, env_state=env_state,
                             obs=obs), metrics
