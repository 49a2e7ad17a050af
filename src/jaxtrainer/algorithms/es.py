"""Evolution strategies: any evosax 0.3 algorithm as a :class:`~jaxtrainer.PopulationModule`.

* :class:`EvosaxES`: the adapter (``init_state / ask / tell`` from evosax, by name),
  with fitness shaping and the maximise/minimise convention; subclass it and
  implement ``evaluate``.
* :class:`FunctionES`: minimise ``fn(x: float32[num_dims]) -> float32[]``
  (:func:`sphere`, :func:`rastrigin`, your own).
* :class:`~jaxtrainer.algorithms.neuro_es.NeuroES` (:mod:`~jaxtrainer.algorithms.neuro_es`):
  neuroevolution of a flax policy on an environment, on this adapter.

What the adapter takes by name (algorithms, fitness shaping, optimizers) is in
:mod:`~jaxtrainer.algorithms.evosax_options`. Sources: evosax (Lange 2022, https://github.com/RobertTLange/evosax, v0.3);
OpenAI-ES (Salimans et al. 2017, https://arxiv.org/abs/1703.03864); CMA-ES
(Hansen 2016, "The CMA Evolution Strategy: A Tutorial",
https://arxiv.org/abs/1604.00772).

Example::

    es = NeuroES("CartPole-v1", algorithm="Open_ES", learning_rate=0.05, std=0.1)
    PopulationTrainer(population_size=64, max_generations=50).fit(es)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from evosax.algorithms import algorithms as EVOSAX_ALGORITHMS
from evosax.algorithms.distribution_based.base import DistributionBasedAlgorithm
from flax import struct
from jax import flatten_util

from jaxtrainer import aliases
from jaxtrainer.algorithms.evosax_options import (
    FITNESS_SHAPING,
    evosax_arguments,
    reported,
    resolve_algorithm,
    shaping_fn,
    worst_for_invalid,
)
from jaxtrainer.algorithms.hyperparams import set_learning_rate
from jaxtrainer.module import PopulationModule

"""How :class:`NeuroES` runs a member's episodes (its ``episode_loop``)."""


def sphere(x: jax.Array) -> jax.Array:
    """``sum(x**2)``: ``float32[d] -> float32[]``, minimum 0 at ``x = 0``."""
    return jnp.sum(jnp.square(x))


def rastrigin(x: jax.Array) -> jax.Array:
    """Rastrigin: ``10 d + sum(x**2 - 10 cos(2 pi x))``, ``float32[d] -> float32[]``.

    Global minimum 0 at ``x = 0``; local minima near every integer point
    (Rastrigin 1974; the usual domain is ``[-5.12, 5.12]^d``).
    """
    return 10.0 * x.shape[-1] + jnp.sum(jnp.square(x) - 10.0 * jnp.cos(2.0 * jnp.pi * x))


@struct.dataclass
class ESState:
    """State of an :class:`EvosaxES`.

    Attributes:
      es: the evosax algorithm's state (``mean: float32[num_dims]``, ``std``, ...).
      tell_key: typed key ``ask`` set aside for evosax's ``tell``.
      params: the algorithm's evosax params (hyperparameters such as CMA-ES's
        recombination weights), carried in the state rather than baked into the
        compiled program as constants, so that the program (and its rounding) does
        not depend on how XLA folds them.
      hyperparams: ``{name: float32[]}``, the values :class:`EvosaxES` was given
        that every generation reads from here (traced, so population-based
        training, :class:`~jaxtrainer.population.PBT`, changes them without
        recompiling): ``learning_rate`` (the optimizer's step size, when
        ``learning_rate=`` names an optimizer) and ``std`` (the search standard
        deviation, when ``std=`` is given to an algorithm of
        :data:`~jaxtrainer.algorithms.evosax_options.SCHEDULED_STD`); ``None`` (no leaves) when there is neither.
      obs_stats: :class:`NeuroES` with ``normalize_observations``: the
        :class:`~jaxtrainer.algorithms.normalization.RunningStatistics` of every
        observation the members acted on; ``None`` (no leaves) otherwise.
    """

    es: Any
    tell_key: jax.Array
    params: Any = None
    hyperparams: dict[str, jax.Array] | None = None
    obs_stats: Any = None


class EvosaxES(PopulationModule):
    """Any evosax 0.3 algorithm as a :class:`~jaxtrainer.PopulationModule`.

    The evosax algorithm is built when the trainer announces the population size
    (:meth:`configure_population`, called by
    :class:`~jaxtrainer.PopulationTrainer`), or here when ``population_size`` is
    given. Members are evosax's unravelled solutions: pytrees shaped like
    ``solution`` with a leading ``[P]`` axis. Subclasses implement
    ``evaluate(member, key) -> (fitness: float32[], metrics)`` and may override
    :meth:`initial_mean`.

    Args:
      algorithm: an evosax name (``"Open_ES"``, ``"CMA_ES"``, ``"SNES"``,
        ``"SimpleGA"``, ...; case and underscores are ignored).
      solution: a pytree template of one member (shapes and dtypes only).
      maximize: ``True`` when larger fitness is better (returns); evosax
        minimises, so fitness is negated before ``tell``. Logged ``es/best_fitness``
        is in the user's sign.
      fitness_shaping: ``None`` (the algorithm's evosax default: centered ranks
        for OpenAI-ES, recombination weights for CMA-ES), a name in
        :data:`~jaxtrainer.algorithms.evosax_options.FITNESS_SHAPING` or an evosax-style callable
        ``fn(population, fitness, state, params) -> fitness``.
      weight_decay: L2 penalty added to the (minimised) fitness before shaping
        (evosax ``add_weight_decay``); 0 disables.
      learning_rate: for algorithms with an ``optimizer`` (OpenAI-ES, SNES, PGPE,
        ...): the optimizer's step size; with a named ``optimizer`` it is a
        traced hyperparameter (``ESState.hyperparams["learning_rate"]``, set in
        the optimizer state through ``optax.inject_hyperparams``).
      optimizer: ``"adam"`` (default), ``"sgd"``, ``"adamw"`` or an optax
        transformation (then ``learning_rate`` is ignored).
      std: initial / constant search standard deviation: evosax's
        ``std_schedule`` (a constant, then a traced hyperparameter
        ``ESState.hyperparams["std"]`` for the algorithms of
        :data:`~jaxtrainer.algorithms.evosax_options.SCHEDULED_STD`) or its params' ``std_init``.
      learning_rate_decay, std_decay: the factor the learning rate (std) is
        multiplied by over ``decay_generations`` generations, exponentially:
        ``value * decay ** (generation / decay_generations)``, as
        ``optax.exponential_decay`` (evosax's reinforcement learning example: 0.1
        and 0.2); the std follows evosax's ``std_schedule`` timing (generation
        ``g >= 1`` samples with the value of ``g - 1``). 1 (default): constant.
        Needs the traced hyperparameter (a named ``optimizer`` with a
        ``learning_rate``; a constant ``std`` of a
        :data:`~jaxtrainer.algorithms.evosax_options.SCHEDULED_STD` algorithm).
      decay_generations: the generations the decays span; ``None``: the run's
        budget (the PopulationTrainer's ``max_generations``).
      algorithm_kwargs: more keyword arguments for the evosax constructor.
      es_params: fields of the algorithm's ``default_params`` to replace.
      population_size: build the evosax algorithm now (otherwise the trainer's).

    Raises:
      ValueError: unknown algorithm (listing evosax's), unknown fitness shaping
        or optimizer, an option the algorithm does not have, or a population size
        the algorithm rejects (e.g. odd sizes for antithetic OpenAI-ES); a
        decay that is not positive, or one without its traced hyperparameter.
    """

    def __init__(
        self,
        algorithm: str,
        solution: Any,
        *,
        maximize: bool = False,
        fitness_shaping: str | Callable[..., jax.Array] | None = None,
        weight_decay: float = 0.0,
        learning_rate: float | None = None,
        optimizer: str | optax.GradientTransformation = "adam",
        std: float | None = None,
        learning_rate_decay: float = 1.0,
        std_decay: float = 1.0,
        decay_generations: int | None = None,
        algorithm_kwargs: dict[str, Any] | None = None,
        es_params: dict[str, Any] | None = None,
        population_size: int | None = None,
    ) -> None:
        self.algorithm = resolve_algorithm(algorithm)
        self.cls = EVOSAX_ALGORITHMS[self.algorithm]
        self.solution = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x)),
                                     solution)
        self.num_dims = sum(math.prod(x.shape) for x in jax.tree.leaves(self.solution))
        self.maximize = bool(maximize)
        if isinstance(fitness_shaping, str) and fitness_shaping not in FITNESS_SHAPING:
            raise ValueError(f"fitness_shaping={fitness_shaping!r}: choose one of "
                             f"{', '.join(FITNESS_SHAPING)}, None (the algorithm's default) "
                             "or a callable")
        self.fitness_shaping = fitness_shaping
        if weight_decay < 0:
            raise ValueError(f"weight_decay={weight_decay}: expected >= 0")
        self.weight_decay = float(weight_decay)
        kwargs, self._tunable, self._std_param, optimizer = evosax_arguments(
            self.cls, self.algorithm, algorithm_kwargs, learning_rate, optimizer, std)
        self.kwargs = kwargs
        self.es_params_overrides = dict(es_params or {})
        self.learning_rate, self.optimizer_name, self.std = learning_rate, optimizer, std
        self.decays = {name: float(value) for name, value in
                       (("learning_rate", learning_rate_decay), ("std", std_decay)) if value != 1}
        for name, value in self.decays.items():
            if not value > 0:
                raise ValueError(f"{name}_decay={value}: expected a positive factor (1: constant)")
            if name not in self._tunable:
                need = ("a learning_rate with a named optimizer" if name == "learning_rate" else
                        "a constant std= of an algorithm with a std schedule (Open_ES, ARS, ...)")
                raise ValueError(f"{name}_decay={value} with {self.algorithm}: needs {need}")
        if decay_generations is not None and (not isinstance(decay_generations, int)
                                              or decay_generations < 1):
            raise ValueError(f"decay_generations={decay_generations!r}: expected a positive int "
                             "or None (the run's budget)")
        self.decay_generations = decay_generations
        self.es = None
        self.params = None
        self.population_size: int | None = None
        if population_size is not None:
            self.configure_population(population_size)

    # ---- construction ----------------------------------------------------
    def _shaping_fn(self) -> Callable[..., jax.Array] | None:
        return shaping_fn(self.cls, self.fitness_shaping, self.weight_decay)

    def configure_population(self, population_size: int) -> None:
        """Build the evosax algorithm for ``population_size`` members.

        Raises:
          ValueError: the algorithm rejects the size, or ``std``/``es_params``
            name fields its params do not have.
        """
        if self.population_size == population_size and self.es is not None:
            return
        kwargs = dict(self.kwargs)
        shaping = self._shaping_fn()
        if shaping is not None:
            kwargs["fitness_shaping_fn"] = shaping
        try:
            es = self.cls(population_size=population_size, solution=self.zero_solution(), **kwargs)
        except AssertionError as exc:
            raise ValueError(f"{self.algorithm} rejects population_size={population_size}: "
                             f"{exc or 'evosax assertion failed'}") from None
        params = es.default_params
        overrides = dict(self.es_params_overrides)
        if self._std_param is not None:
            overrides.setdefault("std_init", self._std_param)
        fields = set(getattr(params, "__dataclass_fields__", {}))
        unknown = set(overrides) - fields
        if unknown:
            raise ValueError(f"{self.algorithm} params have no field(s) {sorted(unknown)} "
                             f"(std= maps to 'std_init'); fields: {sorted(fields)}")
        if overrides:
            params = params.replace(**{k: jnp.asarray(v, jnp.float32) if isinstance(v, float) else v
                                       for k, v in overrides.items()})
        if self.fitness_shaping == "weights" and not hasattr(params, "weights"):
            raise ValueError(f"fitness_shaping='weights' needs params.weights, which "
                             f"{self.algorithm} does not have")
        self.es, self.params, self.population_size = es, params, population_size

    def zero_solution(self) -> Any:
        """A member of zeros: a pytree shaped like ``solution``."""
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), self.solution)

    def _require(self) -> None:
        if self.es is None:
            raise ValueError(f"{type(self).__name__}: the population size is not known yet; "
                             "run it with PopulationTrainer or pass population_size=")

    @property
    def distribution_based(self) -> bool:
        return isinstance(self.es, DistributionBasedAlgorithm) or (
            self.es is None and issubclass(self.cls, DistributionBasedAlgorithm))

    def configure_budget(self, max_steps: int) -> None:
        """The run's generations (the PopulationTrainer's budget): what the decays
        span when ``decay_generations`` is ``None``."""
        self._budget = int(max_steps)

    _budget: int | None = None

    def _decayed(self, name: str, value: jax.Array, generation: jax.Array) -> jax.Array:
        """``value`` decayed to ``generation`` (``learning_rate_decay``/``std_decay``)."""
        if name not in self.decays:
            return value
        span = self.decay_generations or self._budget
        if span is None:
            raise ValueError(f"{type(self).__name__}: {name}_decay needs decay_generations= or "
                             "the run's budget (train it with a PopulationTrainer)")
        step = jnp.asarray(generation, jnp.float32) / span
        return value * jnp.power(jnp.float32(self.decays[name]), step)

    # ---- the PopulationModule contract -----------------------------------
    def initial_mean(self, key: jax.Array) -> Any:
        """The search distribution's initial mean (a ``solution``-shaped pytree).
        Default: zeros. ``key``: typed key."""
        return self.zero_solution()

    def init_state(self, key: jax.Array) -> ESState:
        """``key``: typed key (the same on every device). Returns :class:`ESState`."""
        self._require()
        mean_key, es_key, tell_key = jax.random.split(key, 3)
        mean = self.initial_mean(mean_key)
        if self.distribution_based:
            state = self.es.init(es_key, mean, self.params)
        else:  # population-based: start from noise around the mean, fitness unknown
            flat, unravel = flatten_util.ravel_pytree(mean)
            std = getattr(self.params, "std_init", 1.0)
            noise = jax.random.normal(es_key, (self.population_size, flat.size), flat.dtype)
            population = jax.vmap(unravel)(flat + std * noise)
            fitness = jnp.full((self.population_size,), jnp.inf, jnp.float32)
            state = self.es.init(es_key, population, fitness, self.params)
        hyperparams = {name: jnp.asarray(value, jnp.float32)
                       for name, value in self._tunable.items()} or None
        return ESState(state, tell_key, self.params, hyperparams)

    def with_hyperparams(self, state: ESState) -> ESState:
        """``state`` with its evosax state set from ``state.hyperparams``: the
        search std (``es.std``) and the optimizer's learning rate (``es.opt_state``,
        an ``optax.inject_hyperparams`` state). Called by :meth:`ask` and
        :meth:`tell`, so every generation reads the traced values."""
        hp = state.hyperparams
        if not hp:
            return state
        es = state.es
        if "std" in hp:  # evosax's tell sets std_schedule(g) for generation g + 1
            es = es.replace(std=self._decayed(
                "std", hp["std"], jnp.maximum(es.generation_counter - 1, 0)))
        if "learning_rate" in hp:  # broadcast: some algorithms vmap their optimizer
            current = es.opt_state.hyperparams["learning_rate"]
            lr = self._decayed("learning_rate", hp["learning_rate"], es.generation_counter)
            lr = jnp.broadcast_to(lr, jnp.shape(current)).astype(current.dtype)
            es = es.replace(opt_state=set_learning_rate(es.opt_state, lr))
        return state.replace(es=es)

    def ask(self, state: ESState, key: jax.Array) -> tuple[Any, ESState]:
        """Sample ``P`` members: leaves ``[P, *solution_leaf_shape]``."""
        state = self.with_hyperparams(state)
        ask_key, tell_key = jax.random.split(key)
        population, es_state = self.es.ask(ask_key, state.es, state.params)
        return population, state.replace(es=es_state, tell_key=tell_key)

    def tell(self, state: ESState, population: Any, fitness: jax.Array) -> tuple[ESState, dict[str, Any]]:
        """Update with ``fitness: float32[P]`` (the user's sign; negated when
        ``maximize``). A member whose fitness is NaN or infinite (a diverged
        policy) is given the generation's worst valid fitness: it ranks last and
        weighs in the update as the worst valid member does, and no statistic,
        best or shaped fitness becomes NaN (the PopulationTrainer counts it in
        ``fitness/invalid``). Metrics: evosax's scalar metrics as ``es/<name>``, in the
        user's sign; the bests (:data:`~jaxtrainer.algorithms.evosax_options.BEST_METRICS`) reduced over a log interval
        by the best (max when maximising, else min), the current values
        (:data:`~jaxtrainer.algorithms.evosax_options.CURRENT_METRICS`) by the last generation's, others averaged."""
        fitness = jnp.asarray(fitness, jnp.float32)
        state = self.with_hyperparams(state)
        minimised = -fitness if self.maximize else fitness
        es_state, metrics = self.es.tell(state.tell_key, population, worst_for_invalid(minimised),
                                         state.es, state.params)
        return self.with_hyperparams(state.replace(es=es_state)), reported(metrics, self.maximize)

    def mean(self, state: ESState) -> Any:
        """The current solution: the search distribution's mean (distribution-based
        algorithms) or the best member so far (population-based ones)."""
        if self.distribution_based:
            return self.es.get_mean(state.es)
        # evosax keeps the best solution flat, in ravel_pytree's order of ``solution``
        return flatten_util.ravel_pytree(self.zero_solution())[1](state.es.best_solution)

    def hparams(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "num_dims": self.num_dims,
                "maximize": self.maximize, "weight_decay": self.weight_decay,
                "fitness_shaping": self.fitness_shaping if isinstance(self.fitness_shaping, str)
                else ("default" if self.fitness_shaping is None else "callable"),
                "learning_rate": self.learning_rate, "std": self.std,
                **{f"{name}_decay": value for name, value in self.decays.items()}}


class FunctionES(EvosaxES):
    """Minimise ``fn(x: float32[num_dims]) -> float32[]`` with an evosax algorithm.

    Args:
      fn: the objective, e.g. :func:`sphere`, :func:`rastrigin`; with
        ``fn_takes_key=True`` it is called ``fn(x, key)`` (noisy objectives).
      num_dims: dimension ``d``.
      algorithm: evosax name (default ``"CMA_ES"``).
      init_mean: initial mean, a float (every coordinate) or ``float32[d]``.
      init_range: add ``Uniform(-init_range, init_range)`` noise to the initial
        mean, drawn from the init key (0: deterministic start).
      **kwargs: :class:`EvosaxES` options (``std``, ``learning_rate``, ...).

    Metrics: ``fitness/*`` (from the trainer); evaluation gives
    ``eval/fitness`` = ``fn(mean)`` and ``eval/distance_to_origin``.
    """

    def __init__(
        self,
        fn: Callable[..., jax.Array],
        num_dims: int,
        algorithm: str = "CMA_ES",
        *,
        init_mean: float | Sequence[float] = 0.0,
        init_range: float = 0.0,
        fn_takes_key: bool = False,
        **kwargs: Any,
    ) -> None:
        if not isinstance(num_dims, int) or num_dims < 1:
            raise ValueError(f"num_dims={num_dims!r}: expected a positive int")
        self.fn = fn
        self.fn_takes_key = fn_takes_key
        self.init_mean_value = np.broadcast_to(np.asarray(init_mean, np.float32), (num_dims,)).copy()
        self.init_range = float(init_range)
        super().__init__(algorithm, jnp.zeros((num_dims,), jnp.float32), **kwargs)

    def initial_mean(self, key: jax.Array) -> jax.Array:
        mean = jnp.asarray(self.init_mean_value)
        if self.init_range:
            mean = mean + jax.random.uniform(key, mean.shape, minval=-self.init_range,
                                             maxval=self.init_range)
        return mean

    def evaluate(self, member: jax.Array, key: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """``member: float32[d]`` -> ``(fn(member): float32[], {})``."""
        value = self.fn(member, key) if self.fn_takes_key else self.fn(member)
        return jnp.asarray(value, jnp.float32), {}

    def evaluation_step(self, state: ESState, key: jax.Array) -> dict[str, Any]:
        mean = self.mean(state)
        value = self.fn(mean, key) if self.fn_takes_key else self.fn(mean)
        return {"eval/fitness": value, "eval/distance_to_origin": jnp.linalg.norm(mean)}


__getattr__, __dir__ = aliases.attach(__name__)  # moved names, with a warning until 0.3.0
