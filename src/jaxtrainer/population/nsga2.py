"""NSGA-II: multi-objective search by non-dominated sorting and crowding distance.

Deb, Pratap, Agarwal and Meyarivan 2002 ("A fast and elitist multiobjective
genetic algorithm: NSGA-II", IEEE Transactions on Evolutionary Computation
6(2)), with the variation operators of the authors' reference C code (NSGA-II
v1.1, Kanpur Genetic Algorithms Laboratory): binary tournaments on the crowded
comparison, bounded simulated binary crossover (SBX) and bounded polynomial
mutation. As a :class:`~jaxtrainer.PopulationModule`: one
:class:`~jaxtrainer.PopulationTrainer` generation asks ``N`` offspring of the
parent population, evaluates them split over the devices (each member's
``M`` objective values, gathered bit for bit) and tells them: parents and
offspring are sorted into fronts and the best ``N`` survive. The parent
population lives in the replicated state, so it is checkpointed and resumed as
any state and is the same on any device count.

Every objective is maximised (as every fitness here). Functions:

* :func:`non_dominated_ranks`: each point's front (0: non-dominated).
* :func:`crowding_distances`: each point's crowding distance within its front.
* :func:`hypervolume`: the volume the points dominate above a reference point;
  exact for two objectives (a sort and a sweep), a Monte-Carlo estimate for
  more.
* :func:`sbx_crossover`, :func:`polynomial_mutation`: the variation operators.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.metrics import Last
from jaxtrainer.module import PopulationModule
from jaxtrainer.population.mo_tasks import MOTask, make_mo_task

_EPS = 1.0e-14  # the C code's EPS: parents closer than this in a variable are not crossed


def _finite_or_worst(objectives: jax.Array) -> jax.Array:
    """``objectives`` as float32 with NaN as ``-inf`` (the worst value)."""
    objectives = objectives.astype(jnp.float32)
    return jnp.where(jnp.isnan(objectives), -jnp.inf, objectives)


def dominance(objectives: jax.Array) -> jax.Array:
    """``bool[N, N]``: ``[i, j]`` when point ``i`` dominates point ``j`` (at
    least as good in every objective, better in one; maximised). ``objectives``:
    ``float[N, M]``; NaN counts as ``-inf``."""
    f = _finite_or_worst(objectives)
    at_least = jnp.all(f[:, None, :] >= f[None, :, :], axis=-1)
    better = jnp.any(f[:, None, :] > f[None, :, :], axis=-1)
    return at_least & better


def non_dominated_ranks(objectives: jax.Array) -> jax.Array:
    """``int32[N]``: each point's front for ``objectives: float[N, M]``
    (maximised; NaN counts as ``-inf``): 0 for the points no other dominates,
    ``k`` for those only points of fronts ``< k`` dominate (Deb et al.'s fast
    non-dominated sort, peeling one front per loop iteration)."""
    dom = dominance(objectives)
    n = dom.shape[0]

    def peel(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        ranks, k = carry
        left = ranks < 0
        dominated = jnp.any(dom & left[:, None], axis=0)
        return jnp.where(left & ~dominated, k, ranks), k + 1

    ranks, _ = jax.lax.while_loop(
        lambda c: jnp.any(c[0] < 0), peel, (jnp.full((n,), -1, jnp.int32), jnp.zeros((), jnp.int32))
    )
    return ranks


def crowding_distances(objectives: jax.Array, ranks: jax.Array) -> jax.Array:
    """``float32[N]``: each point's crowding distance within its front (Deb et
    al. 2002, section III-B): per objective, the points of a front sorted by that
    objective; the two ends get ``inf``, every other point ``(next - previous)
    / (max - min)`` of its front (0 where the front's range is 0); summed over
    objectives. ``objectives: float[N, M]`` (NaN counts as ``-inf``), ``ranks:
    int[N]`` (:func:`non_dominated_ranks`)."""
    f = _finite_or_worst(objectives)
    n, m = f.shape
    ranks = ranks.astype(jnp.int32)
    total = jnp.zeros((n,), jnp.float32)
    for j in range(m):
        v = f[:, j]
        order = jnp.lexsort((v, ranks))  # by front, then by objective j
        r, s = ranks[order], v[order]
        with_prev = jnp.concatenate([jnp.array([False]), r[1:] == r[:-1]])
        with_next = jnp.concatenate([r[:-1] == r[1:], jnp.array([False])])
        zero = jnp.zeros((1,), s.dtype)
        gap = jnp.concatenate([zero, s[2:] - s[:-2], zero])  # point k: s[k + 1] - s[k - 1]
        span = (
            jax.ops.segment_max(v, ranks, num_segments=n)
            - jax.ops.segment_min(v, ranks, num_segments=n)
        )[r]
        inner = jnp.where(span > 0, gap / jnp.where(span > 0, span, 1.0), 0.0)
        inner = jnp.where(jnp.isnan(inner), 0.0, inner)  # -inf neighbours (invalid points)
        d = jnp.where(with_prev & with_next, inner, jnp.inf)
        total = total.at[order].add(d)
    return total


def hypervolume(
    points: jax.Array, reference: Any, *, key: jax.Array | None = None, samples: int = 100_000
) -> jax.Array:
    """``float32[]``: the volume of the region that ``points`` (``float[N, M]``,
    maximised) dominate and that dominates ``reference`` (``M`` values). Points
    that do not beat the reference in every objective, and NaN, add nothing.

    Two objectives: exact, by sorting the points by the first objective
    (largest first) and adding each one's rectangle above the best second
    objective seen so far. More objectives: a Monte-Carlo estimate, the fraction
    of ``samples`` uniform draws (from ``key``; default ``key(0)``) in the box
    from ``reference`` to the points' best values that some point dominates,
    times the box's volume.
    """
    f = _finite_or_worst(points)
    ref = jnp.broadcast_to(jnp.asarray(reference, jnp.float32), (f.shape[1],))
    if f.shape[1] == 2:
        order = jnp.lexsort((-f[:, 1], -f[:, 0]))  # first objective descending
        x, y = f[order, 0], f[order, 1]
        best = jax.lax.cummax(jnp.maximum(y, ref[1]))
        rise = best - jnp.concatenate([ref[1:2], best[:-1]])
        return jnp.sum(jnp.maximum(x - ref[0], 0.0) * rise).astype(jnp.float32)
    top = jnp.maximum(jnp.max(f, axis=0), ref)
    key = jax.random.key(0) if key is None else key
    u = jax.random.uniform(key, (samples, f.shape[1]), jnp.float32) * (top - ref) + ref
    covered = jnp.any(jnp.all(f[None, :, :] >= u[:, None, :], axis=-1), axis=-1)
    return (jnp.mean(covered.astype(jnp.float32)) * jnp.prod(top - ref)).astype(jnp.float32)


def sbx_crossover(
    x1: jax.Array,
    x2: jax.Array,
    key: jax.Array,
    eta: float | jax.Array,
    low: float,
    high: float,
    prob: float | jax.Array = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """Bounded simulated binary crossover of parent batches ``x1, x2``
    (``float32[B, n]``) into two children each (Deb and Agrawal 1995; the NSGA-II
    C code's ``realcross``): with probability ``prob`` a pair is crossed; then each
    variable with probability 1/2 (and the parents more than 1e-14 apart) gets
    ``c1, c2 = ((y1 + y2) -+ beta_q (y2 - y1)) / 2`` with ``beta_q`` drawn from the
    distribution of index ``eta`` bounded to ``[low, high]``, the two children
    swapped with probability 1/2; other variables are copied. Children are
    clipped to ``[low, high]``."""
    b, n = x1.shape
    pair, var, u_key, swap = jax.random.split(key, 4)
    crossed = (
        (jax.random.uniform(pair, (b, 1)) <= prob)
        & (jax.random.uniform(var, (b, n)) <= 0.5)
        & (jnp.abs(x1 - x2) > _EPS)
    )
    y1, y2 = jnp.minimum(x1, x2), jnp.maximum(x1, x2)
    dist = jnp.where(crossed, y2 - y1, 1.0)
    u = jax.random.uniform(u_key, (b, n))
    exponent = 1.0 / (eta + 1.0)

    def beta_q(beta: jax.Array) -> jax.Array:
        alpha = 2.0 - jnp.power(beta, -(eta + 1.0))
        return jnp.where(
            u <= 1.0 / alpha,
            jnp.power(u * alpha, exponent),
            jnp.power(1.0 / (2.0 - u * alpha), exponent),
        )

    c1 = 0.5 * ((y1 + y2) - beta_q(1.0 + 2.0 * (y1 - low) / dist) * dist)
    c2 = 0.5 * ((y1 + y2) + beta_q(1.0 + 2.0 * (high - y2) / dist) * dist)
    c1, c2 = jnp.clip(c1, low, high), jnp.clip(c2, low, high)
    flip = jax.random.uniform(swap, (b, n)) <= 0.5
    child1 = jnp.where(crossed, jnp.where(flip, c2, c1), x1)
    child2 = jnp.where(crossed, jnp.where(flip, c1, c2), x2)
    return child1.astype(x1.dtype), child2.astype(x2.dtype)


def polynomial_mutation(
    x: jax.Array,
    key: jax.Array,
    eta: float | jax.Array,
    prob: float | jax.Array,
    low: float,
    high: float,
) -> jax.Array:
    """Bounded polynomial mutation of ``x: float32[B, n]`` (Deb and Goyal 1996;
    the NSGA-II C code's ``real_mutate_ind``): each variable with probability
    ``prob`` moves by ``delta_q (high - low)``, ``delta_q`` of distribution
    index ``eta`` scaled to the variable's distance from its bounds; clipped to
    ``[low, high]``."""
    which, u_key = jax.random.split(key)
    mutate = jax.random.uniform(which, x.shape) <= prob
    u = jax.random.uniform(u_key, x.shape)
    span = high - low
    d1, d2 = (x - low) / span, (high - x) / span
    power = 1.0 / (eta + 1.0)
    down = jnp.power(2.0 * u + (1.0 - 2.0 * u) * jnp.power(1.0 - d1, eta + 1.0), power) - 1.0
    up = 1.0 - jnp.power(2.0 * (1.0 - u) + 2.0 * (u - 0.5) * jnp.power(1.0 - d2, eta + 1.0), power)
    moved = jnp.clip(x + jnp.where(u <= 0.5, down, up) * span, low, high)
    return jnp.where(mutate, moved, x).astype(x.dtype)


@struct.dataclass
class NSGA2State:
    """State of :class:`NSGA2`: the parent population of ``N`` members.

    Attributes:
      genotypes: ``float32[N, num_dims]``.
      objectives: ``float32[N, M]``, maximised; ``-inf`` before generation 0 is told.
      ranks: ``int32[N]``, each member's front (0: non-dominated).
      crowding: ``float32[N]``, each member's crowding distance within its
        front, as computed over parents and offspring when it survived.
      generation: ``int32[]``, generations told so far.
    """

    genotypes: jax.Array
    objectives: jax.Array
    ranks: jax.Array
    crowding: jax.Array
    generation: jax.Array

    @property
    def front(self) -> jax.Array:
        """``bool[N]``: the members of the first front (non-dominated)."""
        return (self.ranks == 0) & jnp.all(jnp.isfinite(self.objectives), axis=-1)


class NSGA2(PopulationModule):
    """NSGA-II on a multi-objective task, every objective maximised.

    One generation (:class:`~jaxtrainer.PopulationTrainer` step) of population
    size ``N`` (even): ``ask`` picks ``N`` parents by binary tournaments on the
    crowded comparison (lower front wins, then the larger crowding distance,
    then a coin), from two random permutations of the population so that each
    member enters two tournaments (the C code's ``selection``); consecutive
    parents are crossed (:func:`sbx_crossover`) and every child mutated
    (:func:`polynomial_mutation`). Generation 0 asks ``N`` uniform draws over
    the genotype bounds instead (the initial population). ``evaluate`` returns
    the task's ``M`` objectives as the member's fitness (``float32[M]``);
    ``tell`` sorts the ``2N`` parents and offspring into fronts and keeps the
    first ``N`` by front, then by crowding distance (larger first; ties: the
    earlier, parents before offspring). The run's ``G`` generations evaluate
    ``G * N`` members: Deb et al.'s "250 generations" of 100 (25,000
    evaluations, as jMetal and pymoo count them) are ``max_generations=250``.

    Args:
      task: a :class:`~jaxtrainer.population.mo_tasks.MOTask` or a name for
        :func:`~jaxtrainer.population.make_mo_task` (``"zdt1"``).
      crossover_prob: probability that a pair of parents is crossed (``p_c``).
      crossover_eta: SBX distribution index (``eta_c``, > 0).
      mutation_prob: per-variable mutation probability (``p_m``; ``None``:
        ``1 / num_dims``).
      mutation_eta: polynomial mutation distribution index (``eta_m``, > 0).
      reference_point: the hypervolume's reference, ``M`` values (``None``: the
        task's).
      **task_kwargs: the task's own arguments when ``task`` is a name
        (``num_dims=30``).

    Metrics (each generation's, reduced over a log interval by the last):
    ``moo/hypervolume`` (:func:`hypervolume` of the population from
    ``reference_point``), ``moo/front_size`` (members in the first front);
    ``fitness/<j>/mean``, ``/max``, ``/min`` per objective ``j`` (the
    offspring's, from the trainer). ``evaluation_step`` reports
    ``eval/hypervolume`` and ``eval/front_size``.

    Raises:
      ValueError: an unknown task, a probability outside ``[0, 1]``, a
        distribution index <= 0, a reference point of another length than the
        task's objectives; an odd population size when the trainer configures
        it; before anything compiles.
    """

    headline_metric = "moo/hypervolume"
    ENV_SECTION = (
        "the multi-objective task: jaxtrainer.population.make_mo_task(name, **the "
        "other keys); name: zdt1, zdt2 or zdt3"
    )
    """What a recipe's ``env:`` section is for this module (``--help``)."""

    def __init__(
        self,
        task: str | MOTask = "zdt1",
        *,
        crossover_prob: float = 0.9,
        crossover_eta: float = 20.0,
        mutation_prob: float | None = None,
        mutation_eta: float = 20.0,
        reference_point: Any = None,
        **task_kwargs: Any,
    ) -> None:
        if isinstance(task, str):
            task = make_mo_task(task, **task_kwargs)
        elif task_kwargs:
            raise TypeError(
                f"NSGA2: task keywords {sorted(task_kwargs)} are given with an "
                "MOTask; pass them to make_mo_task instead"
            )
        self.task = task
        self.crossover_prob = float(arguments.number("crossover_prob", crossover_prob, 0, 1))
        self.crossover_eta = float(
            arguments.number("crossover_eta", crossover_eta, 0, low_open=True)
        )
        if mutation_prob is None:
            mutation_prob = 1.0 / task.num_dims
        self.mutation_prob = float(arguments.number("mutation_prob", mutation_prob, 0, 1))
        self.mutation_eta = float(arguments.number("mutation_eta", mutation_eta, 0, low_open=True))
        reference = task.reference_point if reference_point is None else reference_point
        if isinstance(reference, (str, bytes)) or len(list(reference)) != task.num_objectives:
            raise ValueError(
                f"reference_point={reference_point!r}: the {task.name!r} task has "
                f"{task.num_objectives} objectives, expected as many values"
            )
        self.reference_point = tuple(
            float(arguments.number(f"reference_point[{i}]", v)) for i, v in enumerate(reference)
        )

    def configure_population(self, population_size: int) -> None:
        if population_size % 2:
            raise ValueError(
                f"NSGA2: population_size={population_size}: expected an even "
                "number (parents are crossed in pairs)"
            )
        self.population_size = population_size

    def init_state(self, key: jax.Array) -> NSGA2State:
        """An empty parent population (objectives ``-inf``; ``key`` unused)."""
        n, m = self._size(), self.task.num_objectives
        return NSGA2State(
            jnp.zeros((n, self.task.num_dims), jnp.float32),
            jnp.full((n, m), -jnp.inf, jnp.float32),
            jnp.zeros((n,), jnp.int32),
            jnp.zeros((n,), jnp.float32),
            jnp.zeros((), jnp.int32),
        )

    def _size(self) -> int:
        if self.population_size is None:
            raise ValueError(
                "NSGA2: the population size is not known yet; run it with PopulationTrainer"
            )
        return self.population_size

    def ask(self, state: NSGA2State, key: jax.Array) -> tuple[jax.Array, NSGA2State]:
        """``float32[N, num_dims]`` offspring (uniform draws at generation 0)."""
        n, dims = self._size(), self.task.num_dims
        low, high = self.task.genotype_bounds
        perms, coins, cross, mutate, uniform = jax.random.split(key, 5)
        entrants = jnp.concatenate(
            [jax.random.permutation(k, n) for k in jax.random.split(perms, 2)]
        ).reshape(n, 2)
        a, b = entrants[:, 0], entrants[:, 1]
        ra, rb = state.ranks[a], state.ranks[b]
        ca, cb = state.crowding[a], state.crowding[b]
        coin = jax.random.uniform(coins, (n,)) <= 0.5
        a_wins = (ra < rb) | ((ra == rb) & ((ca > cb) | ((ca == cb) & coin)))
        parents = state.genotypes[jnp.where(a_wins, a, b)]
        c1, c2 = sbx_crossover(
            parents[0::2], parents[1::2], cross, self.crossover_eta, low, high, self.crossover_prob
        )
        children = jnp.stack([c1, c2], axis=1).reshape(n, dims)
        children = polynomial_mutation(
            children, mutate, self.mutation_eta, self.mutation_prob, low, high
        )
        start = jax.random.uniform(uniform, (n, dims), jnp.float32, low, high)
        return jnp.where(state.generation > 0, children, start), state

    def evaluate(self, member: jax.Array, key: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """``(objectives: float32[M], {})``."""
        return jnp.asarray(self.task.fn(member, key), jnp.float32), {}

    def tell(
        self, state: NSGA2State, population: jax.Array, fitness: jax.Array
    ) -> tuple[NSGA2State, dict[str, Any]]:
        """Keep the best ``N`` of parents and offspring (``fitness: float32[N, M]``)."""
        n = self._size()
        genotypes = jnp.concatenate([state.genotypes, population.astype(jnp.float32)])
        objectives = jnp.concatenate([state.objectives, _finite_or_worst(fitness)])
        ranks = non_dominated_ranks(objectives)
        crowding = crowding_distances(objectives, ranks)
        keep = jnp.lexsort((-crowding, ranks))[:n]
        new = NSGA2State(
            genotypes[keep], objectives[keep], ranks[keep], crowding[keep], state.generation + 1
        )
        return new, {f"moo/{k}": Last.of(v) for k, v in self._metrics(new).items()}

    def _metrics(self, state: NSGA2State) -> dict[str, jax.Array]:
        return {
            "hypervolume": hypervolume(state.objectives, self.reference_point),
            "front_size": jnp.sum(state.front).astype(jnp.float32),
        }

    def evaluation_step(self, state: NSGA2State, key: jax.Array) -> dict[str, Any]:
        return {f"eval/{k}": v for k, v in self._metrics(state).items()}

    def hparams(self) -> dict[str, Any]:
        return {
            "task": self.task.name,
            "num_dims": self.task.num_dims,
            "crossover_prob": self.crossover_prob,
            "crossover_eta": self.crossover_eta,
            "mutation_prob": self.mutation_prob,
            "mutation_eta": self.mutation_eta,
            "reference_point": list(self.reference_point),
        }


__all__ = [
    "NSGA2",
    "NSGA2State",
    "crowding_distances",
    "dominance",
    "hypervolume",
    "non_dominated_ranks",
    "polynomial_mutation",
    "sbx_crossover",
]
