"""ME-ES: MAP-Elites whose offspring are OpenAI-ES steps of one elite at a time,
up the fitness (exploit) or up the novelty (explore).

Colas, Madhavan, Huizinga and Clune 2020 ("Scaling MAP-Elites to Deep
Neuroevolution", GECCO, arXiv:2003.01825), in the form of QDax
(``qdax/core/emitters/mees_emitter.py``: ``MEESEmitter`` with ``MEESConfig``),
on the :class:`~jaxtrainer.population.MAPElites` repertoire; the ES step is the
project's :class:`~jaxtrainer.algorithms.es.EvosaxES` adapter of evosax's
``Open_ES`` (mirrored sampling, centred-rank shaping, Adam).

One generation (:class:`~jaxtrainer.PopulationTrainer` step) is one ES step of
one parent:

* ``ask``: every ``num_optimizer_steps`` ES steps a new parent is drawn from
  the repertoire, with a fresh optimiser: while exploring, uniformly among the
  ``explore_num_cell_sample`` elites most novel against the novelty archive;
  while exploiting, half of the time uniformly among the
  ``exploit_num_cell_sample`` fittest elites, half of the time among the fittest
  of the last ``last_updated_size`` offspring that entered the repertoire.
  Otherwise the parent is the last offspring. The ``P = population_size``
  members are ``parent + sample_sigma * eps`` (QDax's ``sample_number``).
* ``tell``: the members' scores (their novelty while exploring, their fitness
  while exploiting) give the ES gradient; one Adam step (the gradient plus
  ``l2_coefficient * parent``) makes the offspring, which is evaluated (one
  evaluation, in ``tell``), inserted in the repertoire, its descriptor appended
  to the novelty archive and, when it entered, to the last-updated buffer.
  With both ``use_explore`` and ``use_exploit`` the mode alternates every
  ``num_optimizer_steps`` ES steps, exploring first.

Generation 0 evaluates the initial genotype (the task's ``init`` of the run's
key, or a uniform draw over its genotype bounds) as every member, inserts it
once (member 0) and records it in both buffers (QDax's ``init`` and first
``emit``). So ``G`` generations are ``G - 1`` ES steps, as QDax's ``G - 1``
iterations after its ``init``.

Differences from QDax: the ES samples are ``[+eps, -eps]`` halves
(evosax's order) instead of interleaved pairs; the novelty of a descriptor is
the mean distance to its ``k`` nearest descriptors stored in the archive (QDax
also counts the archive's next, empty slot, a zero descriptor).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms.es import ESState, EvosaxES
from jaxtrainer.metrics import Last
from jaxtrainer.population.map_elites import MAPElites, MAPElitesState
from jaxtrainer.population.qd_tasks import QDTask


def novelty(
    descriptors: jax.Array, archive: jax.Array, stored: int | jax.Array, num_nearest_neighbors: int
) -> jax.Array:
    """``float32[B]``: each descriptor's novelty, the mean Euclidean distance to
    its ``num_nearest_neighbors`` nearest descriptors among the first ``stored``
    rows of ``archive`` (``float32[N, D]``; all of them when fewer are stored;
    NaN when none are). ``descriptors: float32[B, D]``; ``num_nearest_neighbors``
    <= ``N`` (static)."""
    distances = jnp.sqrt(jnp.sum(jnp.square(descriptors[:, None, :] - archive[None]), axis=-1))
    valid = jnp.arange(archive.shape[0]) < stored
    distances = jnp.where(valid[None], distances, jnp.inf)
    nearest = -jax.lax.top_k(-distances, num_nearest_neighbors)[0]
    count = jnp.minimum(jnp.asarray(stored, jnp.float32), num_nearest_neighbors)
    return jnp.sum(jnp.where(jnp.isfinite(nearest), nearest, 0.0), axis=-1) / count


def _draw_among_top(key: jax.Array, values: jax.Array, k: int) -> jax.Array:
    """``int32[]``: an index drawn uniformly among those whose value is at least
    the ``k``-th largest finite value (QDax's ``_sample``: more than ``k`` on a
    tie; all finite ones when fewer than ``k`` are finite)."""
    top = jax.lax.top_k(values, k)[0]
    threshold = jnp.min(jnp.where(top > -jnp.inf, top, jnp.inf))
    chosen = (values >= threshold).astype(jnp.float32)
    return jax.random.choice(key, values.shape[0], p=chosen / jnp.sum(chosen)).astype(jnp.int32)


@struct.dataclass
class MEESState(MAPElitesState):
    """State of :class:`MEES`: :class:`~jaxtrainer.population.MAPElitesState`'s
    repertoire and generation, and the emitter's.

    Attributes:
      es: the OpenAI-ES state (:class:`~jaxtrainer.algorithms.es.ESState`): its
        evosax ``mean`` is the last offspring, ``float32[num_dims]``.
      archive: ``float32[N, D]``, the novelty archive, a ring of the last ``N``
        offspring's descriptors.
      archive_count: ``int32[]``, descriptors appended so far.
      last_genotypes: ``float32[L, num_dims]``, the last ``L`` offspring that
        entered the repertoire (zeros where none yet).
      last_fitnesses: ``float32[L]``, their fitnesses (``-inf`` where none yet).
      last_position: ``int32[]``, the slot the next one takes.
      key: ``uint32[2]``, the key data of the offspring's evaluations.
    """

    es: ESState
    archive: jax.Array
    archive_count: jax.Array
    last_genotypes: jax.Array
    last_fitnesses: jax.Array
    last_position: jax.Array
    key: jax.Array


class MEES(MAPElites):
    """ME-ES (module docstring) with QDax's ``MEESConfig`` defaults; the
    population size is QDax's ``sample_number``.

    Args:
      task: a :class:`~jaxtrainer.population.QDTask` or a name for
        :func:`~jaxtrainer.population.make_task` (``"walker2d_uni"``, ``"arm"``).
      grid_shape, qd_offset: as :class:`~jaxtrainer.population.MAPElites`'s.
      sample_sigma: the ES samples' standard deviation (> 0).
      sample_mirror: mirrored samples (``+eps`` and ``-eps``; an even population).
      sample_rank_norm: centred ranks of the scores (else the raw scores).
      num_optimizer_steps: ES steps per parent.
      adam_optimizer: Adam (else SGD) at ``learning_rate``.
      learning_rate: the ES step size (> 0).
      l2_coefficient: ``l2_coefficient * parent`` is added to the ES gradient.
      novelty_nearest_neighbors: ``k`` of the novelty's nearest neighbours.
      last_updated_size: how many offspring that entered the repertoire exploit
        may draw from.
      exploit_num_cell_sample: exploit's parent among this many fittest.
      explore_num_cell_sample: explore's parent among this many most novel.
      use_explore, use_exploit: the modes (at least one; both: they alternate).
      novelty_archive_size: descriptors the novelty archive keeps (QDax's
        ``total_generations``: one per generation, none forgotten).
      **task_kwargs: the task's own arguments when ``task`` is a name.

    Metrics: :class:`~jaxtrainer.population.MAPElites`'s, ``es/explore`` (1
    while exploring, else 0) and ``es/offspring_fitness`` (the last offspring's).

    Raises:
      ValueError: a bad rate, size or switch (naming it), neither mode, more
        neighbours than the archive keeps, or an odd population with
        ``sample_mirror``; before anything compiles.
    """

    ENV_SECTION = (
        "the quality-diversity task: jaxtrainer.population.make_task(name, **the "
        "other keys); name: walker2d_uni or arm"
    )

    def __init__(
        self,
        task: str | QDTask = "walker2d_uni",
        *,
        grid_shape: Sequence[int] = (32, 32),
        qd_offset: float = 0.0,
        sample_sigma: float = 0.02,
        sample_mirror: bool = True,
        sample_rank_norm: bool = True,
        num_optimizer_steps: int = 10,
        adam_optimizer: bool = True,
        learning_rate: float = 0.01,
        l2_coefficient: float = 0.02,
        novelty_nearest_neighbors: int = 10,
        last_updated_size: int = 5,
        exploit_num_cell_sample: int = 2,
        explore_num_cell_sample: int = 5,
        use_explore: bool = True,
        use_exploit: bool = True,
        novelty_archive_size: int = 1000,
        **task_kwargs: Any,
    ) -> None:
        super().__init__(task, grid_shape=grid_shape, qd_offset=qd_offset, **task_kwargs)
        number, positive, flag = arguments.number, arguments.positive_int, arguments.flag
        self.sample_sigma = float(number("sample_sigma", sample_sigma, low=0, low_open=True))
        self.learning_rate = float(number("learning_rate", learning_rate, low=0, low_open=True))
        self.l2_coefficient = float(number("l2_coefficient", l2_coefficient, low=0))
        self.sample_mirror = flag("sample_mirror", sample_mirror)
        self.sample_rank_norm = flag("sample_rank_norm", sample_rank_norm)
        self.adam_optimizer = flag("adam_optimizer", adam_optimizer)
        self.use_explore = flag("use_explore", use_explore)
        self.use_exploit = flag("use_exploit", use_exploit)
        if not (self.use_explore or self.use_exploit):
            raise ValueError("use_explore=False and use_exploit=False: expected at least one mode")
        self.num_optimizer_steps = positive("num_optimizer_steps", num_optimizer_steps, False)
        self.novelty_archive_size = positive("novelty_archive_size", novelty_archive_size, False)
        self.novelty_nearest_neighbors = positive(
            "novelty_nearest_neighbors", novelty_nearest_neighbors, False
        )
        if self.novelty_nearest_neighbors > self.novelty_archive_size:
            raise ValueError(
                f"novelty_nearest_neighbors={novelty_nearest_neighbors}: expected "
                f"at most novelty_archive_size={novelty_archive_size}"
            )
        self.last_updated_size = positive("last_updated_size", last_updated_size, False)
        self.exploit_num_cell_sample = positive(
            "exploit_num_cell_sample", exploit_num_cell_sample, False
        )
        self.explore_num_cell_sample = positive(
            "explore_num_cell_sample", explore_num_cell_sample, False
        )
        if self.exploit_num_cell_sample > min(self.last_updated_size, self.num_cells):
            raise ValueError(
                f"exploit_num_cell_sample={exploit_num_cell_sample}: expected at "
                f"most last_updated_size={last_updated_size} and the "
                f"{self.num_cells} cells"
            )
        if self.explore_num_cell_sample > self.num_cells:
            raise ValueError(
                f"explore_num_cell_sample={explore_num_cell_sample}: expected at "
                f"most the {self.num_cells} cells"
            )
        self.es: EvosaxES | None = None

    def configure_population(self, population_size: int) -> None:
        """Build the OpenAI-ES step for ``population_size`` samples.

        Raises:
          ValueError: an odd size with ``sample_mirror``.
        """
        if self.sample_mirror and population_size % 2:
            raise ValueError(
                f"population_size={population_size}: ME-ES with sample_mirror "
                "draws +eps and -eps pairs, expected an even population"
            )
        super().configure_population(population_size)
        step = (optax.adam if self.adam_optimizer else optax.sgd)(self.learning_rate)
        self.es = EvosaxES(
            "Open_ES",
            jnp.zeros((self.task.num_dims,), jnp.float32),
            maximize=True,
            fitness_shaping="centered_rank" if self.sample_rank_norm else "identity",
            optimizer=optax.chain(optax.add_decayed_weights(self.l2_coefficient), step),
            std=self.sample_sigma,
            algorithm_kwargs={"use_antithetic_sampling": self.sample_mirror},
            population_size=population_size,
        )

    def init_state(self, key: jax.Array) -> MEESState:
        """An empty repertoire and buffers; the ES mean is the initial genotype
        drawn from ``key``."""
        if self.es is None:
            raise ValueError(
                "MEES: the population size is not known yet; run it with PopulationTrainer"
            )
        base = super().init_state(key)
        start_key, es_key, eval_key = jax.random.split(key, 3)
        es = self.es.init_state(es_key)
        es = es.replace(es=es.es.replace(mean=self._start(start_key, 1)[0]))
        n, d = self.task.num_dims, self.task.descriptor_size
        length = self.last_updated_size
        return MEESState(
            base.repertoire,
            base.generation,
            es,
            jnp.zeros((self.novelty_archive_size, d), jnp.float32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((length, n), jnp.float32),
            jnp.full((length,), -jnp.inf, jnp.float32),
            jnp.zeros((), jnp.int32),
            jax.random.key_data(eval_key),
        )

    def _explores(self, step: jax.Array) -> jax.Array:
        """``bool[]``: whether ES step ``step`` (0, 1, ...) follows the novelty."""
        if not self.use_exploit:
            return jnp.bool_(True)
        if not self.use_explore:
            return jnp.bool_(False)
        return (step // self.num_optimizer_steps) % 2 == 0

    def _novelty(self, state: MEESState, descriptors: jax.Array) -> jax.Array:
        stored = jnp.minimum(state.archive_count, self.novelty_archive_size)
        return novelty(descriptors, state.archive, stored, self.novelty_nearest_neighbors)

    def _parent(self, state: MEESState, explore: jax.Array, key: jax.Array) -> jax.Array:
        """``float32[num_dims]``: a new parent (QDax's ``_sample_explore`` /
        ``_sample_exploit``)."""
        rep = state.repertoire

        def explore_draw() -> jax.Array:
            novelties = jnp.where(rep.filled, self._novelty(state, rep.descriptors), -jnp.inf)
            return rep.genotypes[_draw_among_top(key, novelties, self.explore_num_cell_sample)]

        def exploit_draw() -> jax.Array:
            which, draw_key = jax.random.split(key)
            k = self.exploit_num_cell_sample
            return jax.lax.cond(
                jax.random.uniform(which) < 0.5,
                lambda: rep.genotypes[_draw_among_top(draw_key, rep.fitnesses, k)],
                lambda: state.last_genotypes[_draw_among_top(draw_key, state.last_fitnesses, k)],
            )

        return jax.lax.cond(explore, explore_draw, exploit_draw)

    def ask(self, state: MEESState, key: jax.Array) -> tuple[jax.Array, MEESState]:
        """``float32[P, num_dims]``: the ES samples around the parent (generation
        0: the initial genotype, ``P`` times)."""
        if self.es is None:
            raise ValueError(
                "MEES: the population size is not known yet; run it with PopulationTrainer"
            )
        p, es = self.population_size, state.es

        def samples() -> tuple[jax.Array, ESState]:
            step = state.generation - 1
            fresh = step % self.num_optimizer_steps == 0
            parent_key, ask_key = jax.random.split(key)
            parent = jax.lax.cond(
                fresh,
                lambda: self._parent(state, self._explores(step), parent_key),
                lambda: es.es.mean,
            )
            opt = jax.tree.map(
                lambda a, b: jnp.where(fresh, a, b),
                self.es.es.optimizer.init(parent),
                es.es.opt_state,
            )
            return self.es.ask(es.replace(es=es.es.replace(mean=parent, opt_state=opt)), ask_key)

        def start() -> tuple[jax.Array, ESState]:
            return jnp.broadcast_to(es.es.mean, (p, self.task.num_dims)), es

        population, es = jax.lax.cond(state.generation == 0, start, samples)
        return population, state.replace(es=es)

    def tell(
        self,
        state: MEESState,
        population: jax.Array,
        fitness: jax.Array,
        extras: dict[str, jax.Array],
    ) -> tuple[MEESState, dict[str, Any]]:
        """One ES step from the samples' scores, then the offspring evaluated and
        inserted (generation 0: member 0 inserted); ``extras["descriptor"]:
        float32[P, D]``."""
        first = state.generation == 0
        explore = self._explores(state.generation - 1) & ~first
        key, eval_key = jax.random.split(jax.random.wrap_key_data(state.key))
        descriptors = extras["descriptor"]

        def step() -> tuple[jax.Array, jax.Array, jax.Array, ESState]:
            scores = jnp.where(explore, self._novelty(state, descriptors), fitness)
            es, _ = self.es.tell(state.es, population, scores)
            offspring = es.es.mean
            child_fitness, child_descriptor = self.evaluate(offspring, eval_key)
            return offspring, child_fitness, child_descriptor["descriptor"], es

        def start() -> tuple[jax.Array, jax.Array, jax.Array, ESState]:
            return population[0], fitness[0].astype(jnp.float32), descriptors[0], state.es

        offspring, child_fitness, child_descriptor, es = jax.lax.cond(first, start, step)
        base, metrics = MAPElites.tell(
            self,
            state,
            offspring[None],
            child_fitness[None],
            {"descriptor": child_descriptor[None]},
        )
        rep = base.repertoire
        entered = jnp.all(rep.genotypes[rep.cells(child_descriptor[None])[0]] == offspring)
        slot = jnp.where(entered, state.last_position, self.last_updated_size)  # out: dropped
        metrics["es/explore"] = Last.of(explore.astype(jnp.float32))
        metrics["es/offspring_fitness"] = Last.of(child_fitness)
        return state.replace(
            repertoire=rep,
            generation=base.generation,
            es=es,
            archive=state.archive.at[state.archive_count % self.novelty_archive_size].set(
                child_descriptor
            ),
            archive_count=state.archive_count + 1,
            last_genotypes=state.last_genotypes.at[slot].set(offspring, mode="drop"),
            last_fitnesses=state.last_fitnesses.at[slot].set(child_fitness, mode="drop"),
            last_position=(state.last_position + entered.astype(jnp.int32))
            % self.last_updated_size,
            key=jax.random.key_data(key),
        ), metrics

    def hparams(self) -> dict[str, Any]:
        return {
            "task": self.task.name,
            "num_dims": self.task.num_dims,
            "grid_shape": list(self.grid_shape),
            "qd_offset": self.qd_offset,
            "sample_sigma": self.sample_sigma,
            "sample_mirror": self.sample_mirror,
            "sample_rank_norm": self.sample_rank_norm,
            "num_optimizer_steps": self.num_optimizer_steps,
            "adam_optimizer": self.adam_optimizer,
            "learning_rate": self.learning_rate,
            "l2_coefficient": self.l2_coefficient,
            "novelty_nearest_neighbors": self.novelty_nearest_neighbors,
            "last_updated_size": self.last_updated_size,
            "exploit_num_cell_sample": self.exploit_num_cell_sample,
            "explore_num_cell_sample": self.explore_num_cell_sample,
            "use_explore": self.use_explore,
            "use_exploit": self.use_exploit,
            "novelty_archive_size": self.novelty_archive_size,
        }


__all__ = ["MEES", "MEESState", "novelty"]
