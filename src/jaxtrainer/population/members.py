"""The member core shared by the population modes of the Trainer (PBT, Sweep).

A *population mode* trains ``P`` copies ("members") of one
:class:`~jaxtrainer.Module` inside one ordinary Trainer program: every member's
state is stacked on a leading member axis, **sharded over the devices** along
``axis_name`` (each device holds ``L = P_pad / num_devices`` members and trains
them with ``vmap``), laid out, padded and gathered by
:class:`~jaxtrainer.distributed.MemberLayout`. :class:`MemberPopulation` is that
core, and only that:

* stacking: :meth:`MemberPopulation.init_members` builds this device's members
  (one ``init_state`` after another, ``lax.map``) and sets their traced
  hyperparameters;
* training and evaluation: :meth:`~MemberPopulation.train_members` and
  :meth:`~MemberPopulation.evaluate_members` run the module's steps for this
  device's members inside :func:`~jaxtrainer.distributed.member_scope`, so a
  data-parallel module computes exactly what it computes on one device:
  batched with ``vmap`` (``vectorize = True``, the default: fast; batched
  matrix products round differently from one member's, by about 1e-8 per
  update) or one member after another with ``lax.map`` (``vectorize =
  False``: each member's program is the one-member program, bit for bit on
  XLA:CPU);
* padding: a population that does not divide the device count is padded at the
  end (``P_pad = ceil(P / n) * n``); padding members train but never reach a
  metric (:meth:`~MemberPopulation.over_members` and
  :meth:`~MemberPopulation.per_member` see real members only) and never count
  in ``env_steps_per_step``;
* member metrics: ``member/<i>/<name>`` with the metric's own reduction.

:class:`~jaxtrainer.population.PBT` adds exploit/explore and fitness to it,
:class:`~jaxtrainer.population.Sweep` a grid of hyperparameters times seeds and
per-seed keys. Each subclass chooses its members' keys.

Traced hyperparameters: a module is *population-ready* when its state has a
``hyperparams: dict[str, float32[]]`` field (or, for a dict state, key) that its
``training_step`` reads (the ``TUNABLE`` of PPO, A2C, SAC, TD3, DQN; an ES's
``ESState.hyperparams``), so members differ in
numbers held in the state and one program trains them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms.hyperparams import get_hyperparams, set_hyperparams
from jaxtrainer.distributed import AXIS_NAME, member_scope, per_device, pmax, pmin, psum
from jaxtrainer.distributed._axis import AxisName
from jaxtrainer.distributed._members import MemberLayout
from jaxtrainer.metrics import Last, Mean, Metric
from jaxtrainer.module import Module, counted_members  # noqa: F401 (counted_members: its old home)

__all__ = [
    "MemberPopulation",
    "mean_parts",
    "member_metric",
]


def _auto_axes(x: Any) -> Any:
    """``x`` (a leaf of a live state: a global array typed by the Trainer's mesh,
    whose axes are Explicit) on the same devices and layout with Auto axes, where
    indexing a sharded dimension is allowed (XLA picks the collectives); no
    gather. Any other leaf (a host copy, an array on one device) as it is."""
    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, NamedSharding) or AxisType.Explicit not in sharding.mesh.axis_types:
        return x
    mesh = sharding.mesh
    auto = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))
    return jax.device_put(x, NamedSharding(auto, sharding.spec))


def member_metric(value: Any) -> Metric:
    """A vmapped metric (fields ``[L]``, one per member) as a :class:`Metric` of
    float32 arrays; a plain scalar metric as a :class:`Mean` of one sample each."""
    if isinstance(value, Metric):
        return type(value)(jnp.asarray(value.reduced, jnp.float32),
                           jnp.asarray(value.count, jnp.float32))
    value = jnp.asarray(value, jnp.float32)
    return Mean(value, jnp.ones_like(value))


def mean_parts(value: Any) -> tuple[jax.Array, jax.Array]:
    """``(total, count)`` per member of a vmapped metric: ``float32[L]`` each, to
    average over steps. A Mean pools its samples; any other reduction counts
    each step's reported value as one sample (none when it had no samples)."""
    value = member_metric(value)
    if isinstance(value, Mean):
        return value.total, value.count
    has = value.count > 0
    return jnp.where(has, value.reduced, 0.0), has.astype(jnp.float32)


class MemberPopulation(Module):
    """Base of the population modes: ``population_size`` members of ``module``
    stacked on a leading axis sharded over ``axis_name`` (module docstring).

    Subclasses implement ``init_state`` (with :meth:`init_members`),
    ``training_step`` (with :meth:`train_members`) and ``evaluation_step``
    (with :meth:`evaluate_members`), and call :meth:`validate_members` from
    ``validate``. ``Trainer(max_steps=N)`` trains every member for ``N``
    updates; one Trainer step is one ``training_step`` of every member, and
    ``env_steps_per_step`` counts the real members' environment steps
    (``P * module.env_steps_per_step``).

    Args:
      module: the :class:`~jaxtrainer.Module` each member runs; its sizes are
        per member (each member is one single-device agent).
      population_size: ``P`` real members, global (>= 1).
      axis_name: the mesh axis (or axes) the members are sharded over.
      name: the name used in error messages (e.g. ``"PBT"``).
      vectorize: ``True``: ``vmap`` this device's members; ``False``:
        ``lax.map`` them (module docstring).

    Raises:
      TypeError: ``module`` is not a :class:`~jaxtrainer.Module`.
      ValueError: ``vectorize`` is not a bool.
    """

    step_key_per_device = False  # member keys are derived per member, not per device
    name = "population"
    budget_per_member = False  # a sweep's and a search's budget is each member's
    budget_share: Any = 1  # the fraction of it each member slot trains (a search's rounds)

    def __init__(self, module: Module, population_size: int, axis_name: AxisName = AXIS_NAME,
                 name: str | None = None, vectorize: bool = True) -> None:
        if name is not None:
            self.name = name
        if not isinstance(module, Module):
            raise TypeError(f"{self.name} wraps a jaxtrainer.Module, got {type(module).__name__}")
        self.vectorize = arguments.flag(f"{self.name}: vectorize", vectorize)
        self.module = module
        self.population_size = int(population_size)
        self.axis_name = axis_name
        self.layout = MemberLayout(self.population_size, 1, axis_name)  # set per run by validate
        self.env_steps_per_step = self.population_size * int(module.env_steps_per_step)

    # ---- members as policies ------------------------------------------------------
    @property
    def member_module(self) -> Module:
        """The module every member runs (its policy is each member's)."""
        return self.module

    def default_member(self, state: Any) -> int:
        """The member evaluated and loaded when none is named: member 0 here."""
        return 0

    def describe_member(self, state: Any, member: int) -> str | None:
        """A line about member ``member`` for ``jaxtrainer eval`` (``None``: none here)."""
        return None

    def member_state(self, state: Any, member: int | None = None) -> Any:
        """Member ``member``'s own state (a host-side slice of a whole
        population's state); ``None``: :meth:`default_member`.

        Raises:
          ValueError: ``member`` outside ``[0, population_size)``.
        """
        if member is None:
            member = self.default_member(state)
        if isinstance(member, bool) or not isinstance(member, int) \
                or not 0 <= member < self.population_size:
            raise ValueError(f"member={member!r}: expected an index in [0, {self.population_size})")
        return jax.tree.map(lambda x: _auto_axes(x)[member], state.members)

    def policy(self, state: Any, member: int | None = None) -> Any:
        """Member ``member``'s policy (:meth:`member_state`; host side)."""
        return self.module.policy(self.member_state(state, member))

    @property
    def env(self) -> Any:
        return self.module.env

    @property
    def stochastic_policy(self) -> bool:  # type: ignore[override]
        return bool(self.module.stochastic_policy)

    # ---- checks ----------------------------------------------------------------
    def configure_budget(self, max_steps: int) -> None:
        """Pass the budget on: one step is one ``training_step`` of every member,
        so each member's schedules span ``max_steps`` of its own updates."""
        self.module.configure_budget(max_steps)

    def validate_members(self, num_devices: int, hyperparams: Iterable[str] = (),
                         metrics: Iterable[str] = ()) -> None:
        """Lay the members out over ``num_devices`` and check, shape-only and
        before compiling, the wrapped module (``module.validate(1)``: each member
        is a one-device agent), that ``hyperparams`` are names in its state's
        ``hyperparams`` and that ``metrics`` are its training metrics.

        Raises:
          ValueError: a state without a ``hyperparams`` dict while names are
            asked for, an unknown hyperparameter or metric (the message lists
            the ones there are), or the wrapped module's own size checks.
        """
        self.layout = MemberLayout(self.population_size, int(num_devices), self.axis_name)
        self.module.validate(1)
        hyperparams, metrics = list(hyperparams), list(metrics)
        if not hyperparams and not metrics:
            return
        key = jax.random.key(0)
        state = jax.eval_shape(self.module.init_state, key)
        module = type(self.module).__name__
        if hyperparams:
            available = get_hyperparams(state)
            if not isinstance(available, Mapping):
                raise ValueError(
                    f"{self.name}: {module}'s state has no `hyperparams` dict, so "
                    "nothing can be tuned without recompiling; keep tunable values in "
                    "state.hyperparams and read them in training_step")
            unknown = sorted(set(hyperparams) - set(available))
            if unknown:
                raise ValueError(f"{self.name}: hyperparams {unknown} are not in "
                                 f"{module}'s state.hyperparams; choose from {sorted(available)}")
        if metrics:
            produced = jax.eval_shape(self.module.training_step, state, key)[1]
            for name in metrics:
                if name not in produced:
                    raise ValueError(f"{self.name}: metric {name!r} is not a training metric of "
                                     f"{module}; choose from {sorted(produced)}")

    # ---- members -----------------------------------------------------------------
    def init_members(self, keys: jax.Array, ids: jax.Array,
                     hyperparams: Mapping[str, jax.Array] | None = None) -> Any:
        """This device's members: ``module.init_state(keys[k])`` for each of its
        ``L`` members, then each hyperparameter in ``hyperparams``
        (``{name: float[L]}``) set in the members' ``hyperparams`` (cast to
        their dtype). Every leaf ``[L, ...]``, varying over the devices (even
        constants), so that the strategy shards it."""
        with member_scope(self.axis_name):
            # One member after another (lax.map, once per run): a vmapped init
            # batches the QR factorisations of orthogonal initialisers, and
            # XLA:CPU's batched LAPACK kernels wait on the intra-op thread pool
            # that the other (fake) devices' kernels hold: a deadlock.
            members = jax.lax.map(self.module.init_state, keys)
        if hyperparams:
            hp = dict(get_hyperparams(members))
            for name, value in hyperparams.items():
                hp[name] = jnp.asarray(value).astype(hp[name].dtype)
            members = set_hyperparams(members, hp)
        return per_device(members)

    def _each_member(self, fn: Any, members: Any, keys: jax.Array) -> Any:
        """``fn(member, key)`` for each of this device's members: ``vmap`` or,
        without ``vectorize``, ``lax.map``; outputs stacked ``[L, ...]``."""
        with member_scope(self.axis_name):
            if self.vectorize:
                return jax.vmap(fn)(members, keys)
            return jax.lax.map(lambda pair: fn(*pair), (members, keys))

    def train_members(self, members: Any, keys: jax.Array) -> tuple[Any, dict[str, Any]]:
        """One ``module.training_step`` of each of this device's members
        (member ``k`` with ``keys[k]``): ``(members, metrics)``, every metric
        field ``[L]``."""
        return self._each_member(self.module.training_step, members, keys)

    def evaluation_keys(self, state: Any, key: jax.Array) -> jax.Array:
        """This device's members' evaluation keys, ``key[L]``: member ``i``'s
        ``fold_in(key, i)`` (whichever device holds it)."""
        return self.layout.keys(key, self.layout.ids())

    def evaluate_members(self, members: Any, keys: jax.Array) -> dict[str, Any]:
        """``module.evaluation_step`` of each of this device's members (member
        ``k`` with ``keys[k]``): metrics with fields ``[L]``."""
        return self._each_member(self.module.evaluation_step, members, keys)

    # ---- metrics ---------------------------------------------------------------
    def per_member(self, prefix: str, values: dict[str, Any]) -> dict[str, Metric]:
        """``{prefix<i>/<name>: metric}`` for the real members ``i < P``, each
        with its own reduction; each device reports the members it holds, with
        no samples elsewhere (the Trainer reduces over devices). ``values``:
        vmapped metrics of this device's members (fields ``[L]``)."""
        out = {}
        for i in range(self.population_size):
            owned, slot = self.layout.holds(i), self.layout.slot(i)
            for name, value in values.items():
                mine = jax.tree.map(lambda x, s=slot: x[s], member_metric(value))
                out[f"{prefix}{i}/{name}"] = mine.keep(owned)
        return out

    def over_members(self, value: Any, real: jax.Array) -> Metric:
        """A vmapped metric over this device's real members (``real: bool[L]``),
        to be reduced over devices by the Trainer: a Mean pools the members'
        samples, Max/Min/Sum take the max/min/sum. ``Last``: the mean over every
        device's real members, computed here (exact when they agree) so that
        devices holding fewer real members do not weigh more. A member whose
        value is not finite (a diverged member) is left out of the pooled value:
        its own ``member/<i>/...`` metric shows it."""
        value = member_metric(value)
        main = value.total if hasattr(value, "total") else value.value  # [L, ...]
        real = real & jnp.isfinite(main.reshape(main.shape[0], -1)).all(axis=-1)
        if not isinstance(value, Last):
            return value.over_members(real)
        has = (value.count > 0) & real
        axes = self.axis_name
        hi = pmax(jnp.max(jnp.where(has, value.value, -jnp.inf)), axes)
        lo = pmin(jnp.min(jnp.where(has, value.value, jnp.inf)), axes)
        total = psum(jnp.sum(jnp.where(has, value.value, 0.0)), axes)
        num = psum(jnp.sum(has, dtype=jnp.float32), axes)
        count = jnp.sum(jnp.where(has, value.count, 0.0))
        return Last(jnp.where(hi == lo, hi, total / jnp.maximum(num, 1.0)), count)
