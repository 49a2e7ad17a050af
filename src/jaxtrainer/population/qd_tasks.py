"""Descriptor-bearing tasks for quality-diversity search, by name.

A task maps one genotype to ``(fitness: float32[], descriptor: float32[D])``
(larger fitness is better) and says where genotypes start and which box of
descriptor space the repertoire's grid covers.

* ``"arm"``: QDax's planar arm (``qdax/tasks/arm.py``, after
  ``hucebot/fast_map-elites``): ``num_dims`` joint angles in ``[0, 1]``;
  fitness = minus the standard deviation of the angles; descriptor = the
  end-effector's ``(x, y)`` in ``[0, 1]^2``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxtrainer import _arguments as arguments


class QDTask(NamedTuple):
    """A quality-diversity task.

    Attributes:
      name: how it is reached (:func:`make_task`).
      fn: ``(genotype: float32[num_dims], key) -> (fitness: float32[],
        descriptor: float32[descriptor_size])``, fitness maximised.
      num_dims: genotype size.
      genotype_bounds: ``(low, high)`` of every gene: where generation 0 is drawn
        (uniformly) and where offspring are clipped.
      descriptor_bounds: ``(low, high)`` of every descriptor coordinate: the box
        the repertoire's grid covers.
      descriptor_size: ``D``.
    """

    name: str
    fn: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    num_dims: int
    genotype_bounds: tuple[float, float]
    descriptor_bounds: tuple[float, float]
    descriptor_size: int


def arm(genotype: jax.Array) -> tuple[jax.Array, jax.Array]:
    """QDax's planar arm (``qdax.tasks.arm.arm``): ``float32[n]`` normalised joint
    angles -> ``(fitness: float32[], descriptor: float32[2])``.

    Angles are clipped to ``[0, 1]`` and mapped to ``[-pi, pi)``; fitness is
    ``-sqrt(mean((x - mean(x))**2))`` (QDax's code: minus the angles' standard
    deviation, 0 at best); the descriptor is the end-effector position of an arm
    of ``n`` links of length ``1 / (2 n)`` centred at ``(0.5, 0.5)``, so in
    ``[0, 1]^2``.
    """
    x = jnp.clip(genotype, 0.0, 1.0)
    n = genotype.shape[0]
    fitness = jnp.sqrt(jnp.mean(jnp.square(x - jnp.mean(x))))
    angles = jnp.cumsum(2.0 * jnp.pi * x - jnp.pi)
    position = jnp.stack([jnp.sum(jnp.cos(angles)) / (2 * n) + 0.5,
                          jnp.sum(jnp.sin(angles)) / (2 * n) + 0.5])
    return -fitness, position


def _arm_task(num_dims: int = 8) -> QDTask:
    num_dims = arguments.positive_int("num_dims", num_dims, False)
    return QDTask("arm", lambda genotype, key: arm(genotype), num_dims, (0.0, 1.0), (0.0, 1.0), 2)


TASKS: dict[str, Callable[..., QDTask]] = {"arm": _arm_task}
"""``name -> builder(**kwargs) -> QDTask``."""


def make_task(name: str, **kwargs: Any) -> QDTask:
    """The task ``name`` built with ``kwargs`` (``make_task("arm", num_dims=8)``).

    Raises:
      ValueError: an unknown name (listing the known ones) or a bad value.
      TypeError: a keyword the task does not take.
    """
    if name not in TASKS:
        raise ValueError(f"unknown quality-diversity task {name!r}"
                         f"{arguments.did_you_mean(name, list(TASKS))}; expected one of "
                         f"{', '.join(sorted(TASKS))}")
    return TASKS[name](**kwargs)


__all__ = ["QDTask", "TASKS", "arm", "make_task"]
