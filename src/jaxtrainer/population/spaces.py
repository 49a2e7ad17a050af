"""Search spaces of traced hyperparameters and the trials drawn from them.

A space is written as in a config or on the command line::

    search.space.lr=loguniform(1e-5,1e-2)      # log-uniform on [1e-5, 1e-2]
    search.space.ent_coef=uniform(0,0.05)      # uniform on [0, 0.05]
    search.space.gamma=choice([0.95,0.99,0.999])

``uniform`` and ``loguniform`` are :class:`~jaxtrainer.population.pbt.Hyperparam`
(PBT's space, shared), ``choice`` a :class:`Choice` of numbers (traced values:
a choice changes a number in the state, never the program). Trials are drawn on
the host before anything compiles (:func:`sample_trials`): independently at
random, or quasi-randomly from a scrambled Sobol sequence (scipy's
``stats.qmc.Sobol``), whose points cover the unit cube more evenly than random
ones for the same count (Bergstra and Bengio 2012, "Random Search for
Hyper-Parameter Optimization", Sec. 5), each coordinate then mapped onto its
space by the inverse CDF.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from jaxtrainer.population.pbt import Hyperparam

__all__ = ["SAMPLERS", "Choice", "Space", "parse_space", "sample_trials"]

SAMPLERS = ("random", "sobol")
"""How trials are drawn: independent uniform points, or a scrambled Sobol sequence."""

_FORM = re.compile(r"^\s*(uniform|loguniform|choice)\s*\((.*)\)\s*$", re.S)
_EXAMPLES = "uniform(low,high), loguniform(low,high) or choice([v1,v2,...])"


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of a few numbers, each as likely.

    Raises:
      ValueError: no values, a value that is not a number, or a repeated value.
    """

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        try:
            values = tuple(float(v) for v in self.values)
        except (TypeError, ValueError):
            raise ValueError(f"choice({list(self.values)!r}): expected numbers") from None
        if not values or len(set(values)) != len(values):
            raise ValueError(f"choice({list(self.values)!r}): expected distinct numbers, "
                             "at least one")
        object.__setattr__(self, "values", values)

    def sample(self, key: jax.Array) -> jax.Array:
        """One value drawn uniformly: ``float32[]``."""
        values = jnp.asarray(self.values, jnp.float32)
        return values[jax.random.randint(key, (), 0, len(self.values))]

    def clip(self, value: jax.Array) -> jax.Array:
        """The value nearest to ``value`` (a perturbed copy stays a choice)."""
        values = jnp.asarray(self.values, jnp.float32)
        return values[jnp.argmin(jnp.abs(values - value))]

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """Points ``u: float[n]`` of ``[0, 1)`` as values (equal bins): ``float32[n]``."""
        index = np.minimum((np.asarray(u) * len(self.values)).astype(np.int64), len(self.values) - 1)
        return np.asarray(self.values, np.float32)[index]


Space = Hyperparam | Choice


def parse_space(name: str, spec: Any) -> Space:
    """The space that ``spec`` writes for hyperparameter ``name``: a string
    ``uniform(low,high)``, ``loguniform(low,high)`` or ``choice([v1,v2,...])``
    (also ``choice(v1,v2)``), a list (a choice), a ``(low, high)``-style
    mapping of :meth:`Hyperparam.of`, or a :class:`Hyperparam`/:class:`Choice`.

    Raises:
      ValueError: naming ``search.space.<name>``, the value and the forms.
    """
    if isinstance(spec, Hyperparam | Choice):
        return spec
    where = f"search.space.{name}={spec!r}"
    if isinstance(spec, list | tuple):
        spec = f"choice({list(spec)})"
    if isinstance(spec, Mapping):
        try:
            return Hyperparam.of(spec)
        except (KeyError, ValueError) as e:
            raise ValueError(f"{where}: {e}; expected {_EXAMPLES}") from None
    match = _FORM.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"{where}: expected {_EXAMPLES}")
    form, body = match.groups()
    try:
        args = yaml.safe_load(f"[{body}]")
        if form == "choice":
            return Choice(tuple(args[0] if len(args) == 1 and isinstance(args[0], list) else args))
        if len(args) != 2:
            raise ValueError(f"{form} takes two numbers, low and high")
        if form == "loguniform" and float(args[0]) <= 0:
            raise ValueError("loguniform needs low > 0; use uniform(low,high) for a range from 0")
        return Hyperparam(float(args[0]), float(args[1]), log=form == "loguniform")
    except (yaml.YAMLError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}; expected {_EXAMPLES}") from None


def sample_trials(spaces: Mapping[str, Space], count: int, sampler: str = "random",
                  seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` trials of ``spaces``: ``{name: float32[count]}``, trial ``t``
    being row ``t`` of every array. ``"random"``: numpy's PCG64 seeded with
    ``seed``; ``"sobol"``: the first ``count`` points of a scrambled Sobol
    sequence (``2**ceil(log2(count))`` drawn, keeping its balance), seeded
    with ``seed``. The same arguments give the same trials.

    Raises:
      ValueError: an unknown ``sampler`` (listing :data:`SAMPLERS`) or ``count < 1``.
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"search.sampler={sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if count < 1:
        raise ValueError(f"sample_trials: count={count}: expected >= 1")
    dims = max(len(spaces), 1)
    if sampler == "sobol":
        from scipy.stats import qmc

        unit = qmc.Sobol(dims, scramble=True, seed=seed).random_base2(math.ceil(math.log2(count)))
    else:
        unit = np.random.default_rng(seed).random((count, dims))
    return {name: space.from_unit(unit[:count, j]) for j, (name, space) in enumerate(spaces.items())}
