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

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms import env_steps, offpolicy
from jaxtrainer.algorithms.exploration import epsilon_greedy, linear_schedule
from jaxtrainer.algorithms.hyperparams import adam, hyperparam
from jaxtrainer.algorithms.networks import QNetwork
from jaxtrainer.algorithms.offpolicy_config import OffPolicyConfig
from jaxtrainer.algorithms.q_learning import (
    bootstrap,
    categorical_projection,
    greedy_next,
    n_step_transition,
    quantile_huber_loss,
    td_targets,
    weighted_mean,
)
from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.algorithms.target_update import soft_update
from jaxtrainer.algorithms.torsos import torso_factory
from jaxtrainer.distributed._gradient_step import averaged_update
from jaxtrainer.metrics import Last

_DISTRIBUTIONAL = ("c51", "qr")
"""The return distributions :class:`DQN` learns besides the expected value."""


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """DQN hyperparameters. Sizes and step counts are global (over all devices).

    :class:`~jaxtrainer.algorithms.offpolicy_config.OffPolicyConfig`'s fields with
    CleanRL's ``dqn_jax.py`` CartPole defaults, plus the exploration schedule,
    target updates and the double-DQN switch.

    Attributes:
      env, num_envs, train_frequency, gradient_steps, buffer_size, batch_size, learning_starts: as in :class:`~jaxtrainer.algorithms.offpolicy_config.OffPolicyConfig`
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
      adam_eps: Adam's epsilon (``None``: optax's 1e-8; CleanRL's C51: ``0.01 / batch_size``).
      n_step: the TD target sums this many rewards before bootstrapping
        (multi-step returns, Sutton 1988; Rainbow's, Hessel et al. 2018,
        arXiv:1710.02298), stopping at an episode's end; the buffer samples
        runs of ``n_step`` consecutive transitions of one env. Needs
        ``learning_starts >= n_step * num_envs``.
      dueling: a dueling Q-network (value and advantage heads, Wang et al. 2016;
        :class:`~jaxtrainer.algorithms.networks.QNetwork`).
      distributional: ``None`` (expected values, DQN) or ``"c51"``: a categorical
        return distribution on ``num_atoms`` evenly spaced atoms in
        ``[v_min, v_max]``, trained by cross-entropy to the projected target
        distribution (Bellemare, Dabney and Munos 2017, "A Distributional
        Perspective on Reinforcement Learning", arXiv:1707.06887, Algorithm 1;
        CleanRL's ``c51_jax.py``). Or ``"qr"``: QR-DQN (Dabney et al. 2018,
        "Distributional Reinforcement Learning with Quantile Regression",
        arXiv:1710.10044): ``num_atoms`` quantiles of the return at the
        midpoints ``(2i + 1) / 2N``, trained by the quantile Huber loss (Eq. 10,
        ``huber_kappa``) to the target's quantiles. Actions are greedy in the
        expected value (the mean of the atoms or quantiles).
      num_atoms, v_min, v_max: C51's support (CleanRL's CartPole: 101 atoms in
        ``[-100, 100]``); with ``"qr"`` the number of quantiles (the paper's
        Atari: 200), ``v_min``/``v_max`` unused.
      huber_kappa: QR-DQN's Huber threshold kappa (the paper's: 1).
      prioritised: prioritised replay (Schaul et al. 2016, "Prioritized
        Experience Replay", arXiv:1511.05952, proportional; flashbax's
        prioritised buffer, :class:`~jaxtrainer.algorithms.replay.ReplayBuffer`):
        a transition is sampled with probability ``p^alpha / sum p^alpha``, its
        priority ``p`` its last loss (``|TD error|``; C51's cross-entropy and
        QR-DQN's quantile loss, as Rainbow's KL, Hessel et al. 2018) plus
        ``priority_epsilon``, and each sample's loss is weighted by
        ``(min_j P(j) / P(i))^beta`` (the importance weight normalised by the
        batch's largest).
      priority_exponent: ``alpha`` (Schaul et al.'s 0.6; Rainbow: 0.5).
      importance_exponent: ``beta`` at the start, annealed linearly to 1 over
        the Trainer's budget in env steps (Schaul et al.: 0.4; Rainbow: 0.4);
        outside a Trainer it stays at this value.
      priority_epsilon: added to every priority so no transition stops being
        sampled (Schaul et al.: a small positive constant).
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
    adam_eps: float | None = None
    n_step: int = 1
    dueling: bool = False
    distributional: str | None = None
    num_atoms: int = 101
    v_min: float = -100.0
    v_max: float = 100.0
    huber_kappa: float = 1.0
    prioritised: bool = False
    priority_exponent: float = 0.6
    importance_exponent: float = 0.4
    priority_epsilon: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        arguments.check_fields(self, arguments.positive_int, ("target_update_interval",),
                           allow_none=False)
        arguments.check_fields(self, arguments.non_negative_int, ("epsilon_anneal_steps",))
        arguments.check_fields(self, arguments.number, ("epsilon_start", "epsilon_end"), low=0, high=1)
        arguments.check_fields(self, arguments.number, ("lr",), low=0)
        arguments.check_fields(self, arguments.number, ("max_grad_norm",), low=0, low_open=True,
                           allow_none=True)
        arguments.check_fields(self, arguments.flag, ("double", "anneal_lr", "dueling",
                                                      "prioritised"))
        arguments.check_fields(self, arguments.number, ("priority_exponent",), low=0)
        arguments.check_fields(self, arguments.number, ("importance_exponent",), low=0, high=1)
        arguments.check_fields(self, arguments.number, ("priority_epsilon",), low=0,
                               low_open=True)
        arguments.check_fields(self, arguments.number, ("adam_eps",), low=0, low_open=True,
                               allow_none=True)
        if self.distributional is not None:
            arguments.check_fields(self, arguments.one_of, ("distributional",),
                                   choices=_DISTRIBUTIONAL)
        arguments.check_fields(self, arguments.positive_int, ("num_atoms", "n_step"),
                               allow_none=False)
        if self.n_step > 1 and self.learning_starts < self.n_step * self.num_envs:
            raise ValueError(f"{type(self).__name__}: n_step={self.n_step} samples runs of "
                             f"{self.n_step} transitions per env: learning_starts="
                             f"{self.learning_starts} must be at least n_step * num_envs = "
                             f"{self.n_step * self.num_envs}")
        arguments.check_fields(self, arguments.number, ("v_min", "v_max"))
        arguments.check_fields(self, arguments.number, ("huber_kappa",), low=0, low_open=True)
        if self.distributional == "qr" and self.num_atoms < 2:
            raise ValueError(f"{type(self).__name__}: QR-DQN needs num_atoms >= 2 quantiles; "
                             f"got num_atoms={self.num_atoms}")
        if self.distributional == "c51" and not (self.num_atoms >= 2 and self.v_min < self.v_max):
            raise ValueError(f"{type(self).__name__}: C51 needs num_atoms >= 2 and v_min < v_max; "
                             f"got num_atoms={self.num_atoms}, v_min={self.v_min}, "
                             f"v_max={self.v_max}")


@struct.dataclass
class DQNCarry:
    """What DQN's gradient updates carry (a ``lax.scan`` carry; the target network
    is read, and moved once per training step after them).

    Attributes:
      params, target_params: online and target Q-network parameters (replicated).
      opt_state: optax state (replicated; :func:`~jaxtrainer.algorithms.hyperparams.adam`).
      hyperparams: ``{name: float32[]}`` for every name in :attr:`DQN.TUNABLE`
        (replicated; read, never changed, by the updates).
    """

    params: Any
    target_params: Any
    opt_state: optax.OptState
    hyperparams: dict[str, jax.Array]


@struct.dataclass
class PrioritisedDQNCarry(DQNCarry):
    """:class:`DQNCarry` with the replay buffer, whose priorities the updates
    set (``prioritised``)."""

    buffer: Any


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
        self.atoms = (jnp.linspace(config.v_min, config.v_max, config.num_atoms,
                                   dtype=jnp.float32)
                      if config.distributional == "c51" else None)
        self.quantiles = config.distributional == "qr"
        if config.prioritised:
            self.carry_type = PrioritisedDQNCarry
        self.network = QNetwork(self.env.num_actions, len(self.env.observation_shape),
                                config.hidden_sizes, config.activation,
                                torso_factory(config.network, self.env.observation_shape,
                                              owner=type(self).__name__,
                                              observation_layout=self.env.observation_layout),
                                num_atoms=config.num_atoms if config.distributional else 1,
                                dueling=config.dueling)
        self.optimizer = adam(config.lr, config.max_grad_norm, config.adam_eps)
        env_steps.check_interval(config.target_update_interval, self.env_steps_per_step,
                                 "target_update_interval")

    def epsilon(self, env_steps: jax.Array,
                hyperparams: dict[str, jax.Array] | None = None) -> jax.Array:
        """Exploration rate after ``env_steps`` global env steps, ``float32[]``:
        ``epsilon_start`` to ``epsilon_end`` linearly over ``epsilon_anneal_steps``,
        the two rates from ``hyperparams`` (the config's when ``None``)."""
        cfg = self.config
        return linear_schedule(hyperparam(cfg, hyperparams, "epsilon_start"),
                               hyperparam(cfg, hyperparams, "epsilon_end"),
                               cfg.epsilon_anneal_steps, env_steps)

    # ---- values -------------------------------------------------------------
    def logits(self, params: Any, obs: jax.Array) -> jax.Array:
        """The return distributions of ``obs[B, ...]``, ``float32[B,
        num_actions, num_atoms]``: C51's logits, or QR-DQN's quantiles."""
        out = self.network.apply(params, obs)
        return out.reshape(out.shape[:-1] + (self.env.num_actions, self.config.num_atoms))

    def q_values(self, params: Any, obs: jax.Array) -> jax.Array:
        """Action values ``float32[B, num_actions]`` of ``obs[B, ...]``: the
        network's outputs, or with C51 the means of its return distributions."""
        if self.quantiles:
            return jnp.mean(self.logits(params, obs), axis=-1)
        if self.atoms is None:
            return self.network.apply(params, obs)
        return jnp.sum(jax.nn.softmax(self.logits(params, obs), axis=-1) * self.atoms, axis=-1)

    # ---- policies -----------------------------------------------------------
    def explore(self, state: DQNState, obs: jax.Array, key: jax.Array) -> jax.Array:
        q = self.q_values(state.params, obs)
        return epsilon_greedy(key, q, self.epsilon(self.env_steps_before(state.step),
                                                   state.hyperparams))

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        def policy(params, obs, key):
            del key
            return jnp.argmax(self.q_values(params, obs), axis=-1).astype(jnp.int32)
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
             hyperparams: dict[str, jax.Array] | None = None,
             weights: jax.Array | None = None) -> tuple[jax.Array, dict]:
        """Mean squared TD error on ``batch`` (leaves ``[B, ...]``; with
        ``n_step`` runs ``[B, n_step, ...]``, :func:`n_step_transition`) and the
        mean Q (with C51 :meth:`c51_loss`, with QR-DQN :meth:`qr_loss`);
        ``gamma`` from ``hyperparams`` (the config's when ``None``). With
        ``weights: float32[B]`` (prioritised replay's importance weights) the
        mean is weighted. The auxiliary dict holds ``q`` and ``priority``,
        ``float32[B]``: each sample's ``|TD error|`` (C51: its cross-entropy;
        QR-DQN: its quantile loss)."""
        if self.atoms is not None:
            return self.c51_loss(params, target_params, batch, hyperparams, weights)
        if self.quantiles:
            return self.qr_loss(params, target_params, batch, hyperparams, weights)
        batch, gamma = self.discounted(batch, hyperparams)
        q = self.network.apply(params, batch.obs)
        q_taken = jnp.take_along_axis(q, batch.action[:, None].astype(jnp.int32), axis=-1)[:, 0]
        q_next_target = self.network.apply(target_params, batch.next_obs)
        q_next_online = (self.network.apply(params, batch.next_obs) if self.config.double
                         else q_next_target)
        target = jax.lax.stop_gradient(td_targets(
            q_next_online, q_next_target, batch.reward, batch.terminated, gamma,
            self.config.double))
        error = q_taken - target
        return weighted_mean(jnp.square(error), weights), {
            "q": jnp.mean(q_taken), "priority": jax.lax.stop_gradient(jnp.abs(error))}

    def discounted(self, batch: Transition, hyperparams: dict[str, jax.Array] | None = None,
                   ) -> tuple[Transition, jax.Array]:
        """``(transitions [B, ...], discount of their bootstrap value)``: the
        batch and ``gamma`` as they are, or with ``n_step > 1`` the sampled runs
        folded into n-step transitions (:func:`n_step_transition`)."""
        gamma = hyperparam(self.config, hyperparams, "gamma")
        if self.config.n_step == 1:
            return batch, gamma
        return n_step_transition(batch, gamma)

    def c51_loss(self, params: Any, target_params: Any, batch: Transition,
                 hyperparams: dict[str, jax.Array] | None = None,
                 weights: jax.Array | None = None) -> tuple[jax.Array, dict]:
        """C51's loss on ``batch``: the cross-entropy of the taken action's
        distribution to the projected target distribution
        (:func:`categorical_projection`) of the next action's, picked greedily
        by the online network's means (``double``) or the target network's
        (CleanRL's ``c51_jax.py``); and the taken actions' mean values."""
        batch, gamma = self.discounted(batch, hyperparams)
        action = batch.action[:, None].astype(jnp.int32)
        logits = jnp.take_along_axis(self.logits(params, batch.obs), action[..., None], axis=1)[:, 0]
        next_pmfs = jax.nn.softmax(self.logits(target_params, batch.next_obs), axis=-1)
        picker = (self.q_values(params, batch.next_obs) if self.config.double
                  else jnp.sum(next_pmfs * self.atoms, axis=-1))
        next_pmf = greedy_next(picker, next_pmfs)
        target = jax.lax.stop_gradient(categorical_projection(
            next_pmf, batch.reward, batch.terminated, gamma, self.atoms))
        cross_entropy = -jnp.sum(target * jax.nn.log_softmax(logits, axis=-1), axis=-1)
        q_taken = jnp.sum(jax.nn.softmax(logits, axis=-1) * self.atoms, axis=-1)
        return weighted_mean(cross_entropy, weights), {
            "q": jnp.mean(q_taken), "priority": jax.lax.stop_gradient(cross_entropy)}

    def qr_loss(self, params: Any, target_params: Any, batch: Transition,
                hyperparams: dict[str, jax.Array] | None = None,
                weights: jax.Array | None = None) -> tuple[jax.Array, dict]:
        """QR-DQN's loss on ``batch``: :func:`quantile_huber_loss` of the taken
        action's quantiles to ``r + discount (1 - terminated) theta'`` with
        ``theta'`` the target network's quantiles of the next action, picked
        greedily by the online network's means (``double``) or the target
        network's (the paper's Algorithm 1); and the taken actions' mean values."""
        batch, gamma = self.discounted(batch, hyperparams)
        action = batch.action[:, None, None].astype(jnp.int32)
        theta = jnp.take_along_axis(self.logits(params, batch.obs), action, axis=1)[:, 0]
        next_theta = self.logits(target_params, batch.next_obs)
        picker = (self.q_values(params, batch.next_obs) if self.config.double
                  else jnp.mean(next_theta, axis=-1))
        next_theta = greedy_next(picker, next_theta)
        discount = jnp.broadcast_to(jnp.asarray(gamma, theta.dtype), batch.reward.shape)
        target = jax.lax.stop_gradient(bootstrap(
            batch.reward[:, None], batch.terminated[:, None], discount[:, None], next_theta))
        loss = quantile_huber_loss(theta, target, self.config.huber_kappa)
        return weighted_mean(loss, weights), {
            "q": jnp.mean(theta), "priority": jax.lax.stop_gradient(loss)}

    def update(self, carry: DQNCarry, key: jax.Array, buffer: Any) -> tuple[DQNCarry, dict]:
        """One TD update on a batch sampled from ``buffer`` with ``key``; with
        ``prioritised`` from the carry's buffer by priority, the loss weighted
        by :meth:`importance_weights` and the batch's priorities set after."""
        if self.config.prioritised:
            return self.prioritised_update(carry, key)
        return super().update(carry, key, buffer)

    def update_batch(self, carry: DQNCarry, keys: None, batch: Transition) -> tuple[DQNCarry, dict]:
        """One TD update on ``batch`` (uniform replay; no ``keys``: its key samples)."""
        params, opt_state, loss, aux = averaged_update(
            self.loss, carry.params, carry.opt_state, self.optimizer, carry.target_params, batch,
            carry.hyperparams)
        return carry.replace(params=params, opt_state=opt_state), {"td": loss, "q": aux["q"]}

    def importance_weights(self, probabilities: jax.Array, buffer: Any) -> jax.Array:
        """Prioritised replay's importance weights ``float32[B]`` of samples
        drawn with ``probabilities``: ``(N P(i))^-beta`` normalised by the
        batch's largest, i.e. ``(min_j P(j) / P(i))^beta`` (0 for a sample of
        probability 0); ``beta`` from
        ``importance_exponent`` to 1 linearly over the Trainer's budget, read
        from the env steps the buffer has taken in (its running index)."""
        cfg = self.config
        beta = jnp.asarray(cfg.importance_exponent, jnp.float32)
        if self._budget:
            seen = buffer.running_index.astype(jnp.float32) * cfg.num_envs
            budget = float(self._budget) * self.env_steps_per_step
            beta = beta + (1.0 - beta) * jnp.minimum(seen / budget, 1.0)
        # an item of zero probability (one whose priority float rounding in the sum
        # tree left at 0, e.g. a run not yet valid) can still be drawn: weight 0
        drawable = probabilities > 0
        smallest = jnp.min(jnp.where(drawable, probabilities, jnp.inf))
        return jnp.where(drawable, smallest / jnp.where(drawable, probabilities, 1.0), 0.0) ** beta

    def prioritised_update(self, carry: PrioritisedDQNCarry, key: jax.Array,
                           ) -> tuple[PrioritisedDQNCarry, dict]:
        batch, indices, probabilities = self.buffer.sample_prioritised(carry.buffer, key)
        weights = self.importance_weights(probabilities, carry.buffer)
        params, opt_state, loss, aux = averaged_update(
            self.loss, carry.params, carry.opt_state, self.optimizer, carry.target_params, batch,
            carry.hyperparams, weights, average_aux=False)  # each device's own priorities
        buffer = self.buffer.set_priorities(carry.buffer, indices,
                                            aux["priority"] + self.config.priority_epsilon)
        return carry.replace(params=params, opt_state=opt_state, buffer=buffer), {
            "td": loss, "q": aux["q"]}

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
            soft_update(state.target_params, new_state.params, hp["tau"]),
            state.target_params)
        q_mean = losses.pop("loss/q")
        metrics = {**losses, "q_mean": q_mean, "epsilon": Last.of(self.epsilon(before, hp))}
        return new_state.replace(target_params=target_params), metrics
