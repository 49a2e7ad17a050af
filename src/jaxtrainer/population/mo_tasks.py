"""Multi-objective benchmark tasks for :class:`~jaxtrainer.population.NSGA2`, by name.

A task maps one genotype to ``float32[M]`` objective values, every objective
maximised (the project's convention; a published problem that minimises ``f``
is given as ``-f``), and says where genotypes live and which reference point
the hypervolume is measured from.

* ``"zdt1"``, ``"zdt2"``, ``"zdt3"``: Zitzler, Deb and Thiele 2000
  ("Comparison of multiobjective evolutionary algorithms: empirical results",
  Evolutionary Computation 8(2)), ``num_dims`` (30) variables in ``[0, 1]``,
  two objectives ``(-f1, -f2)`` with ``f1 = x_1``, ``g = 1 + 9 sum(x_2..x_n) /
  (n - 1)`` and ``f2 = g h(f1, g)``: ``h = 1 - sqrt(f1/g)`` (ZDT1, convex
  front), ``1 - (f1/g)^2`` (ZDT2, concave), ``1 - sqrt(f1/g) - (f1/g)
  sin(10 pi f1)`` (ZDT3, five disconnected pieces). The Pareto-optimal set is
  ``x_2..x_n = 0`` (``g = 1``). Reference point ``(-1, -1)``, i.e. ``f <= (1,
  1)``: the true fronts' hypervolumes are 2/3 (ZDT1), 1/3 (ZDT2) and about
  1.0444 (ZDT3, whose front reaches ``f2 = -0.773``; :func:`true_front`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import _arguments as arguments


class MOTask(NamedTuple):
    """A multi-objective task.

    Attributes:
      name: how it is reached (:func:`make_mo_task`).
      fn: ``(genotype: float32[num_dims], key) -> float32[num_objectives]``,
        every objective maximised.
      num_dims: genotype size.
      genotype_bounds: ``(low, high)`` of every gene: where generation 0 is
        drawn (uniformly) and where offspring stay.
      num_objectives: ``M`` (>= 2).
      reference_point: ``M`` floats, the hypervolume's reference (a point every
        useful solution beats in every objective).
    """

    name: str
    fn: Callable[[jax.Array, jax.Array], jax.Array]
    num_dims: int
    genotype_bounds: tuple[float, float]
    num_objectives: int
    reference_point: tuple[float, ...]


def _zdt_g(x: jax.Array) -> jax.Array:
    return 1.0 + 9.0 * jnp.sum(x[1:]) / (x.shape[0] - 1)


def zdt1(x: jax.Array) -> jax.Array:
    """ZDT1 as maximised objectives: ``float32[n]`` in ``[0, 1]`` -> ``(-f1, -f2)``."""
    f1, g = x[0], _zdt_g(x)
    return -jnp.stack([f1, g * (1.0 - jnp.sqrt(f1 / g))])


def zdt2(x: jax.Array) -> jax.Array:
    """ZDT2 as maximised objectives: ``float32[n]`` in ``[0, 1]`` -> ``(-f1, -f2)``."""
    f1, g = x[0], _zdt_g(x)
    return -jnp.stack([f1, g * (1.0 - jnp.square(f1 / g))])


def zdt3(x: jax.Array) -> jax.Array:
    """ZDT3 as maximised objectives: ``float32[n]`` in ``[0, 1]`` -> ``(-f1, -f2)``."""
    f1, g = x[0], _zdt_g(x)
    return -jnp.stack([f1, g * (1.0 - jnp.sqrt(f1 / g) - f1 / g * jnp.sin(10.0 * jnp.pi * f1))])


_ZDT = {"zdt1": zdt1, "zdt2": zdt2, "zdt3": zdt3}


def _zdt_task(name: str) -> Callable[..., MOTask]:
    fn = _ZDT[name]

    def build(num_dims: int = 30) -> MOTask:
        num_dims = arguments.positive_int("num_dims", num_dims, False)
        if num_dims < 2:
            raise ValueError(f"num_dims={num_dims}: {name} needs at least 2 variables")
        return MOTask(
            name, lambda genotype, key: fn(genotype), num_dims, (0.0, 1.0), 2, (-1.0, -1.0)
        )

    return build


MO_TASKS: dict[str, Callable[..., MOTask]] = {name: _zdt_task(name) for name in _ZDT}
"""``name -> builder(**kwargs) -> MOTask``."""


def make_mo_task(name: str, **kwargs: Any) -> MOTask:
    """The task ``name`` built with ``kwargs`` (``make_mo_task("zdt1", num_dims=30)``).

    Raises:
      ValueError: an unknown name (listing the known ones) or a bad value.
      TypeError: a keyword the task does not take.
    """
    if name not in MO_TASKS:
        raise ValueError(
            f"unknown multi-objective task {name!r}"
            f"{arguments.did_you_mean(name, list(MO_TASKS))}; expected one of "
            f"{', '.join(sorted(MO_TASKS))}"
        )
    return MO_TASKS[name](**kwargs)


def true_front(name: str, num_points: int = 10_001) -> np.ndarray:
    """``float64[K, 2]``: the Pareto front of ZDT ``name`` as minimised ``(f1,
    f2)`` (``g = 1``), sampled at ``num_points`` values of ``f1`` in ``[0, 1]``
    and reduced to its non-dominated points (ZDT3's front is five pieces)."""
    if name not in _ZDT:
        raise ValueError(
            f"true_front: unknown ZDT task {name!r}; expected one of {', '.join(sorted(_ZDT))}"
        )
    f1 = np.linspace(0.0, 1.0, num_points)
    f2 = {
        "zdt1": 1 - np.sqrt(f1),
        "zdt2": 1 - f1**2,
        "zdt3": 1 - np.sqrt(f1) - f1 * np.sin(10 * np.pi * f1),
    }[name]
    keep = f2 < np.minimum.accumulate(np.concatenate([[np.inf], f2[:-1]]))
    return np.stack([f1[keep], f2[keep]], axis=-1)


__all__ = ["MOTask", "MO_TASKS", "make_mo_task", "true_front", "zdt1", "zdt2", "zdt3"]
