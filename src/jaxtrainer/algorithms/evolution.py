"""An evosax search distribution over a network's parameters, for the
evolutionary RL hybrids whose population is sampled rather than bred (ERL-ES,
ERL-EDA, CEMRL-OpenES in EvoRL, ``EMI-Group/evorl``,
``evorl/algorithms/erl``).

:class:`ParamsSearch` is :class:`~jaxtrainer.algorithms.es.EvosaxES` (ask, tell,
fitness shaping, maximisation, traced hyperparameters) whose mean starts at a
fresh network initialisation; :func:`elite_weights` gives EvoRL's vanilla ES
recombination (and sepCEM's) for evosax's ``SimpleES``; :func:`move_mean_toward` is ERL-EDA's
injection of the RL actor into the search's mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import flatten_util

from jaxtrainer.algorithms.es import ESState, EvosaxES

if TYPE_CHECKING:
    from jaxtrainer.algorithms.normalization import RunningStatistics


@dataclasses.dataclass(frozen=True)
class ReplayAndSearch:
    """The replay and the optional search of an evolutionary RL hybrid's state,
    composed (after its own fields) into CEM-RL's and ERL's states
    (:func:`~jaxtrainer.algorithms._config_parts.composes`).

    Attributes:
      buffer: the replay buffer of raw transitions (sharded: each device stores
        its own members' rollouts; :class:`~jaxtrainer.algorithms.replay.ReplayBuffer`).
      obs_stats: :class:`~jaxtrainer.algorithms.normalization.RunningStatistics`
        of every observation the rollouts collected, with
        ``normalize_observations``; ``None`` (no leaves) without.
      search: with an evosax ``evolution`` (:class:`ParamsSearch`), the search
        distribution's :class:`~jaxtrainer.algorithms.es.ESState`, else ``None``.
    """

    buffer: Any
    obs_stats: RunningStatistics | None = None
    search: ESState | None = None


def elite_weights(num_elites: int, shift: float = 1.0) -> np.ndarray:
    """``float32[num_elites]``: recombination weights by rank, best first:
    ``log(K + shift) - log(i)`` for ranks ``i = 1..K``, normalised to sum 1.
    ``shift = 1`` gives sepCEM's (CEM-RL's reference ``ES.py``), ``shift = 1/2``
    EvoRL's vanilla ES's (``evorl/ec/optimizers/vanilla_es.py``; Hansen's CMA-ES
    weights).

    Raises:
      ValueError: ``num_elites < 1``.
    """
    if num_elites < 1:
        raise ValueError(f"num_elites={num_elites}: expected >= 1")
    w = np.log(num_elites + shift) - np.log(np.arange(1, num_elites + 1, dtype=np.float64))
    return (w / w.sum()).astype(np.float32)


class ParamsSearch(EvosaxES):
    """An evosax distribution-based algorithm over the parameters
    ``init(key)`` returns (a pytree), maximising fitness (returns), its mean
    started at ``init(key)`` of :meth:`init_state`'s key.

    Args:
      algorithm: an evosax distribution-based algorithm (``"SimpleES"``,
        ``"Open_ES"``, ``"SNES"``, ``"CMA_ES"``, ...; case and underscores ignored).
      init: ``key -> params``, the network's initialiser.
      population_size: members per generation.
      std: the search's initial (or, for :data:`~jaxtrainer.algorithms.es.SCHEDULED_STD`
        algorithms, constant) standard deviation.
      learning_rate: the step size of the algorithm's Adam optimizer (OpenAI-ES,
        SNES, ...); ``None``: evosax's default optimizer (``SimpleES``: SGD at 1,
        i.e. the mean becomes the weighted elites).
      num_elites: for ``SimpleES``, the members recombined (:func:`elite_weights`)
        and a fixed std (``c_std = 0``), as EvoRL's vanilla ES; ignored otherwise.

    Raises:
      ValueError: an unknown or population-based (GA-like) algorithm, or a
        population size it rejects (e.g. odd for antithetic OpenAI-ES).
    """

    def __init__(self, algorithm: str, init: Callable[[jax.Array], Any], population_size: int, *,
                 std: float, learning_rate: float | None = None,
                 num_elites: int | None = None) -> None:
        self.init = init
        template = jax.eval_shape(init, jax.random.key(0))
        es_params = {}
        probe = EvosaxES(algorithm, template)
        if not probe.distribution_based:
            raise ValueError(f"algorithm={algorithm!r} ({probe.algorithm}) keeps a population, "
                             "not a search distribution: use evolution='ga' for a genetic "
                             "algorithm, or a distribution-based evosax algorithm (SimpleES, "
                             "Open_ES, SNES, CMA_ES, ...)")
        if probe.algorithm == "SimpleES" and num_elites is not None:
            weights = np.zeros(population_size, np.float32)
            weights[:num_elites] = elite_weights(num_elites, shift=0.5)
            es_params = {"weights": jnp.asarray(weights), "c_std": 0.0}
        super().__init__(algorithm, template, maximize=True, learning_rate=learning_rate,
                         std=std, es_params=es_params, population_size=population_size)

    def initial_mean(self, key: jax.Array) -> Any:
        """A fresh initialisation of the network (``init(key)``)."""
        return self.init(key)


def move_mean_toward(state: ESState, params: Any, stepsize: float | jax.Array) -> ESState:
    """``state`` with the search mean moved ``stepsize`` of the way to ``params``
    (``mean + stepsize (params - mean)``, ``optax.incremental_update``; 1 puts it
    on ``params``): ERL-EDA's injection of the RL actor (EvoRL ``erl_eda.py``,
    ``_rl_injection``)."""
    flat = flatten_util.ravel_pytree(params)[0].astype(state.es.mean.dtype)
    return state.replace(es=state.es.replace(
        mean=optax.incremental_update(flat, state.es.mean, stepsize)))


__all__ = ["ParamsSearch", "elite_weights", "move_mean_toward"]
