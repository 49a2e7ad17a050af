"""PGA-ME: MAP-Elites whose offspring are half Iso+LineDD variations, half
policy-gradient steps on elites along a TD3 critic.

Nilsson and Cully 2021 ("Policy Gradient Assisted MAP-Elites", GECCO), in the
form of QDax (``qdax/core/emitters/pga_me_emitter.py``: a ``MultiEmitter`` of
``qpg_emitter.py``'s ``QualityPGEmitter`` and the ``MixingEmitter``), on the
:class:`~jaxtrainer.population.MAPElites` repertoire and the project's TD3 pieces
(:mod:`jaxtrainer.algorithms.critic_losses`, :mod:`~jaxtrainer.algorithms.target_update`,
:mod:`~jaxtrainer.algorithms.exploration`, :mod:`~jaxtrainer.algorithms.replay`).

One generation of ``P`` offspring (``ask``, replicated on every device):

* ``P - int(proportion_mutation_ga * P)`` from the critic: ``n - 1`` elites
  drawn uniformly, each taken ``num_pg_training_steps`` Adam steps
  (``policy_learning_rate``, a fresh optimiser per offspring) up
  ``mean Q_1(s, pi(s))`` on replayed batches, then the greedy actor trained
  alongside the critic;
* ``int(proportion_mutation_ga * P)`` Iso+LineDD variations of pairs of elites.

``tell`` inserts the evaluated offspring in the repertoire, writes every
transition of their episodes to the replay buffer, and (from generation 1)
trains the twin critics ``num_critic_training_steps`` steps, the greedy actor
one step every ``policy_delay`` (QDax's ``_scan_actor_critic_training``).
Generation 0 evaluates ``P`` policies from the task's initialisation, and its
first member becomes the greedy actor (QDax's ``init``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms.critic_losses import clipped_double_q_loss, deterministic_actor_loss
from jaxtrainer.algorithms.exploration import smoothed_target_action
from jaxtrainer.algorithms.networks import TwinCritic
from jaxtrainer.algorithms.replay import ReplayBuffer, Transition
from jaxtrainer.algorithms.target_update import soft_update
from jaxtrainer.metrics import Last
from jaxtrainer.population.map_elites import MAPElites, MAPElitesState
from jaxtrainer.population.qd_tasks import QDTask


@struct.dataclass
class PGAMEState(MAPElitesState):
    """State of :class:`PGAME`: :class:`~jaxtrainer.population.MAPElitesState`'s
    repertoire and generation, and the TD3 learner's.

    Attributes:
      critic, target_critic: the twin critics' parameters and their Polyak average.
      critic_opt: the critics' Adam state.
      actor, target_actor: the greedy actor (``float32[num_dims]``, a genotype)
        and its Polyak average.
      actor_opt: the greedy actor's Adam state.
      replay: the replay buffer's state (every device holds all of it).
      key: the learner's key as raw data (``jax.random.key_data``, ``uint32[2]``
        for the default threefry keys), split once per generation trained.
    """

    critic: Any
    target_critic: Any
    critic_opt: Any
    actor: jax.Array
    target_actor: jax.Array
    actor_opt: Any
    replay: Any
    key: jax.Array


class PGAME(MAPElites):
    """PGA-ME (module docstring) with QDax's ``PGAMEConfig`` defaults.

    Args:
      task: a :class:`~jaxtrainer.population.QDTask` with a ``rollout`` and a
        ``policy`` (e.g. ``"walker2d_uni"``), or its name for
        :func:`~jaxtrainer.population.make_task`.
      grid_shape, iso_sigma, line_sigma, qd_offset: as
        :class:`~jaxtrainer.population.MAPElites`'s.
      proportion_mutation_ga: the share of offspring from Iso+LineDD, in ``[0, 1)``.
      num_critic_training_steps: critic steps per generation, a multiple of
        ``policy_delay``.
      num_pg_training_steps: policy-gradient steps per offspring.
      replay_buffer_size: transitions kept (rounded down to a multiple of ``P``).
      critic_hidden_layer_size: the critics' hidden widths.
      critic_learning_rate, greedy_learning_rate, policy_learning_rate: Adam's
        step sizes for the critics, the greedy actor and the offspring.
      noise_clip, policy_noise: TD3's target policy smoothing.
      discount: ``gamma``.
      reward_scaling: rewards are multiplied by it in the critic's target.
      batch_size: transitions per gradient step.
      soft_tau_update: Polyak rate of both targets.
      policy_delay: critic steps per greedy-actor step.
      **task_kwargs: the task's own arguments when ``task`` is a name.

    Metrics: :class:`~jaxtrainer.population.MAPElites`'s, and ``critic/loss``
    (the last critic step's).

    Raises:
      ValueError: a task without a rollout, a bad size or rate, or
        ``num_critic_training_steps`` not a multiple of ``policy_delay``; before
        anything compiles.
    """

    ENV_SECTION = ("the quality-diversity task: jaxtrainer.population.make_task(name, **the "
                   "other keys); name: walker2d_uni")

    def __init__(self, task: str | QDTask = "walker2d_uni", *,
                 grid_shape: Sequence[int] = (32, 32), iso_sigma: float = 0.005,
                 line_sigma: float = 0.05, qd_offset: float = 0.0,
                 proportion_mutation_ga: float = 0.5, num_critic_training_steps: int = 300,
                 num_pg_training_steps: int = 100, replay_buffer_size: int = 1_000_000,
                 critic_hidden_layer_size: Sequence[int] = (256, 256),
                 critic_learning_rate: float = 3e-4, greedy_learning_rate: float = 3e-4,
                 policy_learning_rate: float = 1e-3, noise_clip: float = 0.5,
                 policy_noise: float = 0.2, discount: float = 0.99, reward_scaling: float = 1.0,
                 batch_size: int = 256, soft_tau_update: float = 0.005, policy_delay: int = 2,
                 **task_kwargs: Any) -> None:
        super().__init__(task, grid_shape=grid_shape, iso_sigma=iso_sigma,
                         line_sigma=line_sigma, qd_offset=qd_offset, **task_kwargs)
        if self.task.rollout is None or self.task.policy is None:
            raise ValueError(f"PGAME: the {self.task.name!r} task has no rollout and policy "
                             "(transitions for the critic); expected a policy task such as "
                             "'walker2d_uni'")
        number = arguments.number
        self.proportion_mutation_ga = float(number("proportion_mutation_ga",
                                                   proportion_mutation_ga, low=0))
        if self.proportion_mutation_ga >= 1:
            raise ValueError(f"proportion_mutation_ga={proportion_mutation_ga!r}: expected a "
                             "number in [0, 1) (some offspring must come from the critic)")
        positive = arguments.positive_int
        self.policy_delay = positive("policy_delay", policy_delay, False)
        self.num_critic_training_steps = positive("num_critic_training_steps",
                                                  num_critic_training_steps, False)
        if self.num_critic_training_steps % self.policy_delay:
            raise ValueError(f"num_critic_training_steps={num_critic_training_steps}: expected "
                             f"a multiple of policy_delay={policy_delay}")
        self.num_pg_training_steps = positive("num_pg_training_steps", num_pg_training_steps,
                                              False)
        self.replay_buffer_size = positive("replay_buffer_size", replay_buffer_size, False)
        self.batch_size = positive("batch_size", batch_size, False)
        self.critic_hidden_layer_size = arguments.sizes("critic_hidden_layer_size",
                                                        critic_hidden_layer_size)
        rates = dict(critic_learning_rate=critic_learning_rate,
                     greedy_learning_rate=greedy_learning_rate,
                     policy_learning_rate=policy_learning_rate)
        for name, value in rates.items():
            setattr(self, name, float(number(name, value, low=0)))
        self.noise_clip = float(number("noise_clip", noise_clip, low=0))
        self.policy_noise = float(number("policy_noise", policy_noise, low=0))
        self.discount = float(number("discount", discount, low=0))
        self.reward_scaling = float(number("reward_scaling", reward_scaling))
        self.soft_tau_update = float(number("soft_tau_update", soft_tau_update, low=0))
        self.critic_net = TwinCritic(hidden_sizes=self.critic_hidden_layer_size)
        self.population_size: int | None = None

    def configure_population(self, population_size: int) -> None:
        self.population_size = population_size
        self.num_ga = int(self.proportion_mutation_ga * population_size)  # < P: 1 from the critic
        rows = population_size
        capacity = max(self.replay_buffer_size // rows, 2) * rows
        self.replay = ReplayBuffer(capacity, self.batch_size, rows, replicated=True)

    def _example_transition(self) -> Transition:
        obs = jnp.zeros((self.task.observation_size,), jnp.float32)
        return Transition(obs, jnp.zeros((self.task.action_size,), jnp.float32),
                          jnp.float32(0.0), obs, jnp.bool_(False))

    def init_state(self, key: jax.Array) -> PGAMEState:
        """An empty repertoire and replay buffer, the critics from ``key``; the
        greedy actor is set from generation 0's first member."""
        base = super().init_state(key)
        example = self._example_transition()
        critic_key, learner_key = jax.random.split(key)
        critic = self.critic_net.init(critic_key, example.obs, example.action)
        actor = jnp.zeros((self.task.num_dims,), jnp.float32)
        return PGAMEState(base.repertoire, base.generation, critic, critic,
                          optax.adam(self.critic_learning_rate).init(critic), actor, actor,
                          optax.adam(self.greedy_learning_rate).init(actor),
                          self.replay.init(example), jax.random.key_data(learner_key))

    def ask(self, state: PGAMEState, key: jax.Array) -> tuple[jax.Array, PGAMEState]:
        """``float32[P, num_dims]``: ``[policy-gradient offspring, greedy actor,
        Iso+LineDD offspring]`` (QDax's order); generation 0: the task's
        initialisation."""
        if self.population_size is None:
            raise ValueError("PGAME: the population size is not known yet; run it with "
                             "PopulationTrainer")
        p = self.population_size

        def emit() -> jax.Array:
            parents_key, pg_key, first, second, vary = jax.random.split(key, 5)
            num_pg = p - self.num_ga
            parents = state.repertoire.sample(parents_key, num_pg - 1)
            parts = [self._policy_gradient(state, parents, pg_key), state.actor[None]]
            if self.num_ga:
                parts.append(self._isoline(state.repertoire, (first, second, vary), self.num_ga))
            return jnp.concatenate(parts)

        return jax.lax.cond(state.generation == 0, lambda: self._start(key, p), emit), state

    def _q_loss(self, genotype: jax.Array, critic: Any, obs: jax.Array) -> jax.Array:
        q = self.critic_net.apply(critic, obs, self.task.policy(genotype, obs))
        return deterministic_actor_loss(q)

    def _policy_gradient(self, state: PGAMEState, parents: jax.Array, key: jax.Array,
                         ) -> jax.Array:
        """``num_pg_training_steps`` Adam steps of each parent up the critic, every
        parent on the same replayed batch per step (QDax's ``emit_pg``)."""
        optimizer = optax.adam(self.policy_learning_rate)
        grad = jax.vmap(jax.grad(self._q_loss), in_axes=(0, None, None))

        def step(carry, obs):
            params, opt = carry
            updates, opt = jax.vmap(optimizer.update)(grad(params, state.critic, obs), opt)
            return (optax.apply_updates(params, updates), opt), None

        keys = jax.random.split(key, self.num_pg_training_steps)
        obs = self._batches(state.replay, keys).obs
        (params, _), _ = jax.lax.scan(step, (parents, jax.vmap(optimizer.init)(parents)), obs)
        return params

    def _batches(self, replay: Any, keys: jax.Array) -> Transition:
        """``self.replay.sample(replay, k)`` for every key ``k`` of ``keys`` (leaves
        ``[*keys.shape, batch_size, ...]``), drawn before the loops that use them,
        in one vmapped call: the same transitions as one call per key, with one
        PRNG computation for all instead of several per batch (each a loop of its
        own on a CPU)."""
        sample = functools.partial(self.replay.sample, replay)
        for _ in range(keys.ndim):
            sample = jax.vmap(sample)
        return sample(keys)

    def evaluate(self, member: jax.Array, key: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """``(fitness: float32[], {"descriptor": float32[D], "transitions":
        Transition})``, the episode's transitions with leaves ``[T, ...]``."""
        fitness, descriptor, transitions = self.task.rollout(member, key)
        return jnp.asarray(fitness, jnp.float32), {
            "descriptor": jnp.asarray(descriptor, jnp.float32), "transitions": transitions}

    def tell(self, state: PGAMEState, population: jax.Array, fitness: jax.Array,
             extras: dict[str, Any]) -> tuple[PGAMEState, dict[str, Any]]:
        """Insert the offspring, replay their transitions (``extras["transitions"]``,
        leaves ``[P, T, ...]``), then train the critics (from generation 1)."""
        base, metrics = super().tell(state, population, fitness, extras)
        first = state.generation == 0
        actor = jnp.where(first, population[0], state.actor)
        state = state.replace(repertoire=base.repertoire, generation=base.generation,
                              actor=actor, target_actor=jnp.where(first, actor, state.target_actor),
                              replay=self.replay.add_steps(state.replay, extras["transitions"]))
        nets = (state.critic, state.target_critic, state.critic_opt, state.actor,
                state.target_actor, state.actor_opt)
        key, rest = jax.random.split(jax.random.wrap_key_data(state.key))
        nets, loss = jax.lax.cond(first, lambda: (nets, jnp.float32(jnp.nan)),
                                  lambda: self._train(nets, state.replay, key))
        critic, target_critic, critic_opt, actor, target_actor, actor_opt = nets
        state = state.replace(critic=critic, target_critic=target_critic, critic_opt=critic_opt,
                              actor=actor, target_actor=target_actor, actor_opt=actor_opt,
                              key=jnp.where(first, state.key, jax.random.key_data(rest)))
        metrics["critic/loss"] = Last.of(loss)
        return state, metrics

    def _critic_step(self, carry: tuple, draws: tuple[Transition, jax.Array],
                     ) -> tuple[tuple, jax.Array]:
        """One twin-critic step on ``draws = (batch, noise_key)``: a replayed batch
        and the key of its target-smoothing noise (drawn here, where it is used:
        XLA then rounds the noise's scaling as it always has)."""
        critic, target_critic, opt, target_actor = carry
        batch, noise_key = draws
        batch = batch.replace(reward=batch.reward * self.reward_scaling)
        next_action = smoothed_target_action(
            self.task.policy(target_actor, batch.next_obs),
            jax.random.normal(noise_key, batch.action.shape), self.policy_noise,
            self.noise_clip, jnp.float32(1.0), jnp.float32(-1.0), jnp.float32(1.0))

        def loss_fn(params):
            return clipped_double_q_loss(self.critic_net, params, target_critic, batch,
                                         next_action, self.discount)[0]

        loss, grads = jax.value_and_grad(loss_fn)(critic)
        updates, opt = optax.adam(self.critic_learning_rate).update(grads, opt)
        critic = optax.apply_updates(critic, updates)
        target_critic = soft_update(target_critic, critic, self.soft_tau_update)
        return (critic, target_critic, opt, target_actor), loss

    def _train(self, nets: tuple, replay: Any, key: jax.Array) -> tuple[tuple, jax.Array]:
        """QDax's ``state_update`` on ``nets = (critic, target_critic, critic_opt,
        actor, target_actor, actor_opt)``: ``num_critic_training_steps /
        policy_delay`` rounds of ``policy_delay`` critic steps then one
        greedy-actor step. Keys: ``split(key, rounds)``, each round's
        ``split(round_key, policy_delay + 1)`` (its critic steps', then its actor
        step's), each critic step's ``split`` into its batch's and its noise's.
        Every key and batch is drawn before the loops (:meth:`_batches`), which
        carry the networks and optimisers only (the replay buffer is read, never
        carried: no loop copies it). Returns the new ``nets`` and the last critic
        loss."""
        optimizer = optax.adam(self.greedy_learning_rate)
        rounds = self.num_critic_training_steps // self.policy_delay
        round_keys = jax.vmap(lambda k: jax.random.split(k, self.policy_delay + 1))(
            jax.random.split(key, rounds))
        step_keys = jax.vmap(jax.vmap(jax.random.split))(round_keys[:, :-1])
        batches = self._batches(replay, step_keys[..., 0])
        actor_obs = self._batches(replay, round_keys[:, -1]).obs

        def round_(nets: tuple, draws: tuple) -> tuple[tuple, jax.Array]:
            critic, target_critic, critic_opt, actor, target_actor, actor_opt = nets
            critic_draws, obs = draws
            (critic, target_critic, critic_opt, _), losses = jax.lax.scan(
                self._critic_step, (critic, target_critic, critic_opt, target_actor),
                critic_draws)
            grads = jax.grad(self._q_loss)(actor, critic, obs)
            updates, actor_opt = optimizer.update(grads, actor_opt)
            actor = optax.apply_updates(actor, updates)
            target_actor = soft_update(target_actor, actor, self.soft_tau_update)
            return (critic, target_critic, critic_opt, actor, target_actor, actor_opt), losses[-1]

        nets, losses = jax.lax.scan(round_, nets, ((batches, step_keys[..., 1]), actor_obs))
        return nets, losses[-1]

    def hparams(self) -> dict[str, Any]:
        return {**super().hparams(), "proportion_mutation_ga": self.proportion_mutation_ga,
                "num_critic_training_steps": self.num_critic_training_steps,
                "num_pg_training_steps": self.num_pg_training_steps,
                "replay_buffer_size": self.replay_buffer_size,
                "critic_hidden_layer_size": list(self.critic_hidden_layer_size),
                "critic_learning_rate": self.critic_learning_rate,
                "greedy_learning_rate": self.greedy_learning_rate,
                "policy_learning_rate": self.policy_learning_rate,
                "noise_clip": self.noise_clip, "policy_noise": self.policy_noise,
                "discount": self.discount, "reward_scaling": self.reward_scaling,
                "batch_size": self.batch_size, "soft_tau_update": self.soft_tau_update,
                "policy_delay": self.policy_delay}


__all__ = ["PGAME", "PGAMEState"]
