"""The loop DQN, SAC, TD3 (and DDPG) and CrossQ share: a base Module that
collects transitions into a :class:`~jaxtrainer.algorithms.replay.ReplayBuffer`
and learns from them, with the algorithm's update and behaviour policy as the
parts it calls. The math is in small modules of functions:
:mod:`~jaxtrainer.algorithms.q_learning` (TD targets),
:mod:`~jaxtrainer.algorithms.critic_losses` (actor-critic losses),
:mod:`~jaxtrainer.algorithms.target_update` (Polyak updates),
:mod:`~jaxtrainer.algorithms.exploration` (behaviour and target-policy noise);
the configs' shared fields and checks in
:mod:`~jaxtrainer.algorithms.offpolicy_config`.

One ``training_step`` of an off-policy module (:meth:`OffPolicyModule.training_step`):

1. steps every env ``train_frequency`` times with the exploration policy and
   writes each transition to this device's share of the replay buffer
   (``env_steps_per_step = num_envs * train_frequency``, global);
2. once ``learning_starts`` env steps have been collected (over all devices),
   runs ``gradient_steps`` updates (:meth:`~OffPolicyModule.update`), each on a
   fresh global batch of ``batch_size`` transitions (``batch_size / num_devices``
   sampled by each device from its own envs' transitions) with gradients
   averaged over devices, so replicated parameters stay bitwise equal (on an
   accelerator drawn before the updates' loop: :meth:`~OffPolicyModule.learn`).
   Before that the updates are skipped (``lax.cond`` on a replicated counter)
   and loss metrics are not reported;
3. :meth:`~OffPolicyModule.after_learning`: what an algorithm does once per
   training step (DQN's target update, SAC's temperature metric).

Observation normalisation and reward scaling (SAC and TD3, configs with
``normalize_observations`` and ``reward_scaling``), as Brax's SAC
(``brax/training/agents/sac/train.py`` and ``losses.py``, ``google/brax``): the
replay buffer stores raw observations and rewards. Each env step acts on
observations normalised with the running statistics
(:mod:`~jaxtrainer.algorithms.normalization`) as they were before it, then
merges that step's observations (all devices') into them; the updates
normalise every sampled batch's ``obs`` and ``next_obs`` with the statistics
after collection (:func:`~jaxtrainer.algorithms.normalization.learning_batch`)
and multiply its rewards by ``reward_scaling``, for learning only: the logged
episode returns stay raw. The statistics are replicated state (checkpointed),
and evaluation and :meth:`~OffPolicyModule.policy_params` use them. The networks
are in :mod:`jaxtrainer.algorithms.networks`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer import _arguments as arguments
from jaxtrainer import aliases, envs
from jaxtrainer.algorithms import env_steps, normalization
from jaxtrainer.algorithms._evaluated import EvaluatedParamsPolicy
from jaxtrainer.algorithms.exploration import uniform_warmup
from jaxtrainer.algorithms.hyperparams import adam, annealed, config_record, set_learning_rate
from jaxtrainer.algorithms.networks import TwinCritic
from jaxtrainer.algorithms.normalization import learning_batch, normalize_obs, normalizing_policy
from jaxtrainer.algorithms.offpolicy_config import configure
from jaxtrainer.algorithms.replay import ReplayBuffer, Transition
from jaxtrainer.algorithms.torsos import torso_factory
from jaxtrainer.distributed import fold_in_device, local_size
from jaxtrainer.envs.evaluation import episode_metrics
from jaxtrainer.metrics import Mean
from jaxtrainer.module import Module

__getattr__, __dir__ = aliases.attach(__name__)  # names that moved out: jaxtrainer.aliases.ALIASES


def _pooled(losses: Any) -> Mean:
    """The losses of ``n`` updates (``float32[n]``, or a :class:`Mean` of ``[n]``
    fields for a loss some updates skip) as one :class:`Mean`."""
    if isinstance(losses, Mean):
        return Mean(jnp.sum(losses.total), jnp.sum(losses.count))
    return Mean(jnp.mean(losses), jnp.ones((), jnp.float32))


# ---- the shared module ------------------------------------------------------
class OffPolicyModule(EvaluatedParamsPolicy, Module):
    """Base of :class:`~jaxtrainer.algorithms.DQN`, ``SAC`` and ``TD3`` (and ``DDPG``, a ``TD3``).

    Subclasses set :attr:`config_class` (a frozen dataclass with ``env``,
    ``num_envs``, ``train_frequency``, ``gradient_steps``, ``buffer_size``,
    ``batch_size``, ``learning_starts``, ``eval_episodes``, ``hidden_sizes``),
    :attr:`discrete_actions`, :attr:`carry_type` and :attr:`LOSSES`, and implement
    :meth:`explore` (the behaviour policy), :meth:`greedy_policy`,
    :meth:`policy_params` and :meth:`update_batch` (one update on a sampled
    batch) with :meth:`split_update_key` (which part of an update's key samples
    its batch); an algorithm whose updates change the replay (prioritised)
    overrides :meth:`update` and :attr:`presamples` instead.

    A config with ``normalize_observations`` and ``reward_scaling`` (an
    :class:`~jaxtrainer.algorithms.sac.SACConfig`, TD3's) turns on observation normalisation and reward
    scaling (see the module docstring); the state then needs an ``obs_stats``
    field (:meth:`init_obs_stats`), :meth:`update` takes the statistics as a
    fourth argument and samples with :meth:`sample_batch` (as :meth:`learn`
    normalises each presampled batch), and
    :meth:`greedy_policy` wraps its policy in :meth:`normalizing`.

    Traced hyperparameters (as PPO's): the state and the :attr:`carry_type` have
    a ``hyperparams`` field, ``{name: float32[]}`` for every name in
    :attr:`TUNABLE`, initialised by :meth:`initial_hyperparams` and read by the
    updates and the behaviour policy, so that population-based training
    (:class:`~jaxtrainer.population.PBT`) changes them without recompiling.
    Learning rates reach the optimizers through ``optax.inject_hyperparams``
    (:func:`adam`, :attr:`LEARNING_RATES`). With the config's values the
    updates are those of constants, bit for bit.

    Args:
      config: hyperparameters; ``config_class()`` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env``.
      **overrides: replace fields of ``config``.

    Raises:
      ValueError: the env's actions are not of the kind the algorithm needs, or
        ``buffer_size`` is not a multiple of ``num_envs``.
    """

    name = "OffPolicy"
    config_class: type = type(None)
    discrete_actions = False
    carry_type: type = type(None)
    """A ``flax.struct`` dataclass of what :meth:`update` changes; its fields are
    named as the state's (see :meth:`carry_of`)."""
    LOSSES: tuple[str, ...] = ()
    """The names of the losses :meth:`update` returns (reported as ``loss/<name>``)."""
    TUNABLE: tuple[str, ...] = ()
    """Hyperparameters kept in ``state.hyperparams`` (``float32[]`` each, traced:
    :class:`~jaxtrainer.population.PBT` changes them without recompiling); each
    starts from the config field of its name (:meth:`initial_hyperparams`)."""
    TUNABLE_FALLBACK: tuple[tuple[str, str], ...] = ()
    """``(name, field)`` pairs: ``name`` starts from the config's ``field`` when the
    config's own ``name`` is ``None`` (e.g. SAC's ``alpha_lr`` from ``q_lr``)."""
    LEARNING_RATES: tuple[tuple[str, str], ...] = ()
    """``(carry field, name)`` pairs: the :func:`adam` state in the carry field
    takes its learning rate from ``hyperparams[name]`` (:meth:`apply_hyperparams`)."""

    def __init__(self, config: Any = None, *, env: envs.Env | str | None = None,
                 **overrides: Any) -> None:
        configure(self, config or self.config_class(), env, overrides, self.discrete_actions)
        config = self.config
        self.buffer = ReplayBuffer(config.buffer_size, config.batch_size, config.num_envs,
                                   self.sequence_length, self.priority_exponent)
        self.env_steps_per_step = config.num_envs * config.train_frequency

    @property
    def priority_exponent(self) -> float | None:
        """The replay's priority exponent (``None``: uniform replay; DQN's
        ``priority_exponent`` with ``prioritised``)."""
        if not getattr(self.config, "prioritised", False):
            return None
        return float(self.config.priority_exponent)

    @property
    def sequence_length(self) -> int:
        """Consecutive transitions an update samples at a time (1; DQN's ``n_step``)."""
        return int(getattr(self.config, "n_step", 1))

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices``.

        Raises:
          ValueError: ``num_envs``, ``batch_size`` or ``eval_episodes`` is not a
            multiple of ``num_devices`` (the message names the value and count).
        """
        self.buffer.validate(num_devices, self.name)
        arguments.split_over_devices(self.name, num_devices, eval_episodes=self.config.eval_episodes)

    def hparams(self) -> dict[str, Any]:
        return config_record(self.config)

    # ---- traced hyperparameters -------------------------------------------
    def hyperparam_defaults(self) -> dict[str, float]:
        """``{name: float}`` for every name in :attr:`TUNABLE`: the config's field
        of that name, or (when it is ``None``) the field :attr:`TUNABLE_FALLBACK`
        names."""
        fallback = dict(self.TUNABLE_FALLBACK)
        values = {}
        for name in self.TUNABLE:
            value = getattr(self.config, name)
            values[name] = float(getattr(self.config, fallback[name]) if value is None else value)
        return values

    def initial_hyperparams(self) -> dict[str, jax.Array]:
        """:meth:`hyperparam_defaults` as ``{name: float32[]}``: the state's
        ``hyperparams`` at ``init_state``, which takes them as an argument (the
        strategy passes them, so no compiled program holds their values)."""
        return {name: jnp.asarray(value, jnp.float32)
                for name, value in self.hyperparam_defaults().items()}

    _budget: int | None = None

    def configure_budget(self, max_steps: int) -> None:
        """The Trainer's budget in training steps: the learning rates anneal over
        it with the config's ``anneal_lr``."""
        self._budget = int(max_steps)

    def apply_hyperparams(self, carry: Any) -> Any:
        """``carry`` with each optimizer state of :attr:`LEARNING_RATES` set to the
        learning rate in ``carry.hyperparams`` (once per training step, before the
        updates, and on the state ``init_state`` makes), so that the optimizers
        follow ``state.hyperparams``."""
        return carry.replace(**{
            field: set_learning_rate(getattr(carry, field), carry.hyperparams[name])
            for field, name in self.LEARNING_RATES})

    def anneal_learning_rates(self, carry: Any, step: jax.Array) -> Any:
        """With the config's ``anneal_lr``: ``carry`` with each rate of
        :attr:`LEARNING_RATES` annealed linearly to 0 over the Trainer's budget, as
        of training step ``step`` (``int32[]``;
        :func:`~jaxtrainer.algorithms.hyperparams.annealed`); else ``carry``.

        Raises:
          ValueError: ``anneal_lr`` outside a Trainer (no budget set).
        """
        if not getattr(self.config, "anneal_lr", False):
            return carry
        if self._budget is None:
            raise ValueError(f"{type(self).__name__}: anneal_lr=True needs the run's budget: train "
                             "it with a Trainer (which calls configure_budget(max_steps)), or "
                             "anneal_lr=False")
        return carry.replace(**{
            field: set_learning_rate(getattr(carry, field),
                                     annealed(carry.hyperparams[name], step, self._budget))
            for field, name in self.LEARNING_RATES})

    # ---- to implement -----------------------------------------------------
    def explore(self, state: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
        """Behaviour actions for this device's envs, within the env's bounds.
        ``obs``: ``[num_envs_per_device, *observation_shape]``, normalised with
        ``state.obs_stats`` when :attr:`normalize_observations`."""
        raise NotImplementedError

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs[n, ...], key) -> actions[n, ...]`` for evaluation,
        on raw observations; ``params`` is :meth:`policy_params`."""
        raise NotImplementedError

    def policy_params(self, state: Any) -> Any:
        """What :meth:`greedy_policy` takes as ``params``: ``state.actor_params``
        (SAC, TD3) unless overridden; with :attr:`normalize_observations` the pair
        ``(state.actor_params, state.obs_stats)``, so an exported policy
        normalises raw observations as training did."""
        if self.normalize_observations:
            return state.actor_params, state.obs_stats
        return state.actor_params

    def split_update_key(self, key: jax.Array) -> tuple[jax.Array, Any]:
        """``(sample_key, keys)``: of one update's ``key``, the key its batch is
        sampled with and what :meth:`update_batch` takes as its own keys (any
        pytree of keys). Default: ``(key, None)``, the whole key samples (DQN's);
        SAC's and TD3's split it, the first part sampling."""
        return key, None

    def update(self, carry: Any, key: jax.Array, buffer: Any,
               obs_stats: normalization.RunningStatistics | None = None) -> tuple[Any, dict]:
        """One gradient update on a fresh batch sampled from ``buffer`` with ``key``
        (:meth:`split_update_key`'s sample key; :meth:`sample_batch`, normalised with
        ``obs_stats``): :meth:`update_batch` on that batch.

        Returns the new ``carry`` (a :attr:`carry_type`) and ``{name: loss}`` for
        every name in :attr:`LOSSES`: a ``float32[]``, or a
        :class:`~jaxtrainer.metrics.Mean` for a loss only some updates have
        (count 0 in the others, e.g. TD3's delayed actor loss).
        """
        sample_key, keys = self.split_update_key(key)
        return self.update_batch(carry, keys, self.sample_batch(buffer, sample_key, obs_stats))

    def update_batch(self, carry: Any, keys: Any, batch: Transition) -> tuple[Any, dict]:
        """:meth:`update`'s gradient update on ``batch`` (leaves ``[batch_size /
        num_devices, ...]``, as :meth:`sample_batch` returns it), with ``keys``
        from :meth:`split_update_key`. Returns as :meth:`update`."""
        raise NotImplementedError

    @property
    def presamples(self) -> bool:
        """Whether :meth:`learn` draws every update's batch before its loop of
        updates: the same batches in fewer, larger gathers. On an accelerator
        (``jax.default_backend()`` not ``"cpu"``) unless each update changes what
        the next samples from (prioritised replay) or :meth:`update` is newer than
        :meth:`update_batch` (a subclass overriding :meth:`update` alone)."""
        mro = type(self).__mro__
        update = next(c for c in mro if "update" in c.__dict__)
        batch = next(c for c in mro if "update_batch" in c.__dict__)
        here = self._presample_on_cpu or jax.default_backend() != "cpu"
        return here and self.priority_exponent is None and issubclass(batch, update)

    _presample_on_cpu = False  # the CPU's choice (tests compare the two loops there)

    def after_learning(self, state: Any, new_state: Any, losses: dict) -> tuple[Any, dict]:
        """Once per training step after the updates: the final state and the
        metrics besides the episode statistics. Default: ``new_state`` and the
        ``loss/<name>`` metrics as they are."""
        return new_state, losses

    # ---- observation normalisation and reward scaling ------------------------
    @property
    def normalize_observations(self) -> bool:
        """The config's ``normalize_observations`` (``False`` for a config without it)."""
        return bool(getattr(self.config, "normalize_observations", False))

    @property
    def reward_scaling(self) -> float:
        """The config's ``reward_scaling`` (1 for a config without it)."""
        return getattr(self.config, "reward_scaling", 1.0)

    def init_obs_stats(self) -> normalization.RunningStatistics | None:
        """Empty statistics of the env's observations (replicated) with
        :attr:`normalize_observations`, else ``None`` (no state leaves)."""
        if not self.normalize_observations:
            return None
        return normalization.init(self.env.observation_shape)

    def sample_batch(self, buffer: Any, key: jax.Array,
                     obs_stats: normalization.RunningStatistics | None = None) -> Transition:
        """``batch_size / num_devices`` transitions sampled from this device's share
        of ``buffer`` with ``key``, as the updates learn from them
        (:func:`~jaxtrainer.algorithms.normalization.learning_batch`: observations normalised with ``obs_stats``,
        rewards times ``reward_scaling``). :meth:`learn`'s presampled batches are
        these, drawn for all its keys at once."""
        return learning_batch(self.buffer.sample(buffer, key), obs_stats, self.reward_scaling)

    def normalizing(self, policy: Callable[[Any, jax.Array, jax.Array], jax.Array],
                    ) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs, key)`` acting on normalised observations as a
        policy of raw ones that takes :meth:`policy_params`
        (:func:`~jaxtrainer.algorithms.normalization.normalizing_policy` with :attr:`normalize_observations`)."""
        return normalizing_policy(policy, self.normalize_observations)

    # ---- shared pieces ----------------------------------------------------
    def env_steps_before(self, step: jax.Array) -> jax.Array:
        """``float32[]`` global env steps collected before training step ``step``
        (for schedules; exact comparisons go through :mod:`~jaxtrainer.algorithms.env_steps`,
        which never forms the int32 product that wraps past 2^31)."""
        return env_steps.as_float(step, self.env_steps_per_step)

    def learning(self, step: jax.Array) -> jax.Array:
        """``bool[]``: training step ``step`` (from 0) updates, i.e. by its end at
        least ``learning_starts`` env steps have been collected. Replicated."""
        return env_steps.reached(step + 1, self.config.learning_starts, self.env_steps_per_step)

    def warmup(self, state: Any, action: jax.Array, key: jax.Array) -> jax.Array:
        """``action`` (``float32[n, action_size]``), or uniform random actions in the
        env's box while fewer than ``learning_starts`` env steps were collected
        (CleanRL's SAC and TD3)."""
        warmup = ~env_steps.reached(state.step, self.config.learning_starts,
                                    self.env_steps_per_step)
        return uniform_warmup(action, key, jnp.asarray(self.env.action_low),
                              jnp.asarray(self.env.action_high), warmup)

    def init_envs(self, key: jax.Array) -> tuple[envs.EnvState, jax.Array, Any]:
        """This device's ``num_envs / num_devices`` envs reset from
        ``fold_in_device(key)`` and an empty buffer share (both sharded)."""
        env_key = fold_in_device(key)
        obs, env_state = self.env.reset_batch(env_key, local_size(self.config.num_envs,
                                                                  "num_envs"))
        action = jnp.zeros(self.env.action_shape,
                           jnp.int32 if self.env.discrete else jnp.float32)
        ends = jnp.zeros((), jnp.bool_) if self.sequence_length > 1 else None
        example = Transition(obs[0], action, jnp.zeros((), jnp.float32), obs[0],
                             jnp.zeros((), jnp.bool_), ends)
        return env_state, obs, self.buffer.init(example)

    def setup_actor_critic(self, actor_type: type, actor_lr: float, critic_lr: float,
                           num_critics: int = 2) -> None:
        """SAC's, TD3's and DDPG's networks: ``self.actor = actor_type(action_size,
        ...)`` and a :class:`~jaxtrainer.algorithms.networks.TwinCritic`
        ``self.critic`` of ``num_critics`` Q networks (2; DDPG's 1), both with
        the config's ``hidden_sizes``, ``activation`` and ``network`` torso, and Adam optimizers
        ``self.actor_optimizer`` and ``self.critic_optimizer`` (:func:`adam`:
        the learning rates given are their initial values; the states then take
        them from ``state.hyperparams``, see :attr:`LEARNING_RATES`)."""
        cfg = self.config
        obs_ndim = len(self.env.observation_shape)
        torso = torso_factory(cfg.network, self.env.observation_shape, owner=type(self).__name__,
                              observation_layout=self.env.observation_layout)
        self.actor = actor_type(self.env.action_size, obs_ndim, cfg.hidden_sizes, cfg.activation,
                                torso)
        self.critic = TwinCritic(obs_ndim, cfg.hidden_sizes, cfg.activation, num_critics, torso)
        self.actor_optimizer = adam(actor_lr)
        self.critic_optimizer = adam(critic_lr)

    def init_actor_critic(self, key: jax.Array) -> tuple[Any, Any, envs.EnvState, jax.Array,
                                                         Any]:
        """SAC's, TD3's and DDPG's ``self.actor`` and ``self.critic``
        initialised from ``key`` (replicated), and :meth:`init_envs`:
        ``(actor_params, critic_params, env_state, obs, buffer)``."""
        actor_key, critic_key, env_key = jax.random.split(key, 3)
        obs = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        actor_params = self.actor.init(actor_key, obs)
        critic_params = self.critic.init(critic_key, obs, jnp.zeros((self.env.action_size,)))
        return (actor_params, critic_params, *self.init_envs(env_key))

    def get_experience(self, state: Any, key: jax.Array) -> tuple[
            envs.EnvState, jax.Array, Any, normalization.RunningStatistics | None,
            envs.StepInfo]:
        """``train_frequency`` steps of this device's envs with :meth:`explore`,
        each step's (raw) transitions added to the buffer. With observation
        statistics (``state.obs_stats``, else ``None``), each step acts on
        observations normalised with the statistics before it and then merges
        its observations, every device's, into them (as Brax's SAC
        ``get_experience``). Returns the new env state, observations, buffer,
        statistics and the stacked :class:`~jaxtrainer.envs.StepInfo`
        (``[train_frequency, num_envs_per_device]``)."""
        def one_step(carry, step_key):
            env_state, obs, buffer, obs_stats = carry
            act_key, env_key = jax.random.split(step_key)
            action = self.explore(state, normalize_obs(obs_stats, obs), act_key)
            next_obs, env_state, info = self.env.step_batch(env_key, env_state, action)
            buffer = self.buffer.add(buffer, Transition(
                obs, action, info.reward, info.final_obs, info.terminated,
                info.done if self.sequence_length > 1 else None))
            if obs_stats is not None:
                obs_stats = normalization.update(obs_stats, obs)
            return (env_state, next_obs, buffer, obs_stats), info

        carry = (state.env_state, state.obs, state.buffer, getattr(state, "obs_stats", None))
        (env_state, obs, buffer, obs_stats), infos = jax.lax.scan(
            one_step, carry, jax.random.split(key, self.config.train_frequency))
        return env_state, obs, buffer, obs_stats, infos

    def collect(self, state: Any, key: jax.Array) -> tuple[envs.EnvState, jax.Array, Any,
                                                           envs.StepInfo]:
        """:meth:`get_experience` without the statistics: the new env state,
        observations, buffer and the stacked :class:`~jaxtrainer.envs.StepInfo`."""
        env_state, obs, buffer, _, infos = self.get_experience(state, key)
        return env_state, obs, buffer, infos

    def carry_of(self, state: Any) -> Any:
        """The :attr:`carry_type` holding the fields of ``state`` of the same names."""
        return self.carry_type(**{field.name: getattr(state, field.name)
                                  for field in dataclasses.fields(self.carry_type)})

    def learn(self, carry: Any, buffer: Any, obs_stats: normalization.RunningStatistics | None,
              step: jax.Array, key: jax.Array) -> tuple[Any, dict[str, Mean]]:
        """``gradient_steps`` updates of ``carry`` in a ``lax.scan``, each on a batch
        sampled from ``buffer`` (normalised with ``obs_stats``, or ``None``) with
        its key of ``split(key, gradient_steps)``, when :meth:`learning` says so,
        else ``carry`` unchanged. Returns the carry and ``{"loss/<name>": Mean}``
        over the updates (count 0, i.e. unreported, when skipped).

        With :attr:`presamples`, every update's batch is drawn before the scan
        (as Brax's SAC): one ``vmap``-ped sample of the keys' :meth:`split_update_key`,
        one gather per field of ``gradient_steps * batch_size / num_devices`` rows;
        each update normalises its batch and calls :meth:`update_batch` (the same
        items and keys as :meth:`update`). Without, :meth:`update` in the scan."""
        def run(carry):
            keys = jax.random.split(key, self.config.gradient_steps)
            if self.presamples:
                sample_keys, update_keys = jax.vmap(self.split_update_key)(keys)
                items = jax.vmap(self.buffer.sample, in_axes=(None, 0))(buffer, sample_keys)

                def update(carry, xs):
                    update_key, raw = xs
                    return self.update_batch(
                        carry, update_key, learning_batch(raw, obs_stats, self.reward_scaling))
                carry, losses = jax.lax.scan(update, carry, (update_keys, items))
            else:
                def update(carry, k):
                    if obs_stats is None:  # an algorithm without statistics may take 3 arguments
                        return self.update(carry, k, buffer)
                    return self.update(carry, k, buffer, obs_stats)
                carry, losses = jax.lax.scan(update, carry, keys)
            return carry, {name: _pooled(losses[name]) for name in self.LOSSES}

        def skip(carry):
            return carry, {name: Mean.empty() for name in self.LOSSES}

        carry, losses = jax.lax.cond(self.learning(step), run, skip, carry)
        return carry, {f"loss/{name}": value for name, value in losses.items()}

    def training_step(self, state: Any, key: jax.Array) -> tuple[Any, dict]:
        """Collect ``num_envs * train_frequency`` transitions, then (once
        ``learning_starts`` env steps are in) ``gradient_steps`` updates, then
        :meth:`after_learning`. Metrics: ``train/episode_return``,
        ``train/episode_length`` (completed episodes, raw rewards) and the
        algorithm's. With observation statistics, the updates normalise with
        the statistics after this step's collection, which the new state keeps."""
        collect_key, learn_key = jax.random.split(key)
        env_state, obs, buffer, obs_stats, infos = self.get_experience(state, collect_key)
        carry = self.anneal_learning_rates(self.apply_hyperparams(self.carry_of(state)), state.step)
        if any(field.name == "buffer" for field in dataclasses.fields(carry)):
            carry = carry.replace(buffer=buffer)  # updates that write to it (priorities)
        carry, losses = self.learn(carry, buffer, obs_stats, state.step, learn_key)
        learned = self.learning(state.step).astype(jnp.int32) * self.config.gradient_steps
        stats = {} if obs_stats is None else {"obs_stats": obs_stats}
        new_state = state.replace(**{  # a carry field (TD3's ``updates``) wins
            "step": state.step + 1, "updates": state.updates + learned,
            "env_state": env_state, "obs": obs, "buffer": buffer, **stats,
            **{field.name: getattr(carry, field.name) for field in dataclasses.fields(carry)}})
        new_state, metrics = self.after_learning(state, new_state, losses)
        return new_state, {**episode_metrics(infos), **metrics}
