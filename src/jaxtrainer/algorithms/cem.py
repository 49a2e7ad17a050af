"""The separable cross-entropy method (CEM) over flat parameters, as CEM-RL's
reference runs it (Pourchot and Sigaud 2019, arXiv:1810.01222; reference code
``apourchot/CEM-RL``, ``ES.py`` ``sepCEM``): sample a population from a
diagonal Gaussian ``N(mu, diag(var))`` (:func:`sample_population`) and refit it
to the fitness-weighted elites (:func:`sep_cem_update`). The recombination
weights are :func:`~jaxtrainer.algorithms.evolution.elite_weights`.

One update (``sepCEM.tell``) from the fitness of all ``P`` members: the
``K_e = num_elites`` best with weights
``lambda_i = log((K_e + 1) / i) / sum_j log((K_e + 1) / j)`` (rank ``i = 1``
best) give::

    eps_t  = damp_tau * eps_{t-1} + (1 - damp_tau) * damp_limit
    mu'    = sum_i lambda_i theta_(i)
    var'   = (1 / K_e) sum_i lambda_i (theta_(i) - mu)^2 + eps_t

(the paper writes ``Sigma' = sum_i lambda_i (z_i - mu)(z_i - mu)^T + eps I``;
the reference code, which produced its figures, has the extra ``1 / K_e``,
kept here). Constants as the reference: ``var_0 = 1e-3`` (its
``sigma_init`` is a variance), ``eps_0 = 1e-3``, ``damp_limit = 1e-5``,
``damp_tau = 0.95``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed._members import rank


def check_cem(config: Any) -> None:
    """The checks of the CEM's fields of a config (CEM-RL's): the population's
    size and how it pairs and splits (``antithetic``, ``num_rl_members``,
    ``num_elites``), and the variance and noise constants.

    Raises:
      ValueError: a bad value, naming the field.
    """
    p = config.population_size
    if p < 2:
        raise ValueError(f"CEMRL: population_size={p!r}: expected an int >= 2 "
                         "(at least one elite and one RL member)")
    if config.antithetic and p % 2 and config.evolution == "sep_cem":
        raise ValueError(f"CEMRL: population_size={p} is odd; antithetic sampling pairs "
                         "members (use an even size or antithetic=False)")
    arguments.check_fields(config, arguments.non_negative_int, ("num_rl_members", "critic_steps",
                                                                "actor_steps"), allow_none=True)
    arguments.check_fields(config, arguments.positive_int, ("num_elites", "rollout_steps"))
    for name in ("num_rl_members", "num_elites"):
        if (getattr(config, name) or 0) > p:
            raise ValueError(f"CEMRL: {name}={getattr(config, name)}: expected at most "
                             f"population_size={p}")
    arguments.check_fields(config, arguments.number, ("damp_tau",), low=0, high=1)
    arguments.check_fields(config, arguments.number, ("init_variance", "damp_init", "damp_limit"),
                           low=0)


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
