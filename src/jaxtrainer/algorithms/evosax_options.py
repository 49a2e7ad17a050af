"""What :class:`~jaxtrainer.algorithms.es.EvosaxES` takes by name and how it
reports: evosax 0.3's algorithms (:func:`resolve_algorithm`), fitness shaping
functions, optimizers, the algorithms whose search std is a constant, the
invalid-fitness rule (:func:`worst_for_invalid`) and the metrics
(:func:`reported`).

Source: evosax (Lange 2022, https://github.com/RobertTLange/evosax, v0.3).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from evosax.algorithms import algorithms as EVOSAX_ALGORITHMS
from evosax.core import fitness_shaping as evosax_shaping

from jaxtrainer import _arguments as arguments
from jaxtrainer.metrics import Last, Max, Min

FITNESS_SHAPING: dict[str, Callable[..., jax.Array]] = {
    "identity": evosax_shaping.identity_fitness_shaping_fn,
    "standardize": evosax_shaping.standardize_fitness_shaping_fn,
    "normalize": evosax_shaping.normalize_fitness_shaping_fn,
    "centered_rank": evosax_shaping.centered_rank_fitness_shaping_fn,
    "weights": evosax_shaping.weights_fitness_shaping_fn,
}
"""evosax 0.3's fitness shaping functions by name (``fitness_shaping=``).
``"weights"`` needs an algorithm whose params carry ``weights`` (CMA-ES family)."""

BEST_METRICS = ("best_fitness", "best_fitness_in_generation")
"""evosax metrics reported as the best over a log interval (:class:`~jaxtrainer.Max`
when fitness is maximised, else :class:`~jaxtrainer.Min`), not as a mean."""

CURRENT_METRICS = ("generation_counter", "best_solution_norm", "mean_norm")
"""evosax metrics reported as of the interval's last generation (:class:`~jaxtrainer.Last`)."""

_OPTIMIZERS: dict[str, Callable[[float], optax.GradientTransformation]] = {
    "sgd": optax.sgd, "adam": optax.adam, "adamw": optax.adamw,
}

SCHEDULED_STD = frozenset({
    "ARS", "ASEBO", "ESMC", "GuidedES", "HillClimbing", "iAMaLGaM_Full",
    "iAMaLGaM_Univariate", "NoiseReuseES", "Open_ES", "PersistentES", "SimpleGA",
    "SimulatedAnnealing",
})
"""evosax 0.3 algorithms whose search std is ``state.std``, set to
``std_schedule(generation)`` by every ``tell`` (their ``_init``/``_tell`` in
``evosax/algorithms``) and not adapted otherwise: for these a constant ``std=``
is a traced hyperparameter (``ESState.hyperparams["std"]``)."""


def _injected_optimizer(name: str, learning_rate: float) -> optax.GradientTransformation:
    """``_OPTIMIZERS[name](learning_rate)`` built by ``optax.inject_hyperparams``
    with the learning rate alone injected (a number in the optimizer state, the
    optimizer's other numbers constants): the same updates, bit for bit."""
    make = _OPTIMIZERS[name]

    def build(learning_rate):
        return make(learning_rate)
    return optax.inject_hyperparams(build)(learning_rate=learning_rate)


def resolve_algorithm(name: str) -> str:
    """evosax's canonical name for ``name``, matched exactly or ignoring case and
    underscores (``"OpenES"``, ``"open_es"`` -> ``"Open_ES"``; ``"cma_es"`` -> ``"CMA_ES"``).

    Raises:
      ValueError: no (or an ambiguous) match; the message lists evosax's algorithms.
    """
    if name in EVOSAX_ALGORITHMS:
        return name

    def norm(s: str) -> str:
        return s.replace("_", "").replace("-", "").lower()

    matches = [k for k in EVOSAX_ALGORITHMS if norm(k) == norm(str(name))]
    if len(matches) != 1:
        raise ValueError(f"unknown evosax algorithm {name!r}; evosax 0.3 provides: "
                         f"{', '.join(EVOSAX_ALGORITHMS)}")
    return matches[0]


def evosax_arguments(cls: type, algorithm: str, algorithm_kwargs: dict[str, Any] | None,
                     learning_rate: float | None, optimizer: str | optax.GradientTransformation,
                     std: float | None,
                     ) -> tuple[dict[str, Any], dict[str, float], float | None, Any]:
    """The keyword arguments of the evosax constructor ``cls`` (the algorithm
    ``algorithm``) for :class:`~jaxtrainer.algorithms.es.EvosaxES`'s options:
    ``(kwargs, tunable, std_param, optimizer)`` with ``tunable`` the traced
    hyperparameters' initial values (``learning_rate`` of a named optimizer,
    built by :func:`_injected_optimizer`; a constant ``std`` of an algorithm of
    :data:`SCHEDULED_STD`), ``std_param`` the ``std`` for the params'
    ``std_init`` where the constructor has no ``std_schedule`` (else ``None``),
    and ``optimizer`` the optimizer given to evosax (or as given).

    Raises:
      ValueError: an argument the algorithm does not take, an optimizer (or
        learning rate) for an algorithm without one, or an unknown optimizer name.
    """
    accepted = set(inspect.signature(cls.__init__).parameters)
    kwargs = dict(algorithm_kwargs or {})
    tunable: dict[str, float] = {}  # ESState.hyperparams' names and initial values
    unknown = set(kwargs) - accepted
    if unknown:
        raise ValueError(f"{algorithm} does not take {sorted(unknown)}; its "
                         f"arguments: {sorted(accepted - {'self'})}")
    if learning_rate is not None or not isinstance(optimizer, str):
        if "optimizer" not in accepted:
            raise ValueError(f"{algorithm} has no optimizer: drop learning_rate/optimizer")
        if isinstance(optimizer, str):
            if optimizer not in _OPTIMIZERS:
                raise ValueError(f"optimizer={optimizer!r}: choose one of {sorted(_OPTIMIZERS)} "
                                 "or pass an optax transformation")
            arguments.number("learning_rate", learning_rate, 0.0, low_open=True)
            optimizer = _injected_optimizer(optimizer, float(learning_rate))
            tunable["learning_rate"] = float(learning_rate)
        kwargs["optimizer"] = optimizer
    std_param = None
    if std is not None:
        arguments.number("std", std, 0.0, low_open=True)
        if "std_schedule" in accepted:
            kwargs["std_schedule"] = optax.constant_schedule(float(std))
            if algorithm in SCHEDULED_STD:
                tunable["std"] = float(std)
        else:
            std_param = float(std)  # checked against params in configure_population
    return kwargs, tunable, std_param, optimizer


def shaping_fn(cls: type, fitness_shaping: str | Callable[..., jax.Array] | None,
               weight_decay: float) -> Callable[..., jax.Array] | None:
    """The ``fitness_shaping_fn`` for the evosax constructor ``cls``: the named
    (:data:`FITNESS_SHAPING`) or given function, with an L2 penalty
    ``weight_decay`` added (evosax ``add_weight_decay``; to ``cls``'s default
    shaping when none is given); ``None``: ``cls``'s default."""
    fn = fitness_shaping
    if isinstance(fn, str):
        fn = FITNESS_SHAPING[fn]
    if weight_decay:
        if fn is None:
            fn = inspect.signature(cls.__init__).parameters["fitness_shaping_fn"].default
        fn = evosax_shaping.add_weight_decay(fn, weight_decay)
    return fn


def worst_for_invalid(minimised: jax.Array) -> jax.Array:
    """``minimised`` (``float32[P]``, smaller is better) with every NaN or
    infinite entry (a diverged member) replaced by the generation's worst valid
    value (0 when none is valid): it ranks last, and no best or shaped fitness
    becomes NaN, so the search goes on."""
    valid = jnp.isfinite(minimised)
    worst = jnp.max(jnp.where(valid, minimised, -jnp.inf))
    return jnp.where(valid, minimised, jnp.where(jnp.any(valid), worst, 0.0))


def reported(metrics: Mapping[str, Any], maximize: bool) -> dict[str, Any]:
    """evosax's scalar ``metrics`` as ``es/<name>`` in the user's sign (fitness
    negated back when ``maximize``), ``float32``: the bests (:data:`BEST_METRICS`)
    as :class:`~jaxtrainer.Max` (maximising) or :class:`~jaxtrainer.Min`, the
    current values (:data:`CURRENT_METRICS`) as :class:`~jaxtrainer.Last`, others
    plain (averaged over a log interval); non-scalars dropped."""
    out = {}
    for name, value in metrics.items():
        value = jnp.asarray(value)
        if value.ndim:
            continue
        if maximize and "fitness" in name:
            value = -value
        value = value.astype(jnp.float32)
        if name in BEST_METRICS:
            value = (Max if maximize else Min).of(value)
        elif name in CURRENT_METRICS:
            value = Last.of(value)
        out[f"es/{name}"] = value
    return out
