"""MAP-Elites: a repertoire of elites, one per cell of descriptor space.

Mouret and Clune 2015 ("Illuminating search spaces by mapping elites",
arXiv:1504.04909), in the form of QDax (``qdax/core/map_elites.py``,
``core/containers/mapelites_repertoire.py``, ``core/emitters/standard_emitters.py``,
``utils/metrics.py``), as a :class:`~jaxtrainer.PopulationModule`: one
:class:`~jaxtrainer.PopulationTrainer` generation emits a batch of
``population_size`` genotypes from the repertoire (:meth:`MAPElites.ask`),
evaluates them split over the devices (fitness and descriptor, gathered bit for
bit) and inserts them (:meth:`MAPElites.tell`). The repertoire lives in the
replicated state, so it is checkpointed and resumed as any state and is the same
on any device count.

* :class:`Repertoire`: genotypes, fitnesses and descriptors per cell, the cells'
  centroids (:func:`grid_centroids`: a regular grid over the descriptor bounds);
  an empty cell has fitness ``-inf``. :meth:`Repertoire.add` is QDax's insertion.
* :func:`isoline_variation`: the Iso+LineDD operator (Vassiliades and Mouret
  2018, "Discovering the elite hypervolume by leveraging interspecies
  correlation", GECCO): ``x + sigma_iso N(0, I) + sigma_line N(0, 1) (y - x)``.
* :meth:`Repertoire.metrics`: QDax's ``default_qd_metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.metrics import Last
from jaxtrainer.module import PopulationModule
from jaxtrainer.population.qd_tasks import QDTask, make_task


def grid_centroids(grid_shape: Sequence[int], low: float | Sequence[float],
                   high: float | Sequence[float]) -> jax.Array:
    """The centres of a regular grid over the box ``[low, high]``:
    ``float32[prod(grid_shape), len(grid_shape)]``.

    Cell ``(i_0, i_1, ...)`` has centre ``low + (i_k + 1/2) (high - low) / n_k``
    per coordinate; cells are ordered as QDax's ``compute_euclidean_centroids``
    (``jnp.meshgrid``'s ``xy`` order: for a 2-D grid the first coordinate varies
    fastest).

    Raises:
      ValueError: an empty grid shape or a size < 1, or ``high <= low``.
    """
    shape = arguments.sizes("grid_shape", grid_shape)
    if not shape:
        raise ValueError("grid_shape=(): expected one size per descriptor dimension")
    low_a = np.broadcast_to(np.asarray(low, np.float32), (len(shape),))
    high_a = np.broadcast_to(np.asarray(high, np.float32), (len(shape),))
    if not np.all(high_a > low_a):
        raise ValueError(f"descriptor bounds low={low!r}, high={high!r}: expected high > low "
                         "in every dimension")
    mesh = jnp.meshgrid(*[_unit_centres(n) for n in shape])
    unit = jnp.stack([m.ravel() for m in mesh], axis=-1)
    return (unit * (high_a - low_a) + low_a).astype(jnp.float32)


def _unit_centres(n: int) -> jax.Array:
    """``float32[n]``: the centres of ``n`` equal cells of ``[0, 1]``."""
    return jnp.linspace(1 / (2 * n), 1.0 - 1 / (2 * n), n, dtype=jnp.float32)


def _cell_lookup(grid_shape: tuple[int, ...]) -> np.ndarray:
    """``int32[*grid_shape]``: the index in :func:`grid_centroids`' order of the
    cell with per-axis indices ``(i_0, i_1, ...)``."""
    coords = np.meshgrid(*[np.arange(n) for n in grid_shape])
    lookup = np.zeros(grid_shape, np.int32)
    lookup[tuple(c.ravel() for c in coords)] = np.arange(math.prod(grid_shape), dtype=np.int32)
    return lookup


@struct.dataclass
class Repertoire:
    """A MAP-Elites repertoire of ``C`` cells (a pytree: it lives in the state).

    Attributes:
      genotypes: leaves ``[C, ...]``, each cell's elite (zeros where empty).
      fitnesses: ``float32[C]``, the elites' fitness; ``-inf`` marks an empty cell.
      descriptors: ``float32[C, D]``, the elites' descriptors as evaluated
        (zeros where empty).
      centroids: ``float32[C, D]``, the cells' centres.
      low, high: ``float32[D]``, the descriptor box: a descriptor is clipped to it
        before its cell is found, so one outside lands in the border cell.
      grid_shape: static; the regular grid the centroids form (``None``: any
        centroids).
    """

    genotypes: Any
    fitnesses: jax.Array
    descriptors: jax.Array
    centroids: jax.Array
    low: jax.Array
    high: jax.Array
    grid_shape: tuple[int, ...] | None = struct.field(pytree_node=False, default=None)

    @classmethod
    def empty(cls, genotype: Any, centroids: jax.Array, low: Any, high: Any,
              grid_shape: Sequence[int] | None = None) -> Repertoire:
        """A repertoire with every cell empty; ``genotype``: one member (a pytree
        of arrays or shape/dtype structs); ``grid_shape``: the grid the centroids
        are (:func:`grid_centroids` of it over ``[low, high]``), or ``None`` for
        any other centroids (a CVT)."""
        c, d = centroids.shape
        if grid_shape is not None and math.prod(grid_shape) != c:
            raise ValueError(f"grid_shape={list(grid_shape)} has {math.prod(grid_shape)} cells, "
                             f"the centroids {c}")
        return cls(jax.tree.map(lambda x: jnp.zeros((c, *x.shape), x.dtype), genotype),
                   jnp.full((c,), -jnp.inf, jnp.float32), jnp.zeros((c, d), jnp.float32),
                   jnp.asarray(centroids, jnp.float32),
                   jnp.broadcast_to(jnp.asarray(low, jnp.float32), (d,)),
                   jnp.broadcast_to(jnp.asarray(high, jnp.float32), (d,)),
                   None if grid_shape is None else tuple(int(n) for n in grid_shape))

    @property
    def filled(self) -> jax.Array:
        """``bool[C]``: the cells that hold an elite."""
        return self.fitnesses > -jnp.inf

    def cells(self, descriptors: jax.Array) -> jax.Array:
        """``int32[B]``: each descriptor's cell, the nearest centroid to the
        descriptor clipped to ``[low, high]`` (so one outside the box lands in the
        border cell). On a grid (``grid_shape`` set) the nearest centre is found
        per coordinate among that axis's ``n_k`` centres (the lower on a tie),
        ``B * sum(n_k)`` work instead of ``B * C``; otherwise over every centroid
        by squared Euclidean distance, the lowest index on a tie (QDax's
        ``get_cells_indices``)."""
        clipped = jnp.clip(descriptors.astype(jnp.float32), self.low, self.high)
        if self.grid_shape is None:
            def nearest(d: jax.Array) -> jax.Array:
                return jnp.argmin(jnp.sum(jnp.square(d - self.centroids), axis=-1))

            return jax.vmap(nearest)(clipped).astype(jnp.int32)
        per_axis = []
        for k, n in enumerate(self.grid_shape):
            centres = _unit_centres(n) * (self.high[k] - self.low[k]) + self.low[k]
            per_axis.append(jnp.argmin(jnp.abs(clipped[:, k:k + 1] - centres), axis=-1))
        return jnp.asarray(_cell_lookup(self.grid_shape))[tuple(per_axis)]

    def add(self, genotypes: Any, descriptors: jax.Array, fitnesses: jax.Array) -> Repertoire:
        """Insert a batch of ``B`` evaluated genotypes (leaves ``[B, ...]``,
        ``descriptors: float32[B, D]``, ``fitnesses: float[B]``).

        Per cell, the batch's best candidate replaces the elite when its fitness
        is strictly greater (an empty cell's ``-inf`` is beaten by any finite
        fitness; a candidate equal to the elite leaves it in place). Of candidates
        that tie for a cell's best, the first in the batch is the one inserted (QDax
        leaves that choice to the scatter's order). A candidate whose fitness is
        NaN or whose descriptor is not finite is never inserted.
        """
        c, b = self.fitnesses.shape[0], fitnesses.shape[0]
        fitnesses = fitnesses.astype(jnp.float32)
        valid = ~jnp.isnan(fitnesses) & jnp.all(jnp.isfinite(descriptors), axis=-1)
        fitnesses = jnp.where(valid, fitnesses, -jnp.inf)
        cells = self.cells(jnp.where(valid[:, None], descriptors, 0.0))
        best = jax.ops.segment_max(fitnesses, cells, num_segments=c)
        index = jnp.arange(b, dtype=jnp.int32)
        first = jax.ops.segment_min(jnp.where(fitnesses == best[cells], index, b), cells,
                                    num_segments=c)
        wins = (index == first[cells]) & (fitnesses > self.fitnesses[cells])
        target = jnp.where(wins, cells, c)  # c is out of range: dropped

        def put(old: jax.Array, new: jax.Array) -> jax.Array:
            return old.at[target].set(new.astype(old.dtype), mode="drop")

        return self.replace(genotypes=jax.tree.map(put, self.genotypes, genotypes),
                            fitnesses=put(self.fitnesses, fitnesses),
                            descriptors=put(self.descriptors, descriptors))

    def sample(self, key: jax.Array, num: int) -> Any:
        """``num`` elites drawn uniformly with replacement from the filled cells
        (QDax's ``UniformSelector``): leaves ``[num, ...]``. An empty repertoire
        gives cell 0's zeros."""
        filled = self.filled.astype(jnp.float32)
        p = filled / jnp.maximum(jnp.sum(filled), 1.0)
        p = jnp.where(jnp.sum(filled) > 0, p, jnp.ones_like(p) / p.shape[0])
        picked = jax.random.choice(key, p.shape[0], (num,), replace=True, p=p)
        return jax.tree.map(lambda x: x[picked], self.genotypes)

    def metrics(self, qd_offset: float | jax.Array = 0.0) -> dict[str, jax.Array]:
        """QDax's ``default_qd_metrics``: ``qd_score`` = sum over filled cells of
        ``fitness + qd_offset`` (the offset makes fitnesses positive, so every
        filled cell adds), ``coverage`` = the percentage of cells filled (0 to
        100), ``max_fitness`` = the best elite's fitness (``-inf`` when empty).
        All ``float32[]``."""
        filled = self.filled
        count = jnp.sum(filled.astype(jnp.float32))
        score = jnp.sum(jnp.where(filled, self.fitnesses, 0.0)) + qd_offset * count
        return {"qd_score": score.astype(jnp.float32),
                "coverage": (100.0 * count / filled.shape[0]).astype(jnp.float32),
                "max_fitness": jnp.max(self.fitnesses)}


def isoline_variation(x: Any, y: Any, key: jax.Array, iso_sigma: float | jax.Array,
                      line_sigma: float | jax.Array, low: float | None = None,
                      high: float | None = None) -> Any:
    """Iso+LineDD offspring of parent batches ``x`` and ``y`` (pytrees, leaves
    ``[B, ...]``): ``x + iso_sigma * N(0, I) + line_sigma * N(0, 1) * (y - x)``,
    one line draw per member shared by its leaves, then clipped to ``[low,
    high]`` (``None``: that side unbounded). Draws as QDax's
    ``isoline_variation``: ``key, line_key = split(key)``; the line draw from
    ``line_key``; leaf ``i``'s isotropic draw from ``split(key, num_leaves)[i]``."""
    key, line_key = jax.random.split(key)
    leaves_x, treedef = jax.tree.flatten(x)
    leaves_y = treedef.flatten_up_to(y)
    batch = leaves_x[0].shape[0]
    line = jax.random.normal(line_key, (batch,)) * line_sigma
    keys = jax.random.split(key, len(leaves_x))
    out = []
    for a, b, k in zip(leaves_x, leaves_y, keys, strict=True):
        iso = jax.random.normal(k, a.shape, a.dtype) * iso_sigma
        child = (a + iso) + (b - a) * line.reshape((batch,) + (1,) * (a.ndim - 1)).astype(a.dtype)
        if low is not None or high is not None:
            child = jnp.clip(child, low, high)
        out.append(child)
    return treedef.unflatten(out)


@struct.dataclass
class MAPElitesState:
    """State of :class:`MAPElites`.

    Attributes:
      repertoire: the :class:`Repertoire`.
      generation: ``int32[]``, generations told so far.
    """

    repertoire: Repertoire
    generation: jax.Array


class MAPElites(PopulationModule):
    """MAP-Elites with the Iso+LineDD emitter, on a grid over the task's descriptors.

    One generation (:class:`~jaxtrainer.PopulationTrainer` step): ``ask`` emits
    ``population_size`` offspring, each from two elites drawn uniformly from the
    filled cells (:meth:`Repertoire.sample`, QDax's ``MixingEmitter`` with
    ``variation_percentage=1``) varied by :func:`isoline_variation` and clipped to
    the task's genotype bounds; while the repertoire is empty (generation 0) it
    emits uniform draws over the genotype bounds instead (QDax starts from such a
    batch). ``evaluate`` returns the task's fitness with its descriptor as the
    ``descriptor`` extra; ``tell`` inserts them (:meth:`Repertoire.add`).

    Args:
      task: a :class:`~jaxtrainer.population.qd_tasks.QDTask` or a name for
        :func:`~jaxtrainer.population.qd_tasks.make_task` (``"arm"``).
      grid_shape: cells per descriptor dimension (``D`` sizes).
      iso_sigma: the isotropic noise's standard deviation (>= 0).
      line_sigma: the line noise's standard deviation (>= 0).
      qd_offset: added to each filled cell's fitness in ``qd/score`` (QDax's
        ``qd_offset``).
      **task_kwargs: the task's own arguments when ``task`` is a name
        (``num_dims=8`` for the arm).

    Metrics (each generation's, reduced over a log interval by the last): ``qd/score``,
    ``qd/coverage`` (percent of cells filled), ``qd/max_fitness``
    (:meth:`Repertoire.metrics`), ``qd/inserted`` (offspring that entered the
    repertoire this generation); ``fitness/*`` (the offspring's, from the trainer).
    ``evaluation_step`` reports the same three as ``eval/qd_score``,
    ``eval/coverage``, ``eval/max_fitness``.

    Raises:
      ValueError: an unknown task, a grid with another number of dimensions than
        the task's descriptors, a negative sigma; before anything compiles.
    """

    tell_extras = True
    headline_metric = "qd/score"
    ENV_SECTION = ("the quality-diversity task: jaxtrainer.population.make_task(name, **the "
                   "other keys); name: arm")
    """What a recipe's ``env:`` section is for this module (``--help``)."""

    def __init__(self, task: str | QDTask = "arm", *, grid_shape: Sequence[int] = (100, 100),
                 iso_sigma: float = 0.005, line_sigma: float = 0.05, qd_offset: float = 0.0,
                 **task_kwargs: Any) -> None:
        if isinstance(task, str):
            task = make_task(task, **task_kwargs)
        elif task_kwargs:
            raise TypeError(f"MAPElites: task keywords {sorted(task_kwargs)} are given with a "
                            "QDTask; pass them to make_task instead")
        self.task = task
        self.grid_shape = arguments.sizes("grid_shape", grid_shape)
        if len(self.grid_shape) != task.descriptor_size:
            raise ValueError(f"grid_shape={list(self.grid_shape)}: the {task.name!r} task has "
                             f"{task.descriptor_size} descriptor dimension(s), expected as many "
                             "sizes")
        self.iso_sigma = float(arguments.number("iso_sigma", iso_sigma, low=0))
        self.line_sigma = float(arguments.number("line_sigma", line_sigma, low=0))
        self.qd_offset = float(arguments.number("qd_offset", qd_offset))
        self.num_cells = math.prod(self.grid_shape)

    def configure_population(self, population_size: int) -> None:
        self.population_size = population_size

    def init_state(self, key: jax.Array) -> MAPElitesState:
        """An empty repertoire over the grid (``key`` unused: nothing is drawn)."""
        low, high = self.task.descriptor_bounds
        centroids = grid_centroids(self.grid_shape, low, high)
        genotype = jax.ShapeDtypeStruct((self.task.num_dims,), jnp.float32)
        return MAPElitesState(Repertoire.empty(genotype, centroids, low, high, self.grid_shape),
                              jnp.zeros((), jnp.int32))

    def ask(self, state: MAPElitesState, key: jax.Array) -> tuple[jax.Array, MAPElitesState]:
        """``float32[P, num_dims]`` offspring (uniform draws while the repertoire is empty)."""
        if self.population_size is None:
            raise ValueError("MAPElites: the population size is not known yet; run it with "
                             "PopulationTrainer")
        rep, p = state.repertoire, self.population_size
        first, second, vary, start = jax.random.split(key, 4)
        return jnp.where(jnp.any(rep.filled), self._isoline(rep, (first, second, vary), p),
                         self._start(start, p)), state

    def _isoline(self, rep: Repertoire, keys: Any, num: int) -> jax.Array:
        """``float32[num, num_dims]``: Iso+LineDD offspring of pairs of elites
        drawn uniformly, clipped to the task's genotype bounds; ``keys``: three
        keys (the two parents' draws, the variation's)."""
        low, high = self.task.genotype_bounds
        first, second, vary = keys
        return isoline_variation(rep.sample(first, num), rep.sample(second, num), vary,
                                 self.iso_sigma, self.line_sigma,
                                 None if low == -math.inf else low,
                                 None if high == math.inf else high)

    def _start(self, key: jax.Array, num: int) -> jax.Array:
        """``float32[num, num_dims]``: generation 0, the task's ``init`` of ``num``
        keys, or uniform over its genotype bounds."""
        if self.task.init is not None:
            return jax.vmap(self.task.init)(jax.random.split(key, num)).astype(jnp.float32)
        low, high = self.task.genotype_bounds
        return jax.random.uniform(key, (num, self.task.num_dims), jnp.float32, low, high)

    def evaluate(self, member: jax.Array, key: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """``(fitness: float32[], {"descriptor": float32[D]})``."""
        fitness, descriptor = self.task.fn(member, key)
        return jnp.asarray(fitness, jnp.float32), {"descriptor": jnp.asarray(descriptor,
                                                                             jnp.float32)}

    def tell(self, state: MAPElitesState, population: jax.Array, fitness: jax.Array,
             extras: dict[str, jax.Array]) -> tuple[MAPElitesState, dict[str, Any]]:
        """Insert the evaluated offspring; ``extras["descriptor"]: float32[P, D]``."""
        old = state.repertoire
        rep = old.add(population, extras["descriptor"], fitness)
        inserted = jnp.sum(rep.fitnesses != old.fitnesses).astype(jnp.float32)
        metrics = {f"qd/{k.removeprefix('qd_')}": Last.of(v)
                   for k, v in rep.metrics(self.qd_offset).items()}
        metrics["qd/inserted"] = Last.of(inserted)
        return MAPElitesState(rep, state.generation + 1), metrics

    def evaluation_step(self, state: MAPElitesState, key: jax.Array) -> dict[str, Any]:
        return {f"eval/{k}": v for k, v in state.repertoire.metrics(self.qd_offset).items()}

    def hparams(self) -> dict[str, Any]:
        return {"task": self.task.name, "num_dims": self.task.num_dims,
                "grid_shape": list(self.grid_shape), "iso_sigma": self.iso_sigma,
                "line_sigma": self.line_sigma, "qd_offset": self.qd_offset}


__all__ = ["MAPElites", "MAPElitesState", "Repertoire", "grid_centroids", "isoline_variation"]
