"""ERL as a :class:`jaxtrainer.Module`: one ``training_step`` is one generation.

ERL (Khadka and Tumer 2018, "Evolution-Guided Policy Gradient in Reinforcement
Learning", NeurIPS, arXiv:1805.07917; reference code ``ShawK91/erl_paper``,
``run_erl.py`` and ``core/mod_neuro_evo.py``) evolves a population of ``P``
deterministic actors with a genetic algorithm, trains an off-policy actor-critic
learner on a replay buffer that every actor's experience fills, and copies the
learner's actor into the population every ``rl_injection_every`` generations.
Here the learner is :class:`~jaxtrainer.algorithms.td3.TD3` (as EvoRL's
``erl_ga.py``, ``EMI-Group/evorl``); the paper's DDPG is the same learner with
``twin_critics=False, policy_noise=0, policy_delay=1``
(:class:`~jaxtrainer.algorithms.ddpg.DDPG`). One generation:

1. **evaluate**: every member plays ``episodes_per_member`` fresh episodes
   greedily (fitness = mean return of the first episode of each env), and the
   RL actor plays ``rl_episodes`` with TD3's Gaussian exploration noise, all for
   ``rollout_steps`` env steps (``env.max_episode_steps`` by default) and all
   into the replay buffer
   (:func:`~jaxtrainer.algorithms.member_rollout.rollout_members`, shared with
   CEM-RL);
2. **GA** (:func:`~jaxtrainer.algorithms.genetic.ga_step`): elites kept in
   their slots, tournament selection, crossover, mutation for the other slots;
3. **learn**: ``critic_steps`` TD3 updates (:meth:`TD3.update
   <jaxtrainer.algorithms.td3.TD3.update>`: a critic step each, the actor and
   the targets every ``policy_delay``-th) on batches of ``batch_size`` from the
   buffer, once it holds ``learning_starts`` env steps;
4. **inject**: when the learner has trained and ``(generation + 1) %
   rl_injection_every == 0``, the RL actor replaces the offspring in the slot of
   the generation's worst member (the paper's "copy pi_rl into the weakest
   actor"; reference ``rl_to_evo(rl_agent.actor, pop[worst_index])``).

Constants (defaults) as the paper's reference ``run_erl.py`` / ``SSNE``:
``population_size = 10``; ``elite_fraction = 0.1`` (0.2 for Reacher and
Walker2d, 0.3 for Hopper and Ant); tournaments of 3; ``mutation_prob = 0.9``; a
mutated weight matrix has each weight picked with probability 0.1 and moved by
``N(0, (0.1 |w|)^2)``, or with probability 0.05 each by ``N(0, (10 |w|)^2)``
(super mutation) or reset to ``N(0, 1)``; ``episodes_per_member = 1`` (the
reference's ``num_evals``; 3 for Walker2d, 5 for Hopper and Reacher); one
exploring RL episode per generation; critic steps per generation = the env steps
of the generation (``frac_frames_train = 1``). The injection period: the
reference's ``synch_period`` is 1 generation for Hopper and Ant and 10 for the
others, EvoRL's ``erl-ga.yaml`` ``rl_injection_interval`` is 1; the default
here is 1. Crossover as EvoRL's ``erl-ga.yaml`` (every parent pair,
``num_crossover_frac = 0.1`` of the units; the reference crosses only the slots it
refills). The learner's constants are TD3's (:class:`~jaxtrainer.algorithms.td3.TD3Config`,
EvoRL's ERL uses TD3 with lr 3e-4, tau 0.005, 256-256 networks); the paper's
DDPG (``run_erl.py``: tau 0.001, batch 128, layer-normalised networks) is not
reproduced beyond the switches above.

Devices, as CEM-RL: the population is replicated state and sharded for step 1
(device ``d`` rolls out members ``d*L .. d*L+L-1``,
:class:`~jaxtrainer.distributed.MemberLayout`, and ``rl_episodes /
(episodes_per_member * num_devices)`` copies of the RL actor, into its own share
of the replay buffer); fitness is gathered bit for bit, so step 2 (replicated
keys) gives the same population on every device; step 3 is TD3's data-parallel
update (each device samples ``batch_size / num_devices`` from its share,
gradients averaged with :func:`~jaxtrainer.distributed.averaged_update`), so the
critic, the RL actor, their targets and optimizer states stay bitwise equal on
every device. Member ``i``'s rollout key is ``fold_in(key, i)`` and the RL
actor's ``j``-th copy's ``fold_in(key, P + j)``, whatever the device count.

Differences from the reference, on purpose: rollouts have a fixed length (so
``env_steps_per_step`` is exact) and the critic-step count is fixed per
generation; the RL actor explores with TD3's Gaussian noise instead of
Ornstein-Uhlenbeck noise; the GA has the fixed shapes described in
:mod:`~jaxtrainer.algorithms.genetic`; time-limit truncation bootstraps.
Optional (off by default, not in the reference): observation normalisation
and reward scaling as CEM-RL's (the statistics are fixed during a rollout and
updated after it; the learner normalises its batches with them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms._config_parts import composes, values
from jaxtrainer.algorithms._evaluated import EvaluatedParamsPolicy
from jaxtrainer.algorithms.evolution import ParamsSearch, ReplayAndSearch, move_mean_toward
from jaxtrainer.algorithms.genetic import check_ga, ga_step, inject, num_elites
from jaxtrainer.algorithms.hyperparams import config_record
from jaxtrainer.algorithms.member_rollout import rollout_members
from jaxtrainer.algorithms.offpolicy_config import ReplayLearnerConfig, configure
from jaxtrainer.algorithms.td3 import TD3, TD3Carry, TD3Config, TD3LearnerConfig, check_td3_learner
from jaxtrainer.distributed import axis_size, fold_in_device
from jaxtrainer.distributed._members import MemberLayout, rank
from jaxtrainer.metrics import Mean
from jaxtrainer.module import Module


@dataclasses.dataclass(frozen=True)
@composes(TD3LearnerConfig)
class ERLConfig(ReplayLearnerConfig):
    """ERL hyperparameters (sources in the module docstring). Sizes are global
    (over all devices).

    The learner's fields are :class:`~jaxtrainer.algorithms.td3.TD3Config`'s
    without how TD3 steps its envs (which ERL's rollouts replace), with a
    larger buffer and learning from the first generation; ERL adds the GA's and
    the rollouts' fields.

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make` (continuous actions).
      population_size: ``P`` evolved actors (>= 2; a multiple of the device count).
      elite_fraction: ``K = max(1, int(elite_fraction * P))`` elites (``K < P``), in [0, 1].
      tournament_size: members per selection tournament (>= 1).
      crossover_prob: probability that a parent pair is crossed, in [0, 1].
      crossover_fraction: probability that a unit (a neuron's incoming weights,
        a bias entry) is swapped in a crossed pair, in [0, 1].
      mutation_prob: probability that an offspring is mutated, in [0, 1].
      mutation_fraction: probability that a weight of a mutated matrix changes, in [0, 1].
      mutation_strength: std of a normal mutation, relative to ``|w|`` (>= 0).
      super_mutation_prob, reset_prob: probabilities (summing to at most 1) that a
        changing weight is super-mutated or reset to ``N(0, 1)``.
      super_mutation_strength: std of a super mutation, relative to ``|w|`` (>= 0).
      weight_limit: mutated weights are clipped to ``[-weight_limit, weight_limit]`` (> 0).
      episodes_per_member: fresh episodes (parallel envs) per member per generation.
      rollout_steps: env steps of every env; ``None``: the env's time limit.
      rl_episodes: exploring episodes of the RL actor per generation (>= 0; a
        multiple of ``episodes_per_member``, and ``rl_episodes /
        episodes_per_member`` a multiple of the device count).
      rl_injection_every: generations between injections of the RL actor (>= 1).
      evolution: how the population changes: ``"ga"`` (the genetic algorithm
        above, ERL's) or a distribution-based evosax algorithm sampling the
        population around a mean (:class:`~jaxtrainer.algorithms.evolution.ParamsSearch`):
        ``"SimpleES"`` is EvoRL's ERL-ES (the mean becomes the log-weighted top
        ``K`` members, a fixed ``es_std``), ``"Open_ES"`` its ERL-EDA (OpenAI-ES,
        Adam at ``es_learning_rate``). With a search the champion is its mean.
      rl_injection: ``"member"``: the RL actor replaces a member (the GA's worst
        slot; with a search, the last member of the next population, which the
        search's update then weighs by its fitness as any sample: EvoRL's ERL-ES);
        ``"mean"`` (a search only): the search's mean moves ``rl_injection_stepsize``
        of the way to the RL actor (EvoRL's ERL-EDA).
      rl_injection_stepsize: in [0, 1]; 1 puts the mean on the RL actor.
      es_std: the search's standard deviation (EvoRL: 0.02 for ERL-ES, 0.03 for ERL-EDA).
      es_learning_rate: Adam's step size for the search's mean (OpenAI-ES; EvoRL's
        ERL-EDA: 0.05); ``None``: the algorithm's own update (SimpleES: the
        weighted elites).
      critic_steps: TD3 updates per generation once learning started (>= 1);
        ``None``: the env steps of one generation.
      buffer_size: replay capacity in transitions, rounded down to a multiple of
        the rollout envs ``(P + rl_episodes / episodes_per_member) * episodes_per_member``.
      batch_size: global batch of every update.
      learning_starts: env steps in the buffer before the first update (counting
        the current generation's rollouts).
      lr: Adam learning rate of the learner's actor and critic(s).
      gamma: discount factor.
      tau: Polyak rate of the learner's target networks.
      twin_critics: TD3's twin critics and clipped double-Q target; ``False``:
        one critic (DDPG's, with ``policy_noise=0`` and ``policy_delay=1``).
      policy_delay, policy_noise, noise_clip: TD3's delayed actor updates and
        target smoothing, as in :class:`~jaxtrainer.algorithms.td3.TD3Config`.
      exploration_noise: std of the RL actor's behaviour noise during its
        episodes, in units of the action scale.
      hidden_sizes, activation: the hidden layers of every actor (the
        population's and the learner's) and of the critic(s).
      eval_episodes: fresh greedy episodes of the champion per evaluation.
      normalize_observations, reward_scaling: as in
        :class:`~jaxtrainer.algorithms.sac.SACConfig`.

    Raises:
      ValueError: a bad value, naming ``ERLConfig.<field>``.
    """

    population_size: int = 10
    elite_fraction: float = 0.1
    tournament_size: int = 3
    crossover_prob: float = 1.0
    crossover_fraction: float = 0.1
    mutation_prob: float = 0.9
    mutation_fraction: float = 0.1
    mutation_strength: float = 0.1
    super_mutation_prob: float = 0.05
    super_mutation_strength: float = 10.0
    reset_prob: float = 0.05
    weight_limit: float = 1e6
    episodes_per_member: int = 1
    rollout_steps: int | None = None
    rl_episodes: int = 1
    rl_injection_every: int = 1
    evolution: str = "ga"
    rl_injection: str = "member"
    rl_injection_stepsize: float = 1.0
    es_std: float = 0.02
    es_learning_rate: float | None = None
    critic_steps: int | None = None
    # the learner's defaults that differ from TD3's
    buffer_size: int = 1_000_000
    learning_starts: int = 0

    def __post_init__(self) -> None:
        """The learner's checks (:mod:`~jaxtrainer.algorithms.offpolicy_config`'s and
        :func:`~jaxtrainer.algorithms.td3.check_td3_learner`), then the GA's and the
        rollouts' fields and how they fit together.

        Raises:
          ValueError: a bad value, naming ``ERLConfig.<field>``.
        """
        super().__post_init__()
        check_td3_learner(self)
        arguments.check_fields(self, arguments.positive_int, (
            "population_size", "episodes_per_member", "rl_injection_every"), allow_none=False)
        arguments.check_fields(self, arguments.positive_int, ("rollout_steps", "critic_steps"))
        arguments.check_fields(self, arguments.non_negative_int, ("rl_episodes",))
        check_ga(self)
        arguments.check_fields(self, arguments.number, ("rl_injection_stepsize",), low=0, high=1)
        arguments.check_fields(self, arguments.number, ("es_std",), low=0, low_open=True)
        arguments.check_fields(self, arguments.number, ("es_learning_rate",), low=0,
                               low_open=True, allow_none=True)
        arguments.check_fields(self, arguments.one_of, ("rl_injection",),
                               choices=("member", "mean"))
        if self.rl_injection == "mean" and self.evolution == "ga":
            raise arguments.field_error(self, "rl_injection", "mean",
                                        " moves a search distribution's mean; evolution='ga' has "
                                        "none: set evolution (e.g. 'Open_ES') or "
                                        "rl_injection='member'")
        if self.rl_episodes % self.episodes_per_member:
            raise arguments.field_error(self, "rl_episodes", self.rl_episodes,
                                        ": expected a multiple of episodes_per_member="
                                        f"{self.episodes_per_member} (the RL actor's episodes are "
                                        "played in copies of episodes_per_member envs)")

    @property
    def num_elites(self) -> int:
        """``K = max(1, int(elite_fraction * population_size))``."""
        return num_elites(self.population_size, self.elite_fraction)


@struct.dataclass
@composes(ReplayAndSearch, after_own=True)
class ERLState:
    """Training state. Replicated unless noted.

    Attributes:
      population: the ``P`` actors' parameters, leaves ``[P, ...]`` (the layout of
        :class:`~jaxtrainer.algorithms.networks.DeterministicActor`'s parameters);
        to be evaluated by the next generation.
      rl: the learner: RL actor, critic(s), targets, optimizer states and update count.
      generation: ``int32[]``, generations done.
      champion: ``int32[]``, the slot of the last evaluated generation's best
        member (an elite, unchanged): what :meth:`ERL.evaluation_step` evaluates.
      injected: ``int32[]``, the slot the RL actor was injected into at the end of
        the last generation, ``-1`` when it was not.
      buffer, obs_stats, search: the replay and the search
        (:class:`~jaxtrainer.algorithms.evolution.ReplayAndSearch`); a search with
        ``evolution`` other than ``"ga"`` (its mean is the champion).
    """

    population: Any
    rl: TD3Carry
    generation: jax.Array
    champion: jax.Array
    injected: jax.Array


class ERL(EvaluatedParamsPolicy, Module):
    """ERL on a continuous-action :mod:`jaxtrainer.envs` environment.

    ``training_step`` is one generation (see the module docstring) and consumes
    ``env_steps_per_step = (population_size * episodes_per_member + rl_episodes)
    * rollout_steps`` env steps over all devices. Metrics: ``train/episode_return``
    and ``train/episode_length`` (every episode completed in the generation's
    rollouts, the RL actor's included), ``fitness/mean``, ``fitness/max``,
    ``fitness/min`` (the population's), ``rl/episode_return`` (the RL actor's
    exploring episodes), ``ga/rl_elite`` (the fraction of injected RL actors that
    the next generation kept as elites: the paper's "selection rate"), and once
    learning started ``loss/critic`` and ``loss/actor`` (TD3's).
    :meth:`evaluation_step`: the champion (the best member of the last
    generation, kept as an elite) greedily on ``eval_episodes`` fresh episodes
    (:meth:`greedy_policy` with :meth:`policy_params`).

    Args:
      config: hyperparameters; :class:`ERLConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.

    Raises:
      ValueError: a bad config value (see :class:`ERLConfig`), a discrete env, or
        a ``buffer_size`` smaller than the number of rollout envs.

    Attributes:
      learner: the :class:`~jaxtrainer.algorithms.td3.TD3` whose ``update``,
        ``learn``, networks and policy ERL uses (its ``num_envs`` are the
        rollout envs, ``train_frequency`` the rollout steps and
        ``gradient_steps`` the critic steps of a generation).
    """

    name = "ERL"
    step_key_per_device = False  # members' keys depend on (seed, generation, i) only

    def __init__(self, config: ERLConfig | None = None, *, env: envs.Env | None = None,
                 **overrides: Any) -> None:
        configure(self, config or ERLConfig(), env, overrides, discrete_actions=False)
        cfg = self.config
        self.population_size = cfg.population_size
        self.num_elites = cfg.num_elites
        self.rl_actors = cfg.rl_episodes // cfg.episodes_per_member
        self.rollout_steps = cfg.rollout_steps or self.env.max_episode_steps
        self.num_envs = (self.population_size + self.rl_actors) * cfg.episodes_per_member
        self.env_steps_per_step = self.num_envs * self.rollout_steps
        self.critic_steps = self.env_steps_per_step if cfg.critic_steps is None \
            else cfg.critic_steps
        if cfg.buffer_size < self.num_envs:
            raise ValueError(f"ERL: buffer_size={cfg.buffer_size} is smaller than the "
                             f"{self.num_envs} rollout envs (one buffer row each)")
        self.learner = TD3(TD3Config(
            env=cfg.env, num_envs=self.num_envs, train_frequency=self.rollout_steps,
            gradient_steps=self.critic_steps,
            buffer_size=cfg.buffer_size // self.num_envs * self.num_envs,
            batch_size=cfg.batch_size, learning_starts=cfg.learning_starts, gamma=cfg.gamma,
            tau=cfg.tau, hidden_sizes=cfg.hidden_sizes, activation=cfg.activation,
            network=cfg.network, eval_episodes=cfg.eval_episodes,
            **values(TD3LearnerConfig, cfg)), env=self.env)
        self.buffer = self.learner.buffer
        obs = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        shapes = jax.eval_shape(lambda: self.learner.actor.init(jax.random.key(0), obs))
        self.num_params = sum(math.prod(s.shape) for s in jax.tree.leaves(shapes))
        self.search = None if cfg.evolution == "ga" else ParamsSearch(
            cfg.evolution, lambda k: self.learner.actor.init(k, obs), self.population_size,
            std=cfg.es_std, learning_rate=cfg.es_learning_rate, num_elites=self.num_elites)

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices`` (before compiling).

        Raises:
          ValueError: ``population_size``, the RL actor's copies ``rl_episodes /
            episodes_per_member``, ``batch_size`` or ``eval_episodes`` is not a
            multiple of ``num_devices`` (the message names both numbers).
        """
        arguments.split_over_devices(self.name, num_devices, population_size=self.population_size)
        if self.rl_actors % num_devices:
            raise ValueError(
                f"{self.name}: rl_episodes={self.config.rl_episodes} plays "
                f"{self.rl_actors} copies of the RL actor (episodes_per_member="
                f"{self.config.episodes_per_member} each), not divisible by the {num_devices} "
                f"devices; use a multiple of {num_devices * self.config.episodes_per_member}")
        self.buffer.validate(num_devices, self.name)
        arguments.split_over_devices(self.name, num_devices, eval_episodes=self.config.eval_episodes)

    def hparams(self) -> dict[str, Any]:
        return config_record(
            self.config, num_params=self.num_params, num_elites=self.num_elites,
            rollout_steps=self.rollout_steps, critic_steps=self.critic_steps,
            buffer_capacity=self.buffer.capacity, env_steps_per_generation=self.env_steps_per_step)

    # ---- policies -----------------------------------------------------------
    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs[n, ...], key) -> float32[n, action_size]``: an actor
        of the population (or the RL actor) on raw observations; ``params`` is
        :meth:`policy_params` (the learner's
        :meth:`~jaxtrainer.algorithms.td3.TD3.greedy_policy`)."""
        return self.learner.greedy_policy()

    def policy_params(self, state: ERLState) -> Any:
        """What :meth:`greedy_policy` takes: the champion's parameters
        (``state.population`` at ``state.champion``; with a search, its mean), or
        with ``normalize_observations`` the pair ``(params, state.obs_stats)``."""
        if self.search is not None:
            champion = self.search.mean(state.search)
        else:
            champion = jax.tree.map(lambda x: x[state.champion], state.population)
        if self.config.normalize_observations:
            return champion, state.obs_stats
        return champion

    # ---- Module -------------------------------------------------------------
    def init_state(self, key: jax.Array) -> ERLState:
        """``P`` freshly initialised actors (independent keys), the learner's
        networks and an empty buffer share per device (:meth:`TD3.init_state
        <jaxtrainer.algorithms.td3.TD3.init_state>`, whose envs are not kept)."""
        population_key, learner_key = jax.random.split(key)
        obs = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        search = None
        if self.search is None:
            population = jax.vmap(lambda k: self.learner.actor.init(k, obs))(
                jax.random.split(population_key, self.population_size))
        else:
            init_key, ask_key = jax.random.split(population_key)
            population, search = self.search.ask(self.search.init_state(init_key), ask_key)
        learner = self.learner.init_state(learner_key)
        return ERLState(population=population, rl=self.learner.carry_of(learner),
                        generation=jnp.zeros((), jnp.int32), champion=jnp.zeros((), jnp.int32),
                        injected=jnp.full((), -1, jnp.int32), buffer=learner.buffer,
                        obs_stats=learner.obs_stats, search=search)

    def rollout(self, state: ERLState, key: jax.Array) -> tuple[
            jax.Array, jax.Array, Any, normalization.RunningStatistics | None, dict]:
        """Step 1 on this device: its members greedily and its copies of the RL
        actor with exploration noise, into its buffer share.

        Returns:
          ``(fitness float32[P] (gathered, replicated), rl_returns float32[C_local],
          buffer, obs_stats, episode metrics)``.
        """
        cfg, n = self.config, axis_size()
        layout = MemberLayout(self.population_size, n)  # validate: no padding
        params, keys = layout.local(state.population), layout.keys(key)
        noise = None
        if self.rl_actors:
            rl_layout = MemberLayout(self.rl_actors, n)
            copies = jax.tree.map(lambda x: jnp.broadcast_to(x, (self.rl_actors,) + x.shape),
                                  state.rl.actor_params)
            params = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), params,
                                  rl_layout.local(copies))
            keys = jnp.concatenate(
                [keys, rl_layout.keys(key, self.population_size + rl_layout.ids())])
            noise = jnp.concatenate([jnp.zeros((layout.local_count,), jnp.float32),
                                     jnp.full((rl_layout.local_count,), cfg.exploration_noise,
                                              jnp.float32)])
        returns, buffer, obs_stats, metrics = rollout_members(
            self.env, self.learner.act, params, keys, self.buffer, state.buffer,
            cfg.episodes_per_member, self.rollout_steps, state.obs_stats, noise)
        fitness = layout.gather(returns[:layout.local_count])
        return fitness, returns[layout.local_count:], buffer, obs_stats, metrics

    def training_step(self, state: ERLState, key: jax.Array) -> tuple[ERLState, dict]:
        """One generation: evaluate (and explore), GA, TD3 updates, injection.
        ``key`` is the same on every device (``step_key_per_device = False``)."""
        cfg = self.config
        rollout_key, ga_key, learn_key = (jax.random.fold_in(key, i) for i in range(3))
        fitness, rl_returns, buffer, obs_stats, metrics = self.rollout(state, rollout_key)

        search, es_metrics = state.search, {}
        if self.search is None:
            population, order = ga_step(state.population, fitness, ga_key, cfg)
        else:
            search, es_metrics = self.search.tell(state.search, state.population, fitness)
            order = rank(fitness)

        rl, losses = self.learner.learn(state.rl, buffer, obs_stats, state.generation,
                                        fold_in_device(learn_key))
        due = (state.generation + 1) % cfg.rl_injection_every == 0
        do = jnp.logical_and(self.learner.learning(state.generation), due)
        if self.search is None:
            slot = order[-1]  # the worst member's
        else:
            if cfg.rl_injection == "mean":
                search = jax.tree.map(lambda a, b: jnp.where(do, a, b),
                                      move_mean_toward(search, rl.actor_params,
                                                       cfg.rl_injection_stepsize), search)
                do = jnp.zeros((), bool)
            population, search = self.search.ask(search, ga_key)
            slot = jnp.asarray(self.population_size - 1, jnp.int32)
        population = inject(population, rl.actor_params, slot, do)

        was = state.injected >= 0  # did last generation's injected actor stay an elite?
        elite = jnp.any(order[:self.num_elites] == state.injected)
        metrics.update(losses)
        metrics.update(es_metrics)
        metrics.update(MemberLayout(self.population_size).fitness_metrics(fitness))
        metrics["ga/rl_elite"] = Mean(jnp.where(was, elite, False).astype(jnp.float32),
                                      was.astype(jnp.float32))
        if self.rl_actors:
            metrics["rl/episode_return"] = Mean.of(rl_returns)
        new_state = ERLState(population=population, rl=rl, generation=state.generation + 1,
                             champion=order[0], injected=jnp.where(do, slot, -1),
                             buffer=buffer, obs_stats=obs_stats, search=search)
        return new_state, metrics

__all__ = ["ERL", "ERLConfig", "ERLState"]
