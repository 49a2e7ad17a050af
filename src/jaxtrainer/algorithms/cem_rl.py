"""CEM-RL as a :class:`jaxtrainer.Module`: one ``training_step`` is one generation.

CEM-RL (Pourchot and Sigaud 2019, "CEM-RL: Combining evolutionary and
gradient-based methods for policy search", arXiv:1810.01222; reference code
``apourchot/CEM-RL``, ``es_grad.py`` and ``ES.py`` ``sepCEM``) searches the
flattened parameters ``theta: float32[D]`` of a deterministic actor with the
cross-entropy method (CEM) over a diagonal Gaussian ``N(mu, diag(var))``, and
moves half of every population with TD3 gradient steps from one shared critic.
One generation (the paper's Algorithm 1):

1. **sample** ``P`` actors ``theta_i = mu + sqrt(var) * eps_i``
   (:func:`~jaxtrainer.algorithms.cem.sample_population`: antithetic by default;
   member ``i`` depends on (seed, generation, ``i``) only, whatever the device count);
2. **improve** the first ``num_rl_members`` (``P / 2``) actors with the critic
   (once ``learning_starts`` env steps are in the replay buffer): ``critic_steps``
   TD3 critic updates, one block per RL member, then ``actor_steps`` TD3 actor
   steps of every RL member (:func:`~jaxtrainer.algorithms.member_learning.improve_members`).
   The improved actors replace the samples in the population;
3. **evaluate** every actor on ``episodes_per_member`` fresh episodes
   (``rollout_steps`` env steps each, ``env.max_episode_steps`` by default),
   storing every transition in the replay buffer; fitness = mean return of the
   first episode of each env (a partial return when ``rollout_steps`` cuts it);
4. **CEM update** (``sepCEM.tell``) from the fitness of all ``P`` actors
   (:func:`~jaxtrainer.algorithms.cem.sep_cem_update`: the mean and variance
   refitted to the ``K_e = num_elites`` best, ``P / 2``, log-weighted by rank).

Devices: the population is sharded for step 3 (each device rolls out ``P /
num_devices`` consecutive members, vmapped, into its own share of the replay
buffer; the population's :class:`~jaxtrainer.distributed.MemberLayout`), fitness
is gathered bit for bit, and steps 1, 2 and 4 run
replicated: the critic and the RL actors are trained data-parallel (each device
samples ``batch_size / num_devices`` of every global batch from its own share,
gradients averaged with :func:`~jaxtrainer.distributed.averaged_update`), so the
search distribution, the critic and its optimizer state stay bitwise equal on
every device. ``P`` must be a multiple of the device count (no padding: a
padded member's transitions would enter the replay buffer).

Differences from the reference, on purpose: the RL members are improved in
parallel (vmapped) after all critic blocks instead of one after another between
them, so every RL member climbs the same, most-trained critic; rollouts have a
fixed length so ``env_steps_per_step`` is exact (``P * episodes_per_member *
rollout_steps``), and critic/actor step counts are fixed numbers per generation
(the reference uses the previous generation's env-step count, which is the
default here); learning starts at the first generation that begins with
``learning_starts`` env steps in the buffer. Time-limit truncation bootstraps.

Optional, off by default (not in the reference): observation normalisation and
reward scaling as SAC's and TD3's (``normalize_observations``,
``reward_scaling``): replicated running statistics that step 2 normalises its
sampled (raw) batches with (rewards scaled in the critic's target) and step 3's
members act with, fixed over the generation and updated after it
(:mod:`~jaxtrainer.algorithms.member_rollout`). Fitness and logged returns are raw.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms import env_steps, normalization
from jaxtrainer.algorithms._config_parts import composes
from jaxtrainer.algorithms._evaluated import EvaluatedParamsPolicy
from jaxtrainer.algorithms.cem import check_cem, sample_population, sep_cem_update
from jaxtrainer.algorithms.evolution import ParamsSearch, ReplayAndSearch, elite_weights
from jaxtrainer.algorithms.hyperparams import config_record
from jaxtrainer.algorithms.member_learning import improve_members
from jaxtrainer.algorithms.member_rollout import rollout_members
from jaxtrainer.algorithms.networks import ACTIVATIONS, DeterministicActor, TwinCritic
from jaxtrainer.algorithms.normalization import learning_batch, normalizing_policy
from jaxtrainer.algorithms.offpolicy_config import check_normalization, configure
from jaxtrainer.algorithms.replay import ReplayBuffer, Transition
from jaxtrainer.algorithms.td3 import deterministic_action, td3_actor_loss, td3_critic_loss
from jaxtrainer.algorithms.torsos import NetworkConfig, network_config, torso_factory
from jaxtrainer.distributed import axis_size, fold_in_device
from jaxtrainer.distributed._members import MemberLayout
from jaxtrainer.metrics import Last, Mean
from jaxtrainer.module import Module


# ---- the module ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CEMRLConfig:
    """CEM-RL hyperparameters (defaults: the reference ``es_grad.py``). Sizes are
    global (over all devices).

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make` (continuous actions).
      population_size: ``P`` actors per generation (>= 2; even when ``antithetic``;
        a multiple of the device count).
      num_rl_members: actors improved by the critic each generation (the first
        ones); ``None``: ``P // 2`` (reference ``n_grad = 5`` for ``P = 10``).
      num_elites: ``K_e``, members the CEM update keeps; ``None``: ``P // 2``.
      antithetic: mirrored sampling ``eps_{i+P/2} = -eps_i``.
      episodes_per_member: fresh episodes (parallel envs) per actor per generation.
      rollout_steps: env steps of each of those envs; ``None``: the env's time
        limit (one whole episode; envs that terminate early auto-reset and keep
        collecting transitions until then).
      init_variance: initial variance of every coordinate (reference ``sigma_init``).
      damp_init, damp_limit, damp_tau: the added noise ``eps`` (reference
        ``damp``, ``damp_limit`` and ``tau = 0.95``), a variance.
      critic_steps: critic updates per generation (split into ``num_rl_members``
        equal blocks); ``None``: the env steps of one generation (reference).
      actor_steps: gradient steps of every RL actor per generation; ``None``: the
        env steps of one generation (reference).
      buffer_size, batch_size: replay capacity and global batch (transitions).
      learning_starts: env steps collected before the first critic/actor update
        (reference ``start_steps``).
      actor_lr, critic_lr: Adam learning rates.
      gamma: discount factor.
      tau: Polyak rate of the target critic (every critic update).
      policy_noise, noise_clip: TD3 target smoothing, in units of the action scale.
      actor_hidden_sizes, actor_activation: the actor MLP (reference: 400-300 tanh).
      critic_hidden_sizes, critic_activation: each of the twin critics (reference:
        400-300 leaky ReLU; ``relu`` here).
      eval_episodes: fresh greedy episodes of the mean actor per evaluation.
      normalize_observations: every actor (sampled, improved, evaluated) and the
        critic see observations normalised with running statistics of every
        observation the rollouts collected (see the module docstring).
      reward_scaling: rewards are multiplied by it in the critic's targets only;
        fitness and logged returns stay raw. A number >= 0.
      network: the torso of the actor and of each critic before their hidden
        layers (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`; default
        ``mlp``: the flattened observation).
      evolution: the search distribution: ``"sep_cem"`` (the CEM above) or a
        distribution-based evosax algorithm
        (:class:`~jaxtrainer.algorithms.evolution.ParamsSearch`), e.g.
        ``"Open_ES"``: EvoRL's CEMRL-OpenES (``EMI-Group/evorl``,
        ``cemrl_openes.py``): OpenAI-ES samples (antithetic, its own), the RL
        members improved as here, and the ES's gradient estimate taken from
        every member's actual offset from the mean, the improved ones' included.
        ``antithetic``, ``num_elites`` (but for SimpleES), ``init_variance`` and
        the ``damp_*`` fields are the CEM's.
      es_std: the search's standard deviation (EvoRL's cemrl-openes: 0.03).
      es_learning_rate: the search's Adam step size (EvoRL: 0.05); ``None``:
        the algorithm's own update.
    """

    env: str = "Pendulum-v1"
    population_size: int = 10
    num_rl_members: int | None = None
    num_elites: int | None = None
    antithetic: bool = True
    episodes_per_member: int = 1
    rollout_steps: int | None = None
    init_variance: float = 1e-3
    damp_init: float = 1e-3
    damp_limit: float = 1e-5
    damp_tau: float = 0.95
    critic_steps: int | None = None
    actor_steps: int | None = None
    buffer_size: int = 1_000_000
    batch_size: int = 100
    learning_starts: int = 10_000
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    actor_hidden_sizes: tuple[int, ...] = (400, 300)
    actor_activation: str = "tanh"
    critic_hidden_sizes: tuple[int, ...] = (400, 300)
    critic_activation: str = "relu"
    eval_episodes: int = 16
    normalize_observations: bool = False
    reward_scaling: float = 1.0
    network: NetworkConfig = NetworkConfig()
    evolution: str = "sep_cem"
    es_std: float = 0.03
    es_learning_rate: float | None = 0.05

    def __post_init__(self) -> None:
        arguments.check_fields(self, arguments.sizes, ("actor_hidden_sizes", "critic_hidden_sizes"))
        arguments.check_fields(self, arguments.number, ("es_std",), low=0, low_open=True)
        arguments.check_fields(self, arguments.number, ("es_learning_rate",), low=0,
                               low_open=True, allow_none=True)
        object.__setattr__(self, "network", network_config(self.network, "CEMRLConfig"))
        arguments.check_fields(self, arguments.positive_int, ("population_size", "episodes_per_member",
                                                      "batch_size", "buffer_size",
                                                      "eval_episodes"), allow_none=False)
        check_cem(self)
        arguments.check_fields(self, arguments.non_negative_int, ("learning_starts",))
        arguments.check_fields(self, arguments.number, ("tau",), low=0, high=1, low_open=True)
        arguments.check_fields(self, arguments.number, ("gamma",), low=0, high=1)
        arguments.check_fields(self, arguments.number, ("actor_lr", "critic_lr", "policy_noise",
                                                        "noise_clip"), low=0)
        arguments.check_fields(self, arguments.one_of, ("actor_activation", "critic_activation"),
                               choices=tuple(ACTIVATIONS))
        check_normalization(self)


@struct.dataclass
@composes(ReplayAndSearch, after_own=True)
class CEMRLState:
    """Training state. Replicated unless noted.

    Attributes:
      mean: ``float32[D]``, the CEM mean: the flattened actor parameters
        (``jax.flatten_util.ravel_pytree`` order).
      var: ``float32[D]``, the diagonal variance.
      damp: ``float32[]``, the noise ``eps`` added to ``var`` at the last update.
      critic_params, target_critic_params: the shared twin critic and its target.
      critic_opt: the critic's Adam state.
      generation: ``int32[]``, generations done.
      buffer, obs_stats, search: the replay and the search
        (:class:`~jaxtrainer.algorithms.evolution.ReplayAndSearch`); a search with
        ``evolution`` other than ``"sep_cem"`` (``mean`` is its mean; ``var`` and
        ``damp`` stay unused).

    There are no env states: every generation starts fresh episodes (step 3).
    """

    mean: jax.Array
    var: jax.Array
    damp: jax.Array
    critic_params: Any
    target_critic_params: Any
    critic_opt: optax.OptState
    generation: jax.Array


class CEMRL(EvaluatedParamsPolicy, Module):
    """CEM-RL on a continuous-action :mod:`jaxtrainer.envs` environment.

    ``training_step`` is one generation (see the module docstring) and consumes
    ``env_steps_per_step = population_size * episodes_per_member * rollout_steps``
    env steps over all devices. Metrics: ``train/episode_return`` and
    ``train/episode_length`` (episodes completed in the generation's rollouts, i.e.
    the mean over members for one whole episode each), ``fitness/mean``,
    ``fitness/max``, ``fitness/min`` (the best and worst member of a log
    interval: :class:`~jaxtrainer.Max` / :class:`~jaxtrainer.Min`),
    ``fitness/rl_mean`` and ``fitness/es_mean`` (RL-improved and sampled-only
    members), ``cem/std`` (mean of ``sqrt(var)``) and ``cem/damp`` (both as of
    the interval's last generation, :class:`~jaxtrainer.Last`), and once
    learning started ``loss/critic`` and ``loss/actor`` (the mean over the
    generation's updates). :meth:`evaluation_step`: the CEM
    mean actor, greedily, on ``eval_episodes`` fresh episodes
    (:meth:`greedy_policy` with :meth:`policy_params`).

    Args:
      config: hyperparameters; :class:`CEMRLConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.

    Raises:
      ValueError: a bad config value (see :class:`CEMRLConfig`), a discrete env,
        ``critic_steps`` not a multiple of ``num_rl_members``, or a
        ``buffer_size`` that is not a multiple of ``P * episodes_per_member``.
    """

    name = "CEMRL"
    step_key_per_device = False  # members' keys depend on (seed, generation, i) only

    def __init__(self, config: CEMRLConfig | None = None, *, env: envs.Env | None = None,
                 **overrides: Any) -> None:
        configure(self, config or CEMRLConfig(), env, overrides, discrete_actions=False)
        cfg = self.config
        p = cfg.population_size
        self.population_size = p
        self.num_rl_members = p // 2 if cfg.num_rl_members is None else cfg.num_rl_members
        self.num_elites = p // 2 if cfg.num_elites is None else cfg.num_elites
        self.rollout_steps = cfg.rollout_steps or self.env.max_episode_steps
        self.num_envs = p * cfg.episodes_per_member
        self.env_steps_per_step = self.num_envs * self.rollout_steps
        self.critic_steps = self.env_steps_per_step if cfg.critic_steps is None else cfg.critic_steps
        self.actor_steps = self.env_steps_per_step if cfg.actor_steps is None else cfg.actor_steps
        if self.num_rl_members and self.critic_steps % self.num_rl_members:
            raise ValueError(f"CEMRL: critic_steps={self.critic_steps} is not a multiple of "
                             f"num_rl_members={self.num_rl_members} (one equal block per member)")
        self.buffer = ReplayBuffer(cfg.buffer_size, cfg.batch_size, self.num_envs)
        # the same storage, sampled num_rl_members batches at a time for the actor steps
        self.actor_buffer = ReplayBuffer(cfg.buffer_size,
                                         cfg.batch_size * max(self.num_rl_members, 1),
                                         self.num_envs)
        obs_ndim = len(self.env.observation_shape)
        torso = torso_factory(cfg.network, self.env.observation_shape, owner=type(self).__name__,
                              observation_layout=self.env.observation_layout)
        self.actor = DeterministicActor(self.env.action_size, obs_ndim, cfg.actor_hidden_sizes,
                                        cfg.actor_activation, torso)
        self.critic = TwinCritic(obs_ndim, cfg.critic_hidden_sizes, cfg.critic_activation,
                                 torso=torso)
        self.actor_optimizer = optax.adam(cfg.actor_lr)
        self.critic_optimizer = optax.adam(cfg.critic_lr)
        self.weights = elite_weights(self.num_elites)
        self._actor_shapes = jax.eval_shape(lambda: self.actor.init(
            jax.random.key(0), jnp.zeros(self.env.observation_shape, self.env.observation_dtype)))
        self.num_params = sum(math.prod(s.shape) for s in jax.tree.leaves(self._actor_shapes))
        obs = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        self.search = None if cfg.evolution == "sep_cem" else ParamsSearch(
            cfg.evolution, lambda k: ravel_pytree(self.actor.init(k, obs))[0], p,
            std=cfg.es_std, learning_rate=cfg.es_learning_rate, num_elites=self.num_elites)

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices`` (before compiling).

        Raises:
          ValueError: ``population_size``, ``batch_size`` or ``eval_episodes`` is not
            a multiple of ``num_devices`` (the message names both numbers).
        """
        arguments.split_over_devices(self.name, num_devices, population_size=self.population_size)
        self.buffer.validate(num_devices, self.name)
        arguments.split_over_devices(self.name, num_devices,
                                     eval_episodes=self.config.eval_episodes)

    def hparams(self) -> dict[str, Any]:
        return config_record(
            self.config, num_params=self.num_params, num_rl_members=self.num_rl_members,
            num_elites=self.num_elites, rollout_steps=self.rollout_steps,
            critic_steps=self.critic_steps, actor_steps=self.actor_steps,
            env_steps_per_generation=self.env_steps_per_step)

    # ---- parameters -------------------------------------------------------
    def unravel(self, flat: jax.Array) -> Any:
        """``float32[D]`` -> the actor's parameter pytree (inverse of ``ravel_pytree``)."""
        template = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), self._actor_shapes)
        return ravel_pytree(template)[1](flat)

    def act(self, actor_params: Any, obs: jax.Array) -> jax.Array:
        """The deterministic action of the actor with ``actor_params``
        (:func:`~jaxtrainer.algorithms.td3.deterministic_action`)."""
        return deterministic_action(self.actor, actor_params, obs, self.env)

    def critic_loss(self, critic_params: Any, target_actor_params: Any,
                    target_critic_params: Any, batch: Transition,
                    key: jax.Array) -> tuple[jax.Array, dict]:
        """TD3's critic loss (:func:`~jaxtrainer.algorithms.td3.td3_critic_loss`)
        with the config's ``gamma``, ``policy_noise`` and ``noise_clip``."""
        cfg = self.config
        return td3_critic_loss(critic_params, self.actor, self.critic, self.env,
                               target_actor_params, target_critic_params, batch, key, cfg.gamma,
                               cfg.policy_noise, cfg.policy_noise, cfg.noise_clip)

    def act_flat(self, flat: jax.Array, obs: jax.Array) -> jax.Array:
        """The deterministic action of the actor with flat parameters ``flat``."""
        return self.act(self.unravel(flat), obs)

    def greedy_policy(self) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
        """``policy(params, obs[n, ...], key) -> float32[n, action_size]``, the
        deterministic actor on raw observations, for
        :func:`jaxtrainer.envs.evaluate_policy`; ``params`` is
        :meth:`policy_params` (with ``normalize_observations`` the observations
        are normalised first: :func:`~jaxtrainer.algorithms.normalization.normalizing_policy`)."""
        def policy(flat, obs, key):
            del key
            return self.act_flat(flat, obs)
        return normalizing_policy(policy, self.config.normalize_observations)

    def policy_params(self, state: CEMRLState) -> Any:
        """What :meth:`greedy_policy` takes: the CEM mean ``state.mean``
        (``float32[D]``), or with ``normalize_observations`` the pair
        ``(state.mean, state.obs_stats)``."""
        if self.config.normalize_observations:
            return state.mean, state.obs_stats
        return state.mean

    # ---- Module -------------------------------------------------------------
    def init_state(self, key: jax.Array) -> CEMRLState:
        """``mu_0``: a fresh actor's parameters (reference ``mu_init``), ``var_0 =
        init_variance``; a fresh critic; an empty buffer share per device."""
        cfg = self.config
        actor_key, critic_key = jax.random.split(key)
        obs = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        mean, _ = ravel_pytree(self.actor.init(actor_key, obs))
        critic_params = self.critic.init(critic_key, obs, jnp.zeros((self.env.action_size,)))
        action = jnp.zeros(self.env.action_shape, jnp.float32)
        example = Transition(obs, action, jnp.zeros((), jnp.float32), obs,
                             jnp.zeros((), jnp.bool_))
        buffer = self.buffer.init(example)
        search = None if self.search is None else self.search.init_state(actor_key)
        if search is not None:
            mean = search.es.mean
        return CEMRLState(
            mean=mean, var=jnp.full_like(mean, cfg.init_variance), search=search,
            damp=jnp.asarray(cfg.damp_init, jnp.float32), critic_params=critic_params,
            target_critic_params=jax.tree.map(jnp.copy, critic_params),
            critic_opt=self.critic_optimizer.init(critic_params),
            generation=jnp.zeros((), jnp.int32), buffer=buffer,
            obs_stats=(normalization.init(self.env.observation_shape)
                       if cfg.normalize_observations else None))

    def learning(self, generation: jax.Array) -> jax.Array:
        """``bool[]``: generation ``generation`` (from 0) trains the critic and the RL
        actors, i.e. it starts with ``learning_starts`` env steps (and at least one
        generation) in the buffer. Replicated."""
        return jnp.logical_and(generation >= 1, env_steps.reached(
            generation, self.config.learning_starts, self.env_steps_per_step))

    def improve(self, rl_members: jax.Array, state: CEMRLState,
                key: jax.Array) -> tuple[jax.Array, tuple, dict[str, jax.Array]]:
        """Step 2 (:func:`~jaxtrainer.algorithms.member_learning.improve_members`):
        ``critic_steps`` TD3 critic updates in one block per RL member, then
        ``actor_steps`` of every RL member (``rl_members: float32[R, D]``), on
        batches this device samples from ``state.buffer`` (``key``: this
        device's), normalised with ``state.obs_stats``. Returns ``(improved
        float32[R, D], (critic, target_critic, critic_opt), {"critic", "actor"}:
        float32[] means over the updates)``."""
        def sample(replay, sample_key):
            return learning_batch(replay.sample(state.buffer, sample_key), state.obs_stats,
                                  self.config.reward_scaling)

        def member_loss(flat, critic, batch):
            return td3_actor_loss(self.unravel(flat), self.actor, self.critic, self.env, critic,
                                  batch)[0]

        return improve_members(
            rl_members, (state.critic_params, state.target_critic_params, state.critic_opt), key,
            unravel=self.unravel, critic_loss=self.critic_loss,
            member_loss=member_loss, sample_critic_batch=lambda k: sample(self.buffer, k),
            sample_member_batches=lambda k: sample(self.actor_buffer, k),
            critic_optimizer=self.critic_optimizer, actor_optimizer=self.actor_optimizer,
            critic_steps=self.critic_steps, actor_steps=self.actor_steps, tau=self.config.tau)

    def training_step(self, state: CEMRLState, key: jax.Array) -> tuple[CEMRLState, dict]:
        """One generation: sample, improve the RL members, roll out, CEM update.
        ``key`` is the same on every device (``step_key_per_device = False``)."""
        cfg = self.config
        p, num_rl = self.population_size, self.num_rl_members
        sample_key, rollout_key, learn_key = (jax.random.fold_in(key, i) for i in range(3))
        search = state.search
        if self.search is None:
            members = sample_population(state.mean, state.var, sample_key, p, cfg.antithetic)
        else:
            members, search = self.search.ask(search, sample_key)

        critic = (state.critic_params, state.target_critic_params, state.critic_opt)
        zero = Mean(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
        losses = {"loss/critic": zero, "loss/actor": zero}
        if num_rl:
            def run(args):
                rl, critic = args
                rl, critic, loss = self.improve(rl, state, fold_in_device(learn_key))
                one = jnp.ones((), jnp.float32)
                return (rl, critic), {f"loss/{k}": Mean(v, one) for k, v in loss.items()}

            (rl, critic), losses = jax.lax.cond(
                self.learning(state.generation), run, lambda args: (args, losses),
                (members[:num_rl], critic))
            members = jnp.concatenate([rl, members[num_rl:]])

        layout = MemberLayout(p, axis_size())  # no padding: validate requires P % devices == 0
        local_fitness, buffer, obs_stats, episode_metrics = rollout_members(  # step 3
            self.env, self.act, jax.vmap(self.unravel)(layout.local(members)),
            layout.keys(rollout_key), self.buffer, state.buffer, cfg.episodes_per_member,
            self.rollout_steps, state.obs_stats)
        fitness = layout.gather(local_fitness)

        if self.search is None:
            mean, var, damp = sep_cem_update(state.mean, members, fitness, state.damp,
                                             jnp.asarray(self.weights), cfg.damp_limit,
                                             cfg.damp_tau)
            search_metrics = {"cem/std": Last.of(jnp.mean(jnp.sqrt(var))),
                              "cem/damp": Last.of(damp)}
        else:  # the ES's update reads each member's offset from the mean, improved or not
            search, search_metrics = self.search.tell(search, members, fitness)
            mean, var, damp = search.es.mean, state.var, state.damp
        new_state = CEMRLState(mean, var, damp, *critic, state.generation + 1, buffer, obs_stats,
                               search)
        metrics = {**episode_metrics, **losses, **layout.fitness_metrics(fitness),
                   **search_metrics}
        if 0 < num_rl < p:
            metrics["fitness/rl_mean"] = jnp.mean(fitness[:num_rl])
            metrics["fitness/es_mean"] = jnp.mean(fitness[num_rl:])
        return new_state, metrics

__all__ = ["CEMRL", "CEMRLConfig", "CEMRLState", "elite_weights", "sample_population",
           "sep_cem_update"]
