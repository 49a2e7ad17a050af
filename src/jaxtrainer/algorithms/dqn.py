"""Deep Q-Networks with double Q-learning as a :class:`jaxtrainer.Module`.

DQN (Mnih et al. 2015, "Human-level control through deep reinforcement learning",
Nature 518) with the double-DQN target (van Hasselt, Guez and Silver 2016, "Deep
Reinforcement Learning with Double Q-learning", arXiv:1509.06461): the online
network picks the next action, the target network values it.

Checked against CleanRL's ``cleanrl/dqn_jax.py`` (``vwxyzjn/cleanrl``) and
PureJaxRL's ``purejaxrl/dqn.py`` (``luchris429/purejaxrl``, the same algorithm
with a flashbax buffer inside ``jit``): same 120-84 ReLU Q-network, Adam, MSE
TD loss, linear epsilon schedule in env steps, target update every
``target_update_interval`` env steps with Polyak rate ``tau`` (1 = hard copy),
and the CartPole defaults (buffer 10,000, batch 128, lr 2.5e-4, learning from
10,000 env steps). Differences, on purpose:

* double-DQN target (``double=False`` gives the max-over-target-Q target of both
  references);
* truncation is not termination: stored transitions keep the observation the
  time limit cut (``final_obs``) and bootstrap from it;
* device-parallel: sizes are global, each device steps and stores
  ``num_envs / num_devices`` envs and samples ``batch_size / num_devices`` of each
  update's batch, gradients are averaged (replicas stay bitwise equal).

The collection, replay and learning loop are
:class:`~jaxtrainer.algorithms.offpolicy.OffPolicyModule`'s; DQN adds the
epsilon-greedy behaviour policy, the TD loss and the target-network update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import arguments, envs
from jaxtrainer.algorithms import env_steps, offpolicy
from jaxtrainer.algorithms.networks import QNetwork
from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.algorithms.torsos import torso_factory
from jaxtrainer.distributed.gradient_step import gradient_update
from jaxtrainer.metrics import Last


@dataclasses.dataclass(frozen=True)
class DQNConfig(offpolicy.OffPolicyConfig):
    """DQN hyperparameters. Sizes and step counts are global (over all devices).

    :class:`~jaxtrainer.algorithms.offpolicy.OffPolicyConfig`'s fields with
    CleanRL's ``dqn_jax.py`` CartPole defaults, plus the exploration schedule,
    target updates and the double-DQN switch.

    Attributes:
      env, num_envs, train_frequency, gradient_steps, buffer_size, batch_size, learning_starts: as in :class:`~jaxtrainer.algorithms.offpolicy.OffPolicyConfig`
        (CleanRL's CartPole defaults here; ``env`` with discrete actions).
      lr: Adam learning rate (the initial one with ``anneal_lr``).
      anneal_lr: anneal the learning rate linearly to 0 over the Trainer's budget
        (PureJaxRL's ``LR_LINEAR_DECAY``): the greedy policy stops drifting as the
        run ends, where a constant rate lets CartPole's Q-values forget the failure
        states its replay buffer no longer holds.
      tau: target-network Polyak rate; 1.0 copies the online network (hard update).
      target_update_interval: env steps between target updates.
      epsilon_start, epsilon_end: exploration rate at the start and after annealing.
      epsilon_anneal_steps: env steps over which epsilon moves linearly from
        ``epsilon_start`` to ``epsilon_end``.
      double: double-DQN target (online argmax, target value); ``False``: max of
        the target network.
      max_grad_norm: global gradient-norm clip (``None``: no clipping).
      hidden_sizes: Q-network hidden widths. activation: their activation.
      network: the Q-network's torso (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`;
        default ``mlp``: the flattened observation).
      eval_episodes: fresh greedy episodes per :meth:`DQN.evaluation_step`.
    """

    env: str = "CartPole-v1"
    num_envs: int = 16
    gradient_steps: int = 1
    buffer_size: int = 10_000
    batch_size: int = 128
    learning_starts: int = 10_000
    tau: float = 1.0
    hidden_sizes: tuple[int, ...] = (120, 84)
    eval_episodes: int = 32
    lr: float = 2.5e-4
    anneal_lr: bool = False
    target_update_interval: int = 1000
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_anneal_steps: int = 250_000
    double: bool = True
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        arguments.check_fields(self, arguments.positive_int, ("target_update_interval",),
                           allow_none=False)
        arguments.check_fields(self, arguments.non_negative_int, ("epsilon_anneal_steps",))
        arguments.check_fields(self, arguments.number, ("epsilon_start", "epsilon_end"), low=0, high=1)
        arguments.check_fields(self, arguments.number, ("lr",), low=0)
        arguments.check_fields(self, arguments.number, ("max_grad_norm",), low=0, low_open=True,
                           allow_none=True)
        arguments.check_fields(self, arguments.flag, ("double", "anneal_lr"))


@struct.dataclass
class DQNCarry:
    """What DQN's gradient updates carry (a ``lax.scan`` carry; the target network
    is read, and moved once per training step after them).

    Attributes:
      params, target_params: online and target Q-network parameters (replicated).
      opt_state: optax state (replicated; :func:`~jaxtrainer.algorithms.offpolicy.adam`).
      hyperparams: ``{name: float32[]}`` for every name in :attr:`DQN.TUNABLE`
        (replicated; read, never changed, by the updates).
    """

    params: Any
    target_params: Any
    opt_state: optax.OptState
    hyperparams: dict[str, jax.Array]


@struct.dataclass
class DQNState(DQNCarry):
    """Training state: the :class:`DQNCarry` fields, then

    Attributes:
      step: ``int32[]`` training steps done (replicated).
      updates: ``int32[]`` gradient updates done (replicated).
      env_state: batched env state, leading axis ``[num_envs]`` (sharded).
      obs: ``[num_envs, *observation_shape]`` (sharded).
      buffer: the replay buffer (stored transitions sharded, write index replicated).
    """

    step: jax.Array
    updates: jax.Array
    env_state: envs.EnvState
    obs: jax.Array
    buffer: Any


def td_targets(q_next_online: jax.Array, q_next_target: jax.Array, reward: jax.Array,
               terminated: jax.Array, gamma: Any, double: bool = True) -> jax.Array:
    """One-step TD targets ``float32[B]``.

    ``r + gamma * (1 - terminated) * Q_target(s', a*)`` with
    ``a* = argmax_a Q_online(s', a)`` (double DQN) or ``a* = argmax_a Q_target(s', a)``.
    ``q_next_online``, ``q_next_target``: ``float32[B, num_actions]`` at ``s'``.
    """
    picker = q_next_online if double else q_next_target
    best = jnp.argmax(picker, axis=-1)
    q_next = jnp.take_along_axis(q_next_target, best[:, None], axis=-1)[:, 0]
    return offpolicy.bootstrap(reward, terminated, gamma, q_next)


def epsilon_greedy(key: jax.Array, q_values: jax.Array, epsilon: jax.Array) -> jax.Array:
    """``int32[B]``: a uniform random action with probability ``epsilon``, else argmax."""
    explore_key, action_key = jax.random.split(key)
    greedy = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    random = jax.random.randint(action_key, greedy.shape, 0, q_values.shape[-1], jnp.int32)
    return jnp.where(jax.random.uniform(explore_key, greedy.shape) < epsilon, random, greedy)


class DQN(offpolicy.OffPolicyModule):
    """Double DQN on a discrete-action :mod:`jaxtrainer.envs` environment.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length`` (completed episodes), ``loss/td`` (mean squared TD
    error, once learning started), ``q_mean`` (mean Q of the sampled actions),
    ``epsilon`` (the exploration rate of the log interval's last step,
    :class:`~jaxtrainer.Last`).
    :meth:`evaluation_step`: ``eval/episode_return``, ``eval/episode_length`` of
    the greedy policy.

    Traced hyperparameters (``state.hyperparams``, :attr:`TUNABLE`): ``lr``,
    ``gamma``, ``tau``, ``epsilon_start`` and ``epsilon_end``. The step counts
    (``target_update_interval``, ``epsilon_anneal_steps``) stay in the config.

    Constructed as every :class:`~jaxtrainer.algorithms.offpolicy.OffPolicyModule`
    (``config`` a :class:`DQNConfig`, defaults when ``None``; ``env`` instead of
    ``make(config.env)``; ``**overrides`` replace fields of ``config``); raises
    ValueError when the env's actions are continuous or multi-discrete (one line
    naming its action space) or a size is not positive.
    """

    name = "DQN"
    config_class = DQNConfig
    discrete_actions = True
    carry_type = DQNCarry
    LOSSES = ("td", "q")
    TUNABLE = ("lr", "gamma", "tau", "epsilon_start", "epsilon_end")
    LEARNING_RATES = (("opt_state", "lr"),)

    def __init__(self, config: DQNConfig | None = None, *, env: envs.Env | str | None = None,
                 **overrides: Any) -> None:
        super().__init__(config, env=env, **overrides)
        config = self.config
        self.network = QNetwork(self.env.num_actions, len(self.env.observation_shape),
                                config.hidden_sizes, config.activation,
                                torso_factory(config.network, self.env.observation_shape,
                                              owner=type(self).__name__,
                                              observation_layout=self.env.observation_layout))
        self.optimizer = offpolicy.adam(config.lr, config.max_grad_norm)
        env_steps.check_interval(config.target_update_interval, self.env_steps_per_step,
                                 "target_update_interval")

    def epsilon(self, env_steps: jax.Array,
                hyperparams: dict[str, jax.Array] | None = None) -> jax.Array:
        """Exploration rate after ``env_steps`` global env steps, ``float32[]``:
        ``epsilon_start`` to ``epsilon_end`` linearly over ``epsilon_anneal_steps``,
        the two rates from ``hyperparams`` (the config's when ``None``)."""
        cfg = self.config
        return offpolicy.linear_schedule(offpolicy.hyperparam(cfg, hyperparams, "epsilon_start"),
                                         offpolicy.hyperparam(cfg, hyperparams, "epsilon_end"),
                                         cfg.epsilon_anneal_steps, env_steps)

    # ---- policies -----------------------------------------------------------
    def explore(self, state: DQNState, obs: jax.Array, key: jax.Array) -> jax.Array:
        q = self.network.apply(state.params, obs)
        return epsilon_greedy(key, q, self.epsilon(self.env_steps_before(state.step),
                                                   state.hyperparams))

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        def policy(params, obs, key):
            del key
            return jnp.argmax(self.network.apply(params, obs), axis=-1).astype(jnp.int32)
        return policy

    def policy_params(self, state: DQNState) -> Any:
        return state.params

    # ---- Module -------------------------------------------------------------
    def init_state(self, key: jax.Array,
                   hyperparams: dict[str, jax.Array] | None = None) -> DQNState:
        """Online and target parameters equal (replicated); envs and buffer per device.
        ``hyperparams``: the state's :attr:`TUNABLE` values, ``{name: float32[]}``
        (``None``: :meth:`initial_hyperparams`); the optimizers' learning rates
        are set from them (:meth:`apply_hyperparams`)."""
        hp = self.initial_hyperparams() if hyperparams is None else dict(hyperparams)
        params_key, env_key = jax.random.split(key)
        params = self.network.init(params_key, jnp.zeros(self.env.observation_shape,
                                                         self.env.observation_dtype))
        env_state, obs, buffer = self.init_envs(env_key)
        zero = jnp.zeros((), jnp.int32)
        return self.apply_hyperparams(DQNState(
            params=params, target_params=jax.tree.map(jnp.copy, params),
            opt_state=self.optimizer.init(params), hyperparams=hp, step=zero, updates=zero,
            env_state=env_state, obs=obs, buffer=buffer))

    def loss(self, params: Any, target_params: Any, batch: Transition,
             hyperparams: dict[str, jax.Array] | None = None) -> tuple[jax.Array, dict]:
        """Mean squared TD error on ``batch`` (leaves ``[B, ...]``) and the mean Q;
        ``gamma`` from ``hyperparams`` (the config's when ``None``)."""
        q = self.network.apply(params, batch.obs)
        q_taken = jnp.take_along_axis(q, batch.action[:, None].astype(jnp.int32), axis=-1)[:, 0]
        q_next_target = self.network.apply(target_params, batch.next_obs)
        q_next_online = (self.network.apply(params, batch.next_obs) if self.config.double
                         else q_next_target)
        target = jax.lax.stop_gradient(td_targets(
            q_next_online, q_next_target, batch.reward, batch.terminated,
            offpolicy.hyperparam(self.config, hyperparams, "gamma"), self.config.double))
        return jnp.mean(jnp.square(q_taken - target)), {"q": jnp.mean(q_taken)}

    def update(self, carry: DQNCarry, key: jax.Array, buffer: Any) -> tuple[DQNCarry, dict]:
        """One TD update on a batch sampled from ``buffer`` with ``key``."""
        batch = self.buffer.sample(buffer, key)
        params, opt_state, loss, aux = gradient_update(
            self.loss, carry.params, carry.opt_state, self.optimizer, carry.target_params, batch,
            carry.hyperparams)
        return carry.replace(params=params, opt_state=opt_state), {"td": loss, "q": aux["q"]}

    def after_learning(self, state: DQNState, new_state: DQNState,
                       losses: dict) -> tuple[DQNState, dict]:
        """The target update when a multiple of ``target_update_interval`` env steps
        was crossed during this step; metrics ``loss/td``, ``q_mean``, ``epsilon``."""
        cfg = self.config
        before = self.env_steps_before(state.step)
        crossed = env_steps.crossed(state.step, cfg.target_update_interval,
                                    self.env_steps_per_step)
        hp = state.hyperparams
        target_params = jax.tree.map(
            lambda new, old: jnp.where(crossed, new, old),
            offpolicy.soft_update(state.target_params, new_state.params, hp["tau"]),
            state.target_params)
        q_mean = losses.pop("loss/q")
        metrics = {**losses, "q_mean": q_mean, "epsilon": Last.of(self.epsilon(before, hp))}
        return new_state.replace(target_params=target_params), metrics
