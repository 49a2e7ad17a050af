"""ERL's genetic algorithm over a population of actor parameters, as pure functions.

Khadka and Tumer 2018 ("Evolution-Guided Policy Gradient in Reinforcement
Learning", NeurIPS, arXiv:1805.07917), Algorithm 1, and the reference code
``ShawK91/erl_paper`` (``core/mod_neuro_evo.py``, class ``SSNE``), in the
fixed-shape form EvoRL uses for JAX (``EMI-Group/evorl``,
``evorl/ec/optimizers/erl_ga.py`` and ``evorl/ec/operators``). A population is
a pytree whose leaves have a leading member axis ``P`` (e.g. flax parameters of
``P`` actors, :mod:`jaxtrainer.distributed._members`). One :func:`ga_step`:

1. **elitism**: the ``K`` best members (``K = max(1, int(elite_fraction * P))``,
   the reference's ``num_elitists``) are kept unchanged, in their slots;
2. **selection**: ``P - K`` parents by tournaments of ``tournament_size``
   members drawn with replacement (reference ``selection_tournament``, size 3):
   :func:`tournament_selection`;
3. **crossover**: consecutive parent pairs ``(0, 1), (2, 3), ...`` are crossed
   with probability ``crossover_prob`` (:func:`crossover`, which swaps whole
   units between the two as the reference's ``crossover_inplace``);
4. **mutation**: each offspring is mutated with probability ``mutation_prob``
   (:func:`mutate`, the reference's ``mutate_inplace``);
5. the offspring fill the ``P - K`` other slots in rank order, so the slot of
   the worst member of the evaluated generation receives the last offspring,
   and is where :func:`inject` puts the RL actor (the paper's "copy the RL
   actor into the weakest member of the population").

Differences from the reference, on purpose (static shapes, as EvoRL): the
offspring count is always ``P - K`` (the reference drops duplicate tournament
winners and refills with crossover children of an elite and a winner); weights
to mutate and units to swap are chosen by independent Bernoulli draws of the
stated fractions instead of a random number of draws with replacement.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed._members import population_size, rank

_PROBABILITIES = ("elite_fraction", "crossover_prob", "crossover_fraction", "mutation_prob",
                  "mutation_fraction", "super_mutation_prob", "reset_prob")


def check_ga(config: Any) -> None:
    """The checks of the GA's fields of a config (ERL's: ``population_size``,
    ``tournament_size``, the probabilities, ``weight_limit``, the mutation
    strengths) and of how they fit together.

    Raises:
      ValueError: a bad value, naming ``<config class>.<field>``.
    """
    arguments.check_fields(config, arguments.positive_int, ("tournament_size",),
                           allow_none=False)
    arguments.check_fields(config, arguments.number, _PROBABILITIES, low=0, high=1)
    arguments.check_fields(config, arguments.number, ("weight_limit",), low=0, low_open=True)
    arguments.check_fields(config, arguments.number,
                           ("mutation_strength", "super_mutation_strength"), low=0)
    p = config.population_size
    if p < 2:
        raise arguments.field_error(config, "population_size", p,
                                    ": expected an int >= 2 (an elite and an offspring)")
    elites = num_elites(p, config.elite_fraction)
    if elites >= p:
        raise arguments.field_error(config, "elite_fraction", config.elite_fraction,
                                    f": keeps {elites} elites of population_size={p}, leaving "
                                    "no offspring; expected fewer elites than members")
    if config.super_mutation_prob + config.reset_prob > 1:
        raise arguments.field_error(config, "reset_prob", config.reset_prob,
                                    ": super_mutation_prob + reset_prob must be at most 1")


def num_elites(population_size: int, elite_fraction: float) -> int:
    """``K = max(1, int(elite_fraction * P))`` (the reference's ``num_elitists``)."""
    return max(1, int(elite_fraction * population_size))


def tournament_selection(fitness: jax.Array, u: jax.Array) -> jax.Array:
    """Tournament winners, with replacement: ``int32[num]`` member indices.

    Tournament ``j`` draws ``tournament_size`` rank positions ``floor(u[j] * P)``
    (uniform over ``0 .. P-1``, with replacement) and its winner is the member at
    the best (smallest) drawn rank (the reference's
    ``np.min(np.random.randint(total_choices, size=tournament_size))`` into
    ``index_rank``). Ranks as :func:`~jaxtrainer.distributed._members.rank`:
    larger fitness is better, ties keep member order, NaN ranks last.

    Args:
      fitness: ``float32[P]``.
      u: ``float32[num, tournament_size]``, uniform in ``[0, 1)``.
    """
    p = fitness.shape[0]
    positions = jnp.minimum(jnp.floor(u * p).astype(jnp.int32), p - 1)
    return rank(fitness)[jnp.min(positions, axis=1)]


def num_units(tree: Any) -> int:
    """Crossover units of one individual: the sizes of its leaves' last axes
    (scalar leaves have none)."""
    return sum(x.shape[-1] for x in jax.tree.leaves(tree) if np.ndim(x))


def mutation_sizes(tree: Any) -> tuple[int, int]:
    """``(M, W)``: the weight matrices (2-D leaves) of one individual and their weights."""
    mats = [x for x in jax.tree.leaves(tree) if np.ndim(x) == 2]
    return len(mats), sum(int(np.size(x)) for x in mats)


def _split(flat: jax.Array, sizes: list[int]) -> list[jax.Array]:
    """``flat`` (last axis) cut into consecutive pieces of ``sizes``."""
    return jnp.split(flat, np.cumsum(sizes)[:-1].tolist(), axis=-1)


def crossover(a: Any, b: Any, r: jax.Array, fraction: float) -> tuple[Any, Any]:
    """Swap units between two individuals (pytrees of the same structure, no member axis).

    A unit is a slice along a leaf's last axis: one output neuron's incoming
    weights for a flax kernel ``[in, out]`` (a row of the reference's PyTorch
    ``[out, in]`` weight) or one bias entry. Unit ``u`` (counted over the leaves
    in ``jax.tree.leaves`` order) is picked when ``r[u] < fraction``; a picked
    unit is copied from ``b`` into ``a`` when also ``r[u] < fraction / 2``, else
    from ``a`` into ``b`` (the reference's ``receiver_choice``, probability 1/2
    each), so every entry of either child comes from one of the parents at the
    same position. Scalar leaves are left alone.

    Args:
      a, b: the parents.
      r: ``float32[num_units(a)]``, uniform in ``[0, 1)``.
      fraction: probability that a unit is picked.

    Returns:
      ``(a', b')`` of the parents' structure, shapes and dtypes.
    """
    leaves_a, treedef = jax.tree.flatten(a)
    leaves_b = treedef.flatten_up_to(b)
    units = [x.shape[-1] for x in leaves_a if x.ndim]
    picks, into_a = iter(_split(r < fraction, units)), iter(_split(r < fraction / 2, units))
    out_a, out_b = [], []
    for x, y in zip(leaves_a, leaves_b, strict=True):
        if x.ndim:
            pick, to_a = next(picks), next(into_a)
            x, y = jnp.where(pick & to_a, y, x), jnp.where(pick & ~to_a, x, y)
        out_a.append(x)
        out_b.append(y)
    return treedef.unflatten(out_a), treedef.unflatten(out_b)


def mutate(x: Any, u: jax.Array, v: jax.Array, z: jax.Array, *, fraction: float = 0.1,
           strength: float = 0.1, super_prob: float = 0.05, super_strength: float = 10.0,
           reset_prob: float = 0.05, limit: float = 1e6) -> Any:
    """ERL's mutation of one individual (reference ``mutate_inplace``, constants its defaults).

    Only 2-D leaves (weight matrices) change; biases and other leaves are kept,
    as in the reference. Matrix ``m`` (in ``jax.tree.leaves`` order) is
    considered when ``u[m, 0] < 2 u[m, 1]`` (probability 3/4: the reference's
    ``ssne_probabilities``). Its weights, concatenated over the matrices in
    that order, each get a uniform ``v`` and a standard normal ``z``; a weight
    ``w`` of a considered matrix is picked when ``v < fraction`` and, with ``r =
    v / fraction`` (uniform given the pick), becomes:

    * ``r < super_prob``: ``w + z * super_strength * |w|`` (super mutation);
    * ``r < super_prob + reset_prob``: ``z`` (reset to ``N(0, 1)``);
    * otherwise: ``w + z * strength * |w|``;

    then clipped to ``[-limit, limit]`` (the reference's ``regularize_weight``).

    Args:
      x: the individual.
      u: ``float32[M, 2]``, ``v``: ``float32[W]`` uniform in ``[0, 1)``; ``z``:
        ``float32[W]`` standard normal (``(M, W) = mutation_sizes(x)``).
    """
    leaves, treedef = jax.tree.flatten(x)
    mats = [i for i, w in enumerate(leaves) if w.ndim == 2]
    if not mats:
        return x
    sizes = [leaves[i].size for i in mats]
    gate = jnp.repeat(u[:, 0] < 2.0 * u[:, 1], np.asarray(sizes), total_repeat_length=sum(sizes))
    dtype = leaves[mats[0]].dtype
    w = jnp.concatenate([leaves[i].reshape(-1).astype(dtype) for i in mats])
    z = z.astype(dtype)
    pick, kind = v < fraction, v / fraction
    noise = z * jnp.abs(w)
    new = jnp.where(kind < super_prob, w + super_strength * noise,
                    jnp.where(kind < super_prob + reset_prob, z, w + strength * noise))
    w = jnp.where(gate & pick, jnp.clip(new, -limit, limit), w)
    out = list(leaves)
    for i, piece in zip(mats, _split(w, sizes), strict=True):
        out[i] = piece.reshape(leaves[i].shape).astype(leaves[i].dtype)
    return treedef.unflatten(out)


def _choose(flags: jax.Array, yes: Any, no: Any) -> Any:
    """Per member: ``yes[i]`` where ``flags[i]`` else ``no[i]`` (leaves ``[N, ...]``)."""
    return jax.tree.map(lambda a, b: jnp.where(flags.reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
                        yes, no)


def ga_step(population: Any, fitness: jax.Array, key: jax.Array,
            config: Any) -> tuple[Any, jax.Array]:
    """One generation of ERL's GA (see the module docstring); pure and replicated.

    Args:
      population: leaves ``[P, ...]``, the evaluated members.
      fitness: ``float32[P]``, larger is better (NaN ranks last).
      key: typed PRNG key. Every draw is a piece of one ``uniform(key, (n,))``
        (one PRNG expansion to compile), cut in this order: the tournaments'
        ``u`` ``[P - K, tournament_size]`` (:func:`tournament_selection`); per
        crossed pair its coin and ``r`` ``[pairs, 1 + U]`` (:func:`crossover`);
        per offspring its mutation coin, ``u`` and ``v`` ``[P - K, 1 + 2 M + W]``
        and ``[P - K, W]`` more made standard normal ``z = sqrt(2) erfinv(2 x -
        1)`` (:func:`mutate`). ``U = num_units``, ``(M, W) = mutation_sizes`` of
        one member; the crossover and mutation pieces are absent when their
        probability is 0.
      config: an object with ``elite_fraction``, ``tournament_size``,
        ``crossover_prob``, ``crossover_fraction``, ``mutation_prob``,
        ``mutation_fraction``, ``mutation_strength``, ``super_mutation_prob``,
        ``super_mutation_strength``, ``reset_prob`` and ``weight_limit`` (an
        :class:`~jaxtrainer.algorithms.erl.ERLConfig`).

    Returns:
      ``(new_population, order)``: ``order: int32[P]`` the members from best to
      worst; ``new_population[order[:K]]`` are the elites unchanged and
      ``new_population[order[K + j]]`` is offspring ``j``.

    Raises:
      ValueError: ``K >= P`` (no slot for an offspring).
    """
    p = population_size(population)
    k = num_elites(p, config.elite_fraction)
    if k >= p:
        raise ValueError(f"ga_step: {k} elites leave no offspring in a population of {p}; "
                         "lower elite_fraction or grow population_size")
    num = p - k
    order = rank(fitness)
    member = jax.tree.map(lambda x: x[0], population)
    units, (mats, weights) = num_units(member), mutation_sizes(member)
    pairs = num // 2 if config.crossover_prob > 0 else 0
    mutating = config.mutation_prob > 0 and mats > 0
    sizes = [num * config.tournament_size, pairs * (1 + units),
             num * (1 + 2 * mats + weights) if mutating else 0, num * weights if mutating else 0]
    select, cross, mut, normal = _split(jax.random.uniform(key, (sum(sizes),)), sizes)
    parents = tournament_selection(fitness, select.reshape(num, config.tournament_size))
    offspring = jax.tree.map(lambda x: x[parents], population)

    if pairs:
        cross = cross.reshape(pairs, 1 + units)
        first = jax.tree.map(lambda x: x[0:2 * pairs:2], offspring)
        second = jax.tree.map(lambda x: x[1:2 * pairs:2], offspring)
        child_a, child_b = jax.vmap(lambda a, b, r: crossover(
            a, b, r, config.crossover_fraction))(first, second, cross[:, 1:])
        do = cross[:, 0] < config.crossover_prob
        child_a, child_b = _choose(do, child_a, first), _choose(do, child_b, second)
        offspring = jax.tree.map(
            lambda x, a, b: x.at[0:2 * pairs:2].set(a).at[1:2 * pairs:2].set(b),
            offspring, child_a, child_b)

    if mutating:
        mut = mut.reshape(num, 1 + 2 * mats + weights)
        tiny = float(jnp.finfo(jnp.float32).eps)
        z = jnp.sqrt(2.0) * jax.lax.erf_inv(jnp.clip(2.0 * normal - 1.0, -1.0 + tiny, 1.0 - tiny))
        mutated = jax.vmap(lambda x, u, v, zz: mutate(
            x, u.reshape(mats, 2), v, zz, fraction=config.mutation_fraction,
            strength=config.mutation_strength, super_prob=config.super_mutation_prob,
            super_strength=config.super_mutation_strength, reset_prob=config.reset_prob,
            limit=config.weight_limit))(offspring, mut[:, 1:1 + 2 * mats],
                                        mut[:, 1 + 2 * mats:], z.reshape(num, weights))
        offspring = _choose(mut[:, 0] < config.mutation_prob, mutated, offspring)

    new = jax.tree.map(lambda x, o: x.at[order[k:]].set(o), population, offspring)
    return new, order


def inject(population: Any, actor: Any, slot: jax.Array, do: jax.Array = True) -> Any:
    """``population`` with member ``slot`` replaced by ``actor`` (no member axis)
    when ``do`` (a ``bool[]``), else unchanged: the RL actor's injection."""
    return jax.tree.map(lambda x, a: x.at[slot].set(jnp.where(do, a.astype(x.dtype), x[slot])),
                        population, actor)


__all__ = ["crossover", "ga_step", "inject", "mutate", "mutation_sizes", "num_elites", "num_units",
           "tournament_selection"]
