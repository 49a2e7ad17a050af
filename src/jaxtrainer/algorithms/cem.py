"""The separable cross-entropy method (CEM) over flat parameters, as CEM-RL's
reference runs it (Pourchot and Sigaud 2019, arXiv:1810.01222; reference code
``apourchot/CEM-RL``, ``ES.py`` ``sepCEM``): sample a population from a
diagonal Gaussian ``N(mu, diag(var))`` (:func:`sample_population`) and refit it
to the fitness-weighted elites (:func:`sep_cem_update`). The recombination
weights are :func:`~jaxtrainer.algorithms.evolution.elite_weights`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtrainer.distributed.members import rank


def sample_population(mean: jax.Array, var: jax.Array, key: jax.Array, population_size: int,
                      antithetic: bool = True) -> jax.Array:
    """``P`` samples of ``N(mean, diag(var))``: ``float32[P, D]``.

    Member ``i`` is ``mean + sqrt(var) * eps_i`` with ``eps_i ~ N(0, I)`` drawn from
    ``fold_in(key, i)``; with ``antithetic``, ``eps_{i + P/2} = -eps_i`` (``P``
    even). So member ``i`` depends only on ``key`` and ``i``.

    Args:
      mean, var: ``float32[D]`` (``var`` is a variance, >= 0).
      key: typed PRNG key.
      population_size: ``P`` (static).
      antithetic: mirrored pairs (ES.py ``sepCEM.ask``).
    """
    num = population_size // 2 if antithetic else population_size
    eps = jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), mean.shape,
                                               mean.dtype))(jnp.arange(num))
    if antithetic:
        eps = jnp.concatenate([eps, -eps])
    return mean + jnp.sqrt(var) * eps


def sep_cem_update(mean: jax.Array, members: jax.Array, fitness: jax.Array, damp: jax.Array,
                   weights: jax.Array, damp_limit: float,
                   damp_tau: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One separable-CEM step (ES.py ``sepCEM.tell``), maximising ``fitness``.

    Args:
      mean: ``float32[D]``, the distribution's mean before the update (``mu``).
      members: ``float32[P, D]``, the evaluated members (RL-improved ones included).
      fitness: ``float32[P]``, larger is better; ties keep the lower index first and
        NaN ranks last.
      damp: ``float32[]``, the previous noise ``eps_{t-1}``.
      weights: ``float32[K_e]`` from :func:`elite_weights`.
      damp_limit, damp_tau: ``eps_t = damp_tau * eps_{t-1} + (1 - damp_tau) * damp_limit``.

    Returns:
      ``(mean', var', eps_t)``: ``mean' = sum_i w_i x_(i)``, ``var' = (1/K_e) sum_i
      w_i (x_(i) - mean)^2 + eps_t`` over the ``K_e`` best members ``x_(i)``.
    """
    num_elites = weights.shape[0]
    elites = members[rank(fitness)[:num_elites]]
    damp = damp_tau * damp + (1.0 - damp_tau) * damp_limit
    z = elites - mean
    new_mean = weights @ elites
    new_var = (weights @ (z * z)) / num_elites + damp
    return new_mean, new_var, damp
