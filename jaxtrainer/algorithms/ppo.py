"""Proximal Policy Optimization as a :class:`jaxtrainer.Module`.

PPO with the clipped surrogate objective (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms", arXiv:1707.06347) and generalized advantage estimation
(Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", arXiv:1506.02438).

Checked against PureJaxRL's single-file PPO (``luchris429/purejaxrl``,
``purejaxrl/ppo.py``): same network layout and initialisation, same
hyperparameter defaults, same clipped value loss, per-minibatch advantage
normalisation and linearly annealed Adam. Differences, on purpose:

* truncation is not termination (FIELD_REPORTS F19): gymnax 1.x reports both, and
  for a transition cut by the time limit the GAE target bootstraps from
  ``V(final_obs)``, the value of the observation the episode reached;
* device-parallel: sizes are global, each device collects
  ``num_envs / num_devices`` envs, advantages are normalised with global
  statistics and gradients are averaged over devices
  (:func:`jaxtrainer.distributed.gradient_update`), so an update is the
  one-device update on the same global minibatch and replicas stay bitwise
  equal (F2);
* the learning rate stays at 0 after ``total_updates`` instead of going negative;
* the training loop, devices, logging and evaluation live outside the module.

One ``training_step`` is one PPO update: a ``num_steps`` rollout of all envs in one
``lax.scan``, GAE in a reverse ``lax.scan``, then ``update_epochs`` epochs of
``num_minibatches`` minibatch gradient steps as nested ``lax.scan`` loops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import envs
from jaxtrainer.algorithms.networks import ActorCritic
from jaxtrainer.distributed import fold_in_device, gradient_update, local_size, pmean, vary_like
from jaxtrainer.metrics import Last, Mean
from jaxtrainer.module import Module


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters. Sizes are global (over all devices).

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make`.
      num_envs: parallel environments, over all devices.
      num_steps: rollout length per env per update; one update consumes
        ``num_envs * num_steps`` env steps.
      total_updates: the number of updates the learning rate anneals over; after
        it the rate stays 0. ``None`` (default): the run's budget, which the
        Trainer passes in (:meth:`PPO.configure_budget`); resuming with a larger
        budget then recomputes the line for the new total (the rate jumps up
        from where the shorter run ended): set it to keep one schedule.
      update_epochs: passes over each rollout.
      num_minibatches: minibatches per epoch; the global minibatch size
        ``num_envs * num_steps / num_minibatches`` must split over the devices.
      lr: Adam learning rate (initial one when annealing).
      anneal_lr: anneal the learning rate linearly to 0 over ``total_updates``.
      gamma: discount factor.
      gae_lambda: GAE's lambda.
      clip_eps: PPO ratio clip (and value clip) epsilon.
      ent_coef: entropy bonus coefficient.
      vf_coef: value loss coefficient.
      max_grad_norm: global gradient-norm clip.
      clip_value_loss: PureJaxRL's clipped value loss
        ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, +-clip_eps) - R)^2)``;
        ``False`` uses ``0.5 * (V - R)^2``.
      normalize_advantages: standardise advantages per minibatch (global mean and
        standard deviation over all devices' minibatch shares).
      activation: hidden activation of both MLPs.
      hidden_sizes: hidden layer widths of the actor and of the critic.
      eval_episodes: fresh episodes per :meth:`PPO.evaluation_step`, global.
    """

    env: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 128
    total_updates: int | None = None
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    clip_value_loss: bool = True
    normalize_advantages: bool = True
    activation: str = "tanh"
    hidden_sizes: tuple[int, ...] = (64, 64)
    eval_episodes: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        for name in ("num_envs", "num_steps", "total_updates", "update_epochs",
                     "num_minibatches", "eval_episodes"):
            value = getattr(self, name)
            if name == "total_updates" and value is None:
                continue
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PPOConfig.{name}={value!r}: expected a positive int")
        for name in ("lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef",
                     "max_grad_norm"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"PPOConfig.{name}={value!r}: expected a non-negative number")
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ValueError(
                f"PPOConfig: num_envs * num_steps = {self.num_envs} * {self.num_steps} = {batch} "
                f"is not divisible by num_minibatches={self.num_minibatches}")

    @property
    def minibatch_size(self) -> int:
        """Global minibatch size: ``num_envs * num_steps // num_minibatches``."""
        return self.num_envs * self.num_steps // self.num_minibatches


@struct.dataclass
class PPOState:
    """Training state. Replicated leaves are identical on every device; sharded
    ones hold this device's envs (global leading axis ``num_envs``).

    Attributes:
      params: actor-critic parameters (replicated).
      opt_state: optax state (replicated).
      update_count: ``int32[]`` updates done so far (replicated).
      env_state: batched :class:`jaxtrainer.envs.EnvState`, leading axis
        ``[num_envs]`` (sharded).
      obs: ``[num_envs, *observation_shape]`` current observations (sharded).
      hyperparams: ``{name: float32[]}`` the tunable hyperparameters this state
        trains with (replicated), initialised from the config and read by
        ``training_step`` as traced values, so population-based training
        (:class:`~jaxtrainer.algorithms.PBT`) can change them without
        recompiling. ``lr`` is the base learning rate (annealed per update when
        ``anneal_lr``); PPO: ``lr, ent_coef, vf_coef, clip_eps, max_grad_norm,
        gamma, gae_lambda``.
    """

    params: Any
    opt_state: optax.OptState
    update_count: jax.Array
    env_state: envs.EnvState
    obs: jax.Array
    hyperparams: dict[str, jax.Array]


@struct.dataclass
class Rollout:
    """One rollout, every leaf ``[num_steps, num_envs_per_device, ...]``.

    ``obs``: observations acted on; ``action``: sampled (unclipped) actions;
    ``log_prob``, ``value``: ``float32``, under the rollout's parameters;
    ``info``: the env's :class:`jaxtrainer.envs.StepInfo`.
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    info: envs.StepInfo


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimates and value targets (arXiv:1506.02438, eq. 16).

    All inputs are ``[T, ...]`` with time first::

        delta_t = r_t + gamma * (1 - terminated_t) * next_value_t - value_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   A_T = 0

    ``next_value_t`` is the value of the observation step ``t`` reached, before
    any auto-reset, i.e. ``V(final_obs_t)``: the next step's value inside an
    episode, the bootstrap value on truncation (terminated=False, done=True) and
    ignored on termination. The bootstrap of the rollout's last step is thus
    ``next_value_{T-1}``.

    Args:
      rewards, values, next_values: ``float32[T, ...]``.
      terminated: ``bool[T, ...]``, a terminal state was reached (no bootstrap).
      done: ``bool[T, ...]``, the episode ended (terminated or truncated): the
        advantage recursion stops.
      gamma: discount. gae_lambda: GAE's lambda.

    Returns:
      ``(advantages, targets)``, both ``float32[T, ...]``; ``targets = advantages + values``.
    """
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    deltas = rewards + gamma * next_values * not_terminated - values

    def backward(gae, step):
        delta, cont = step
        gae = delta + gamma * gae_lambda * cont * gae
        return gae, gae

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(deltas[0]), (deltas, not_done),
                                 reverse=True, unroll=16)
    return advantages, advantages + values


def normalize_advantages(advantages: jax.Array, eps: float = 1e-8) -> jax.Array:
    """``(A - mean) / (std + eps)`` with the mean and (population) standard deviation
    of the GLOBAL minibatch: every device's share has the same size, so the global
    moments are the :func:`~jaxtrainer.distributed.pmean` of the per-device ones.
    ``advantages``: ``float32[...]``, this device's share."""
    mean = pmean(jnp.mean(advantages))
    var = pmean(jnp.mean(jnp.square(advantages - mean)))
    return (advantages - mean) / (jnp.sqrt(var) + eps)


class PPO(Module):
    """PPO on a :mod:`jaxtrainer.envs` environment, discrete or continuous actions.

    Policy: categorical over logits (discrete) or diagonal Gaussian with a
    state-independent log standard deviation (continuous; sampled actions are
    clipped to the env's bounds only when passed to the env, the unclipped action
    is what the log-probabilities refer to). Actor and critic are separate
    :class:`~jaxtrainer.algorithms.networks.ActorCritic` MLPs.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length`` (:class:`~jaxtrainer.metrics.Mean` over the episodes
    completed during the rollout), ``loss/total``, ``loss/policy``,
    ``loss/value``, ``loss/entropy``, ``loss/approx_kl`` (means over the update's
    minibatches; approx_kl is ``E[(r - 1) - log r]``), ``lr`` (the learning rate of
    the log interval's last update, :class:`~jaxtrainer.Last`). :meth:`evaluation_step`: ``eval/episode_return``,
    ``eval/episode_length`` of the greedy policy.

    Args:
      config: hyperparameters; :class:`PPOConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env`` (an environment name).
      **overrides: replace fields of ``config``, e.g. ``PPO(num_envs=8)``.
        With ``total_updates=None`` (default) the learning rate anneals over the
        Trainer's budget (:meth:`configure_budget`).
    """

    def __init__(self, config: PPOConfig | None = None, *, env: envs.Env | None = None,
                 **overrides: Any) -> None:
        config = config or PPOConfig()
        if isinstance(env, str):  # PPO(env="CartPole-v1"): a name, as in PPOConfig.env
            overrides["env"], env = env, None
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
        # learning_rate and max_grad_norm live in the optimizer state as traced
        # values (optax.inject_hyperparams), set from ``state.hyperparams`` before
        # every update.
        self.optimizer = optax.inject_hyperparams(self.base_optimizer)(
            learning_rate=config.lr, max_grad_norm=config.max_grad_norm)

    # ---- configuration ---------------------------------------------------
    TUNABLE = ("lr", "ent_coef", "vf_coef", "clip_eps", "max_grad_norm", "gamma", "gae_lambda")
    """Hyperparameters kept in :attr:`PPOState.hyperparams` (traced, tunable by PBT)."""

    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """Global-norm clip then Adam (eps 1e-5, PureJaxRL's), for
        ``optax.inject_hyperparams``."""
        return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                           optax.adam(learning_rate=learning_rate, eps=1e-5))

    def initial_hyperparams(self) -> dict[str, jax.Array]:
        """``{name: float32[]}`` for every name in :attr:`TUNABLE`, from the config."""
        return {name: jnp.asarray(getattr(self.config, name), jnp.float32)
                for name in self.TUNABLE}

    _budget: int | None = None

    def configure_budget(self, max_steps: int) -> None:
        """The Trainer's budget in updates; the learning rate anneals over it
        when ``config.total_updates`` is ``None``."""
        self._budget = int(max_steps)

    @property
    def total_updates(self) -> int | None:
        """Updates the learning rate anneals over: ``config.total_updates``, else
        the budget from :meth:`configure_budget` (``None`` before ``fit``)."""
        return self.config.total_updates if self.config.total_updates is not None else self._budget

    def _learning_rate(self, hyperparams: dict[str, jax.Array], update: jax.Array) -> jax.Array:
        """Learning rate of update number ``update`` (int32[], from 0): ``lr``, times
        ``1 - update / total_updates`` (clipped at 0) when annealing.

        Raises:
          ValueError: annealing with ``total_updates=None`` outside a Trainer
            (nothing has set the budget).
        """
        lr = hyperparams["lr"]
        if not self.config.anneal_lr:
            return lr
        if self.total_updates is None:
            raise ValueError(
                f"{type(self).__name__}: anneal_lr=True with total_updates=None needs the run's "
                "budget: train it with a Trainer (which calls configure_budget(max_steps)), "
                "or set total_updates, or anneal_lr=False")
        frac = 1.0 - update.astype(jnp.float32) / self.total_updates
        return lr * jnp.clip(frac, 0.0, 1.0)

    def _set_optimizer_hyperparams(self, opt_state: Any, hyperparams: dict[str, jax.Array],
                                   update: jax.Array) -> Any:
        """``opt_state`` with this update's learning rate and gradient-norm clip."""
        inner = {**opt_state.hyperparams,
                 "learning_rate": self._learning_rate(hyperparams, update),
                 "max_grad_norm": hyperparams["max_grad_norm"]}
        return opt_state._replace(hyperparams=inner)

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices``, before compiling.

        Raises:
          ValueError: ``num_envs``, the minibatch size or ``eval_episodes`` is not
            a multiple of ``num_devices`` (the message names the value and count).
        """
        cfg = self.config
        if cfg.num_envs % num_devices:
            raise ValueError(
                f"PPO: num_envs={cfg.num_envs} is not divisible by the {num_devices} devices; "
                f"use a multiple of {num_devices}")
        if cfg.minibatch_size % num_devices:
            raise ValueError(
                f"PPO: minibatch size num_envs*num_steps/num_minibatches = {cfg.num_envs}*"
                f"{cfg.num_steps}/{cfg.num_minibatches} = {cfg.minibatch_size} is not divisible "
                f"by the {num_devices} devices; change num_envs, num_steps or num_minibatches")
        if cfg.eval_episodes % num_devices:
            raise ValueError(
                f"PPO: eval_episodes={cfg.eval_episodes} is not divisible by the {num_devices} "
                f"devices; use a multiple of {num_devices}")

    def hparams(self) -> dict[str, Any]:
        hp = dataclasses.asdict(self.config)
        hp["hidden_sizes"] = list(hp["hidden_sizes"])
        hp["total_updates"] = self.total_updates
        return hp

    # ---- policy helpers --------------------------------------------------
    def _env_action(self, action: jax.Array) -> jax.Array:
        """Continuous actions clipped to the env's bounds; discrete ones as they are."""
        if self.env.discrete:
            return action
        return jnp.clip(action, self.env.action_low, self.env.action_high)

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs[n, ...], key) -> actions[n, ...]``: argmax or the mean
        action (clipped), for :func:`jaxtrainer.envs.evaluate_policy`."""
        def policy(params, obs, key):
            del key
            dist, _ = self.network.apply(params, obs)
            return self._env_action(dist.mode())
        return policy

    # ---- Module ------------------------------------------------------------
    def init_state(self, key: jax.Array) -> PPOState:
        """Parameters from ``key`` (replicated); this device's
        ``num_envs / num_devices`` envs reset from ``fold_in_device(key)`` (sharded)."""
        params_key, env_key = jax.random.split(key)
        dummy = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        params = self.network.init(params_key, dummy)
        num_envs = local_size(self.config.num_envs, "num_envs")
        env_key = fold_in_device(env_key)
        obs, env_state = self.env.reset_batch(env_key, num_envs)
        # Leaves such as step counters do not depend on the key: make every env
        # leaf per-device so the strategy shards it.
        obs, env_state = vary_like((obs, env_state), env_key)
        return PPOState(params, self.optimizer.init(params), jnp.zeros((), jnp.int32),
                        env_state, obs, self.initial_hyperparams())

    def rollout(self, params: Any, env_state: envs.EnvState, obs: jax.Array,
                key: jax.Array) -> tuple[envs.EnvState, jax.Array, Rollout]:
        """``num_steps`` steps of this device's envs in one ``lax.scan``, actions
        sampled from the policy with ``params``. Returns the env state and
        observations after the rollout and the :class:`Rollout` (``[num_steps, n]``)."""
        def one_step(carry, step_key):
            env_state, obs = carry
            act_key, env_key = jax.random.split(step_key)
            dist, value = self.network.apply(params, obs)
            action = dist.sample(act_key)
            log_prob = dist.log_prob(action)
            next_obs, env_state, info = self.env.step_batch(
                env_key, env_state, self._env_action(action))
            carry = vary_like((env_state, next_obs), key)
            return carry, Rollout(obs, action, log_prob, value, info)

        (env_state, obs), traj = jax.lax.scan(
            one_step, (env_state, obs), jax.random.split(key, self.config.num_steps))
        return env_state, obs, traj

    def advantages_and_targets(self, params: Any, traj: Rollout,
                               hyperparams: dict[str, jax.Array] | None = None,
                               ) -> tuple[jax.Array, jax.Array]:
        """GAE advantages and value targets, ``float32[num_steps, num_envs_per_device]``.

        The next-state value of every step is ``V(final_obs)``: inside an episode
        the value of the next observation, on truncation the bootstrap value of
        the observation the time limit cut (F19), ignored on termination. One
        batched critic pass over the rollout.
        """
        hp = self.initial_hyperparams() if hyperparams is None else hyperparams
        next_values = self.network.apply(params, traj.info.final_obs, method=ActorCritic.value)
        return compute_gae(traj.info.reward, traj.value, next_values, traj.info.terminated,
                           traj.info.done, hp["gamma"], hp["gae_lambda"])

    def _loss(self, params: Any, batch: dict[str, jax.Array],
              hp: dict[str, jax.Array]) -> tuple[jax.Array, dict]:
        cfg = self.config
        clip_eps = hp["clip_eps"]
        dist, value = self.network.apply(params, batch["obs"])
        log_prob = dist.log_prob(batch["action"])
        log_ratio = log_prob - batch["log_prob"]
        ratio = jnp.exp(log_ratio)
        adv = batch["advantage"]
        surrogate = jnp.minimum(ratio * adv,
                                jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
        policy_loss = -jnp.mean(surrogate)

        value_err = jnp.square(value - batch["target"])
        if cfg.clip_value_loss:
            clipped = batch["value"] + jnp.clip(value - batch["value"], -clip_eps, clip_eps)
            value_err = jnp.maximum(value_err, jnp.square(clipped - batch["target"]))
        value_loss = 0.5 * jnp.mean(value_err)

        entropy = jnp.mean(dist.entropy())
        total = policy_loss + hp["vf_coef"] * value_loss - hp["ent_coef"] * entropy
        approx_kl = jnp.mean((ratio - 1.0) - log_ratio)
        return total, {"policy": policy_loss, "value": value_loss, "entropy": entropy,
                       "approx_kl": approx_kl}

    def training_step(self, state: PPOState, key: jax.Array) -> tuple[PPOState, dict]:
        """Collect ``num_steps`` steps from every env, then ``update_epochs`` x
        ``num_minibatches`` clipped-surrogate gradient steps.

        Each device shuffles its own share of the rollout every epoch and
        contributes ``minibatch_size / num_devices`` samples to every global
        minibatch; advantage statistics and gradients are global.
        """
        cfg = self.config
        rollout_key, update_key = jax.random.split(key)
        env_state, obs, traj = self.rollout(state.params, state.env_state, state.obs,
                                            rollout_key)

        hp = state.hyperparams
        advantages, targets = self.advantages_and_targets(state.params, traj, hp)

        batch = {"obs": traj.obs, "action": traj.action, "log_prob": traj.log_prob,
                 "value": traj.value, "advantage": advantages, "target": targets}
        batch_size = cfg.num_steps * local_size(cfg.num_envs, "num_envs")
        batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
        num_mb = cfg.num_minibatches

        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            if cfg.normalize_advantages:
                minibatch = {**minibatch,
                             "advantage": normalize_advantages(minibatch["advantage"])}
            params, opt_state, loss, aux = gradient_update(
                self._loss, params, opt_state, self.optimizer, minibatch, hp)
            return (params, opt_state), {"total": loss, **aux}

        def epoch(carry, epoch_key):
            perm = jax.random.permutation(epoch_key, batch_size)
            shuffled = jax.tree.map(
                lambda x: jnp.take(x, perm, axis=0).reshape((num_mb, -1) + x.shape[1:]), batch)
            return jax.lax.scan(minibatch_step, carry, shuffled)

        opt_state = self._set_optimizer_hyperparams(state.opt_state, hp, state.update_count)
        (params, opt_state), losses = jax.lax.scan(
            epoch, (state.params, opt_state),
            jax.random.split(update_key, cfg.update_epochs))

        done = traj.info.done
        metrics = {
            "train/episode_return": Mean.of(traj.info.episode_return, mask=done),
            "train/episode_length": Mean.of(traj.info.episode_length, mask=done),
            **{f"loss/{name}": jnp.mean(value) for name, value in losses.items()},
            "lr": Last.of(self._learning_rate(hp, state.update_count)),
        }
        new_state = PPOState(params, opt_state, state.update_count + 1, env_state, obs, hp)
        return new_state, metrics

    def evaluation_step(self, state: PPOState, key: jax.Array) -> dict[str, Mean]:
        """Greedy policy on ``eval_episodes`` fresh episodes (split over devices),
        each run up to the env's time limit; completed episodes only (F18)."""
        num = local_size(self.config.eval_episodes, "eval_episodes")
        result = envs.evaluate_policy(self.env, self.greedy_policy(), state.params, key, num)
        return {f"eval/{name}": value for name, value in result.items()}
