"""Many seeds and a hyperparameter grid of one module, trained in one compiled program.

``Sweep(module, seeds=16, hyperparams={"lr": [1e-3, 3e-3]})`` trains one member
per (configuration, seed): 2 configurations x 16 seeds = 32 members. It is the
population mode of the Trainer without exploit/explore: the members are stacked
on a leading axis sharded over the devices, trained with ``vmap`` on each device
and padded where their number does not divide the devices, by the member core
that :class:`~jaxtrainer.population.PBT` also uses
(:class:`~jaxtrainer.population.members.MemberPopulation`). Only
numbers in the state differ between members (the traced ``state.hyperparams``
of PPO and A2C), so the whole sweep is one compile, as PureJaxRL and rejax
``vmap`` over seeds and hyperparameters.

Enumeration (configuration-major, seed-minor): the configurations are the
Cartesian product of the value lists, in the order the names are given, the
last name varying fastest (``itertools.product``); member ``i`` has
configuration ``i // S`` and seed ``seeds[i % S]``, ``S = len(seeds)``::

    Sweep(ppo, seeds=[0, 1], hyperparams={"lr": [1e-3, 3e-3], "ent_coef": [0.0, 0.01]})
    # member 0: lr=1e-3 ent_coef=0.0  seed 0    member 1: lr=1e-3 ent_coef=0.0  seed 1
    # member 2: lr=1e-3 ent_coef=0.01 seed 0    ...  member 7: lr=3e-3 ent_coef=0.01 seed 1

Reproducibility: member ``i`` is identified by its seed ``s`` and its
hyperparameters, and draws the keys that a one-device ``Trainer(seed=s)``
run of the module alone draws (:mod:`jaxtrainer.distributed.keys`):
``init = fold_in(key(s), INIT)``, step ``t``'s key
``fold_in(fold_in(fold_in(key(s), TRAIN), t), 0)`` (without the final device
fold when the module sets ``step_key_per_device = False``) and the evaluation
key at step ``t`` ``fold_in(fold_in(fold_in(key(s), EVAL), t), 0)``. With the
same budget, ``python recipes/ppo.py trainer.seed=<s> algorithm.lr=<x>
trainer.devices=1`` trains that member alone (:meth:`Sweep.member`). The
Trainer's own ``seed`` is not used by a sweep. How exactly the curves agree:

* ``vectorize=True`` (default, the fast way): the members of a device are
  batched with ``vmap``, whose batched matrix products round differently from
  the one-member program's (measured on XLA:CPU: parameters within 3e-8 after
  one PPO update). Keys, initial parameters and the first updates agree, so
  the curves agree to float rounding over the first updates; RL amplifies the
  last-bit differences (tiny PPO on CartPole: equal episode returns for 40
  updates, then apart; the recipe's default CartPole PPO: 58 and 75 updates
  for seeds 0 and 1, of 976);
* ``vectorize=False``: each member runs the one-member program (``lax.map``):
  bit for bit the single run's parameters, metrics and evaluations on
  XLA:CPU, at the speed of sequential runs.

Budget: ``Trainer(max_steps=N)`` trains every member for ``N`` updates (each
member's schedules, e.g. PPO's annealed learning rate, span ``N``); the
Trainer's ``env_steps`` count every real member's environment steps
(``P * module.env_steps_per_step`` per step).

Statistics (per configuration: mean, interquartile mean and a 95%
stratified-bootstrap confidence interval of the final evaluation return over its
seeds) are written by the :class:`~jaxtrainer.population.summary.SweepSummary`
callback.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer.distributed import AXIS_NAME, keys
from jaxtrainer.distributed._axis import AxisName
from jaxtrainer.metrics import Max, Mean, Min
from jaxtrainer.module import Module
from jaxtrainer.population.members import MemberPopulation, mean_parts

__all__ = ["Sweep", "SweepState", "grid"]


@struct.dataclass
class SweepState:
    """State of a sweep; member leaves are ``[P_pad, ...]`` (sharded).

    Attributes:
      members: the wrapped module's states stacked on a leading member axis
        (member ``i`` at row ``i``; rows ``P..P_pad-1`` are padding, copies of
        the last member).
      step: ``int32[]`` updates done by every member (replicated).
    """

    members: Any
    step: jax.Array


def _seeds(seeds: Any) -> tuple[int, ...]:
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"Sweep: seeds={seeds!r}: expected a count >= 1 or a list of "
                             "distinct int seeds")
        return tuple(range(int(seeds)))
    try:
        out = tuple(seeds)
    except TypeError:
        out = None
    if not out or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                          for s in out):
        raise ValueError(f"Sweep: seeds={seeds!r}: expected a count >= 1 or a non-empty list "
                         "of int seeds")
    if len(set(out)) != len(out):
        raise ValueError(f"Sweep: seeds={list(out)} repeat a seed: each seed is one member per "
                         "configuration, give distinct seeds")
    return tuple(int(s) for s in out)


def grid(hyperparams: Mapping[str, Sequence[float]] | None) -> list[dict[str, float]]:
    """Every configuration of a grid, in sweep order: the Cartesian product of
    the value lists, names in the order given, the last name varying fastest.
    ``{}`` or ``None`` is one configuration with nothing changed: ``[{}]``.
    Values are floats, except ints given as ints (kept, so that files and
    commands show ``4``, not ``4.0``; the state holds them as float32 either way).

    Raises:
      ValueError: a value list that is empty, not a list, holds a non-finite
        or non-numeric value, or repeats a value (naming the hyperparameter).
    """
    hyperparams = dict(hyperparams or {})
    values: dict[str, list[float]] = {}
    for name, options in hyperparams.items():
        if isinstance(options, (str, bytes)) or not isinstance(options, Sequence) or not options:
            raise ValueError(f"Sweep: hyperparams[{name!r}]={options!r}: expected a non-empty "
                             f"list of numbers, e.g. {{{name!r}: [1e-3, 3e-3]}}")
        kept = []
        for v in options:
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(float(v)):
                raise ValueError(f"Sweep: hyperparams[{name!r}] holds {v!r}: expected numbers")
            kept.append(int(v) if isinstance(v, numbers.Integral) else float(v))
        if len({float(v) for v in kept}) != len(kept):
            raise ValueError(f"Sweep: hyperparams[{name!r}]={list(options)} repeats a value")
        values[str(name)] = kept
    return [dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())]


class Sweep(MemberPopulation):
    """Train ``module`` once per (configuration of ``hyperparams``, seed) in one
    program (see the module docstring for the member order, keys and budget).

    Metrics of :meth:`training_step` (per update; the Trainer reduces them over
    a log interval by their reductions):
      * every metric of the wrapped module over the ``P`` real members, with
        its own reduction (a Mean such as ``train/episode_return`` pools the
        members' samples; ``Last``, e.g. ``lr``, is the mean of the members'
        values);
      * ``member/<i>/<name>`` for every ``name`` in ``member_metrics``, for
        ``i < P`` (padding members never appear).

    :meth:`evaluation_step` evaluates every member with the wrapped module's
    ``evaluation_step`` (member ``i`` with its own evaluation key) and reports,
    for each of its metrics ``eval/x``: ``member/<i>/eval/x``; ``eval/x``, the
    mean over the real members of each member's value (every member weighs
    the same); ``eval/x_min`` and ``eval/x_max`` over members.

    The Trainer's counters are the sweep's totals (``env_steps`` over every
    member); what is printed (progress, resume messages) and plotted counts
    env steps per member (``budget_per_member``), the unit of a recipe's budget.

    Args:
      module: any :class:`~jaxtrainer.Module`; with ``hyperparams``, one whose
        state has a ``hyperparams: dict[str, float32[]]`` field (or dict key)
        that ``training_step`` reads (PPO's and A2C's ``TUNABLE``). Its sizes
        are per member (each member is one single-device agent).
      seeds: a count ``S >= 1`` of seeds (``0..S-1``; a recipe's ``sweep.seeds``
        counts from ``trainer.seed``) or a list of distinct int seeds. Member
        keys derive from these, not from the Trainer's seed.
      hyperparams: ``{name: [values]}``, the grid; names from the state's
        ``hyperparams``. ``None`` or ``{}``: seeds only.
      member_metrics: training metrics of the wrapped module also logged per
        member (``member/<i>/<name>``).
      axis_name: the mesh axis (or axes) the members are sharded over.
      vectorize: ``True``: ``vmap`` each device's members (fast; reproducible to
        float rounding); ``False``: one after another (bitwise reproducible on
        XLA:CPU). See the module docstring.

    Attributes:
      seeds: the seeds, ``tuple[int, ...]``.
      configs: the configurations, ``list[dict[str, float]]`` (:func:`grid`).
      population_size: ``P = len(configs) * len(seeds)``.

    Raises:
      ValueError: at construction, bad ``seeds`` or grid (see :func:`grid`); in
        :meth:`validate` (before compiling) a hyperparameter the module's state
        does not hold or a ``member_metrics`` name it does not log (listing the
        ones it has), or the wrapped module's own size checks.
      TypeError: ``module`` is not a :class:`~jaxtrainer.Module`.
    """

    budget_per_member = True

    def __init__(
        self,
        module: Module,
        seeds: int | Sequence[int] = 1,
        hyperparams: Mapping[str, Sequence[float]] | None = None,
        member_metrics: Sequence[str] = ("train/episode_return",),
        axis_name: AxisName = AXIS_NAME,
        vectorize: bool = True,
    ) -> None:
        if hyperparams is not None and not isinstance(hyperparams, Mapping):
            raise ValueError(f"Sweep: hyperparams={hyperparams!r}: expected a mapping "
                             "{name: [values]}")
        if isinstance(member_metrics, str):
            raise ValueError(f"Sweep: member_metrics={member_metrics!r}: expected a list of "
                             "metric names")
        self.seeds = _seeds(seeds)
        self.configs = grid(hyperparams)
        self.hyperparam_names = tuple(self.configs[0])
        self.member_metrics = tuple(member_metrics)
        super().__init__(module, len(self.configs) * len(self.seeds), axis_name, name="Sweep",
                         vectorize=vectorize)
        self._roots: np.ndarray | None = None  # uint32 key data [P_pad, ...], set by validate
        self._impl: Any = None

    # ---- members -------------------------------------------------------------
    def member(self, i: int) -> dict[str, Any]:
        """Member ``i``'s identity: ``{"member": i, "config": c, "seed": s,
        **hyperparams}`` with ``c = i // len(seeds)`` and ``s = seeds[i % len(seeds)]``.

        Raises:
          ValueError: ``i`` is not a member index ``0 <= i < P``.
        """
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) \
                or not 0 <= i < self.population_size:
            raise ValueError(f"Sweep.member({i!r}): expected a member index in "
                             f"[0, {self.population_size})")
        config, j = divmod(int(i), len(self.seeds))
        return {"member": int(i), "config": config, "seed": self.seeds[j],
                **self.configs[config]}

    def members(self) -> list[dict[str, Any]]:
        """:meth:`member` of every real member, in member order."""
        return [self.member(i) for i in range(self.population_size)]

    def config_label(self, config: int) -> str:
        """``"lr=0.001 ent_coef=0.01"`` for configuration ``config`` (``"all"``
        without hyperparameters)."""
        items = self.configs[config].items()
        return " ".join(f"{k}={v:g}" for k, v in items) or "all"

    def averaged(self) -> str:
        """What a mean over the members averages, for the lines that report one:
        ``"mean over 4 members (seeds 0-3)"`` or ``"mean of 2 configurations x
        2 seeds (4 members)"``."""
        seeds = self.seeds
        contiguous = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds)))
        dash = "-" if seeds[0] >= 0 else " to "  # "seeds -2 to 1", never "-2-1"
        named = f"{seeds[0]}{dash}{seeds[-1]}" if contiguous and len(seeds) > 1 else \
            ", ".join(map(str, seeds))
        if len(self.configs) == 1:
            return f"mean over {self.population_size} members (seed{'s' * (len(seeds) > 1)} {named})"
        return (f"mean of {len(self.configs)} configurations x {len(seeds)} seeds "
                f"({self.population_size} members)")

    def _padded(self) -> list[dict[str, Any]]:
        """Every member of the padded population (padding: copies of the last)."""
        real = self.members()
        return real + [real[-1]] * (self.layout.padded_size - len(real))

    # ---- checks ----------------------------------------------------------------
    def validate(self, num_devices: int) -> None:
        """Lay the members out over ``num_devices``, check the wrapped module, the
        grid's names and ``member_metrics`` (shape-only, before compiling), and
        derive every member's root key ``key(seed)`` on the host.

        Raises:
          ValueError: see the class docstring.
        """
        self.validate_members(num_devices, self.hyperparam_names, self.member_metrics)
        roots = [keys.root_key(m["seed"]) for m in self._padded()]
        self._impl = jax.random.key_impl(roots[0])
        self._roots = np.stack([np.asarray(jax.random.key_data(k)) for k in roots])

    def hparams(self) -> dict[str, Any]:
        return {
            "sweep": {"seeds": list(self.seeds), "members": self.population_size,
                      "vectorize": self.vectorize,
                      "hyperparams": {n: sorted({c[n] for c in self.configs})
                                      for n in self.hyperparam_names}},
            "module": type(self.module).__name__,
            **self.module.hparams(),
        }

    # ---- Module ----------------------------------------------------------------
    def _member_roots(self, ids: jax.Array) -> jax.Array:
        """``key(seed)`` of each of ``ids``: ``key[L]``."""
        if self._roots is None:
            raise ValueError("Sweep: validate(num_devices) must run before the sweep is traced "
                             "(the Trainer calls it)")
        data = jnp.asarray(self._roots)[ids]
        return jax.random.wrap_key_data(data, impl=self._impl)

    def _member_hyperparams(self, ids: jax.Array) -> dict[str, jax.Array]:
        """``{name: float32[L]}`` the grid values of each of ``ids``."""
        padded = self._padded()
        return {name: jnp.asarray(np.array([m[name] for m in padded], np.float32))[ids]
                for name in self.hyperparam_names}

    def init_state(self, key: jax.Array) -> SweepState:
        """Member ``i``: ``module.init_state(fold_in(key(seed_i), INIT))`` with its
        configuration's hyperparameters set in its state (``key`` is not used)."""
        del key
        ids = self.layout.ids()
        init_keys = jax.vmap(lambda r: keys.stream_key(r, keys.INIT_STREAM))(
            self._member_roots(ids))
        members = self.init_members(init_keys, ids, self._member_hyperparams(ids))
        return SweepState(members, jnp.zeros((), jnp.int32))

    def training_step(self, state: SweepState, key: jax.Array) -> tuple[SweepState, dict]:
        """One update of every member (vmapped over this device's members), member
        ``i`` with the step key a one-device run of seed ``seeds_i`` draws at
        step ``state.step`` (``key`` is not used)."""
        del key
        ids = self.layout.ids()
        device = 0 if self.module.step_key_per_device else None
        step_keys = jax.vmap(lambda r: keys.step_key(keys.stream_key(r, keys.TRAIN_STREAM),
                                                     state.step, device))(self._member_roots(ids))
        members, inner = self.train_members(state.members, step_keys)
        real = self.layout.mask(ids)
        metrics: dict[str, Any] = {name: self.over_members(value, real)
                                   for name, value in inner.items()}
        metrics.update(self.per_member("member/", {n: inner[n] for n in self.member_metrics}))
        return SweepState(members, state.step + 1), metrics

    def evaluation_keys(self, state: Any, key: jax.Array) -> jax.Array:
        """Member ``i``'s evaluation key at step ``state.step``: the one a
        one-device run of its seed evaluates with (``key`` is not used)."""
        del key
        return jax.vmap(lambda r: keys.sub_key(keys.stream_key(r, keys.EVAL_STREAM), state.step))(
            self._member_roots(self.layout.ids()))

    def evaluation_step(self, state: SweepState, key: jax.Array) -> dict[str, Any]:
        """Every member's ``module.evaluation_step``, member ``i`` with the key a
        one-device run of seed ``seeds_i`` evaluates with at step ``state.step``
        (``key`` is not used); metrics as in the class docstring."""
        ids = self.layout.ids()
        inner = self.evaluate_members(state.members, self.evaluation_keys(state, key))
        real = self.layout.mask(ids)
        metrics: dict[str, Any] = {}
        for name, value in inner.items():
            total, count = mean_parts(value)
            per = total / jnp.maximum(count, 1.0)  # each member's own value
            has = real & (count > 0)
            metrics[name] = Mean.of(per, has)
            metrics[f"{name}_min"] = Min.of(per, has)
            metrics[f"{name}_max"] = Max.of(per, has)
        metrics.update(self.per_member("member/", inner))
        return metrics
