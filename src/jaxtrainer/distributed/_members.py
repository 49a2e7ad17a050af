"""One member layout for every population: sizes, ids, keys, masks, gather, ranking.

A *population* is a pytree whose leaves share a leading axis of ``P`` members
(:func:`population_size`). Split over ``n`` devices, it is laid out the same
way by every population algorithm (:class:`~jaxtrainer.PopulationTrainer`,
:class:`~jaxtrainer.population.PBT`, :class:`~jaxtrainer.algorithms.CEMRL`):

* when ``n`` does not divide ``P``, the population is padded at the end with
  copies of its last member up to ``P_pad = ceil(P / n) * n`` (finite, valid
  inputs for any member code), so every device runs the same program; padding
  members never count: they are never ranked, never reach a fitness statistic,
  a logged metric or an update;
* device ``d`` (row-major over the mesh axes) holds members ``d*L .. d*L+L-1``,
  ``L = P_pad / n``;
* member ``i``'s key is ``fold_in(key, i)``
  (:func:`~jaxtrainer.distributed.keys.member_key`) whichever device holds it;
* values cross devices bit for bit (:func:`gather_members`: each device's
  members are placed in zeros, reinterpreted as unsigned integers and
  ``psum``-ed), so ``-0.0``, NaN payloads and typed PRNG keys arrive unchanged
  and the result is typed device-invariant under ``check_vma=True`` (an
  ``all_gather`` result is typed as varying, so it could not feed replicated
  state).

So a population gives the same results on any device count. The program of
one generation, as the PopulationTrainer runs it::

    layout = MemberLayout(size=10, num_devices=4)        # padded_size 12, local_count 3
    local = layout.local(layout.pad(population))         # this device's 3 members
    fitness = jax.vmap(evaluate)(local, layout.keys(key))
    fitness = layout.unpad(layout.gather(fitness))       # float32[10] on every device
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer.distributed._axis import (
    AXIS_NAME,
    AxisName,
    axis_index,
    axis_size,
    axis_tuple,
    bound_axes,
    psum,
    to_varying,
)
from jaxtrainer.distributed.keys import member_keys
from jaxtrainer.metrics import Max, Mean, Min, Sum

__all__ = [
    "MemberLayout",
    "gather_members",
    "local_members",
    "pad_population",
    "population_size",
    "rank",
]


def population_size(tree: Any) -> int:
    """The leading-axis size ``P`` shared by every leaf of ``tree``.

    Raises:
      ValueError: ``tree`` has no leaves, a scalar leaf, or leaves of different
        leading sizes.
    """
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError("a population needs at least one array leaf")
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes or len(sizes) != 1:
        shapes = [np.shape(x) for x in leaves]
        raise ValueError(f"population leaves must share a leading (member) axis; got shapes {shapes}")
    return int(sizes.pop())


def pad_population(tree: Any, multiple: int) -> tuple[Any, jax.Array]:
    """Pad the member axis up to a multiple of ``multiple``.

    Padding members are copies of the last real member (finite, valid inputs for
    any ``fn``), appended at the end, so ``padded[:P]`` is the original.

    Args:
      tree: population, leaves ``[P, ...]``.
      multiple: e.g. the device count. Static, >= 1.

    Returns:
      ``(padded, mask)``: leaves ``[P_pad, ...]`` with ``P_pad = ceil(P / multiple)
      * multiple`` and ``mask: bool[P_pad]``, True for the ``P`` real members.
    """
    size = population_size(tree)
    padded_size = -(-size // multiple) * multiple
    extra = padded_size - size
    mask = jnp.arange(padded_size) < size
    if extra == 0:
        return tree, mask

    def pad(x):
        return jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)], axis=0)

    return jax.tree.map(pad, tree), mask


def local_members(tree: Any, axis_names: AxisName = AXIS_NAME) -> Any:
    """This device's contiguous block of members, inside ``shard_map``.

    Device ``d`` (linear index over the bound ``axis_names``, row-major) gets
    members ``d*L .. d*L+L-1`` with ``L = P / n``. Outside a mapped axis the whole
    population is returned.

    Args:
      tree: the global population, leaves ``[P, ...]`` (typically replicated).

    Returns:
      leaves ``[L, ...]``, varying over the bound axes.

    Raises:
      ValueError: ``P`` is not a multiple of the device count (pad first with
        :func:`pad_population`).
    """
    names = bound_axes(axis_names)
    n = axis_size(names) if names else 1
    size = population_size(tree)
    if size % n:
        raise ValueError(f"population of {size} members does not split over {n} devices; "
                         "pad it first with jaxtrainer.distributed.pad_population")
    if not names:
        return tree
    local = size // n
    start = axis_index(names) * local
    return jax.tree.map(
        lambda x: jax.lax.dynamic_slice_in_dim(to_varying(x, names), start, local, axis=0), tree)


_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def _gather_leaf(x: jax.Array, names: tuple[str, ...]) -> jax.Array:
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys travel as their key data
        data = _gather_leaf(jax.random.key_data(x), names)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    x = to_varying(x, names)
    dtype, n, local = x.dtype, axis_size(names), x.shape[0]
    bits = x.astype(jnp.uint8) if dtype == jnp.bool_ else \
        jax.lax.bitcast_convert_type(x, _UINT[dtype.itemsize])
    full = jnp.zeros((n * local,) + x.shape[1:], bits.dtype)
    full = jax.lax.dynamic_update_slice_in_dim(full, bits, axis_index(names) * local, axis=0)
    full = psum(full, names)  # one non-zero term: exact (no collective on one device)
    if dtype == jnp.bool_:
        return full.astype(jnp.bool_)
    return jax.lax.bitcast_convert_type(full, dtype)


def gather_members(local: Any, axis_names: AxisName = AXIS_NAME) -> Any:
    """Concatenate every device's members in device order, bit for bit.

    The inverse of :func:`local_members`: leaves ``[L, ...]`` on each of ``n``
    devices become ``[n*L, ...]``, identical on every device and typed as
    device-invariant (so the result may feed replicated state under
    ``check_vma=True``). Values are moved as raw bits, so ``-0.0``, NaN payloads
    and every float keep their exact bit pattern; typed PRNG keys move as their
    key data and come back as keys of the same implementation. Identity outside
    a mapped axis.
    """
    names = bound_axes(axis_names)
    if not names:
        return local
    return jax.tree.map(lambda x: _gather_leaf(x, names), local)


def rank(fitness: jax.Array, maximize: bool = True, worst_first: bool = False) -> jax.Array:
    """Member indices from the best to the worst fitness (``worst_first``: the
    reverse direction): ``int32[P]`` for ``fitness: float[P]``.

    An invalid fitness (NaN or infinite: a diverged member) counts as the
    worst value, so it ranks last (below a finite worst). Ties keep member
    order: of two equal values the lower index comes first, whichever end the
    order starts from.
    """
    worst = -jnp.inf if maximize else jnp.inf
    value = jnp.where(jnp.isfinite(fitness), fitness, worst)
    return jnp.argsort(value, stable=True, descending=maximize != worst_first)


@dataclasses.dataclass(frozen=True)
class MemberLayout:
    """How ``size`` members are split over ``num_devices`` devices of
    ``axis_names`` (see the module docstring). Static: build it where the
    device count is known (``Module.validate``, or at trace time from
    :func:`~jaxtrainer.distributed.axis_size`).

    The methods that name this device's members (:meth:`ids`, :meth:`mask`,
    :meth:`keys`, :meth:`local`, :meth:`holds`) and :meth:`gather` run inside
    ``shard_map`` over ``axis_names`` (outside any mapped axis a layout of one
    device holds every member).

    Attributes:
      size: ``P``, the real members (>= 1).
      num_devices: ``n``, the devices along ``axis_names`` (>= 1).
      axis_names: the mesh axis or axes the members are split over (row-major).

    Raises:
      ValueError: ``size`` or ``num_devices`` is not an int >= 1.
    """

    size: int
    num_devices: int = 1
    axis_names: AxisName = AXIS_NAME

    def __post_init__(self) -> None:
        for name in ("size", "num_devices"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MemberLayout: {name}={value!r}: expected an int >= 1")
        object.__setattr__(self, "axis_names", axis_tuple(self.axis_names))

    # ---- sizes ---------------------------------------------------------------
    @property
    def padded_size(self) -> int:
        """``P_pad``: ``size`` rounded up to a multiple of ``num_devices``."""
        return -(-self.size // self.num_devices) * self.num_devices

    @property
    def local_count(self) -> int:
        """``L``: members per device, padding included."""
        return self.padded_size // self.num_devices

    # ---- this device's members ------------------------------------------------
    def _device(self) -> jax.Array:
        """This device's index along ``axis_names``: ``int32[]``.

        Raises:
          ValueError: the bound axes hold another number of devices than
            ``num_devices`` (ids and blocks would not match the devices).
        """
        bound = axis_size(self.axis_names)
        if bound != self.num_devices:
            raise ValueError(f"a MemberLayout over {self.num_devices} devices is used where "
                             f"{bound} device(s) of the axes {self.axis_names} are bound")
        return axis_index(self.axis_names)

    def ids(self) -> jax.Array:
        """Global ids of this device's members: ``int32[L]``, ``d*L .. d*L+L-1``."""
        start = self._device() * self.local_count
        return start + jnp.arange(self.local_count, dtype=jnp.int32)

    def mask(self, ids: jax.Array | None = None) -> jax.Array:
        """Which of ``ids`` (default :meth:`ids`) are real members: ``bool[...]``."""
        return (self.ids() if ids is None else ids) < self.size

    def keys(self, key: jax.Array, ids: jax.Array | None = None) -> jax.Array:
        """Member ``i``'s key ``fold_in(key, i)`` for each of ``ids`` (default
        :meth:`ids`): ``key[L]``, the same whichever device holds the member."""
        return member_keys(key, self.ids() if ids is None else ids)

    def holds(self, member: int) -> jax.Array:
        """Whether this device holds member ``member`` (a static id): ``bool[]``."""
        return self._device() == member // self.local_count

    def slot(self, member: int) -> int:
        """Where member ``member`` sits among its device's ``L`` members."""
        return member % self.local_count

    # ---- whole populations ------------------------------------------------------
    def pad(self, tree: Any) -> Any:
        """A population of ``size`` members padded to ``padded_size`` (copies of
        the last member at the end).

        Raises:
          ValueError: ``tree``'s leaves do not hold ``size`` members.
        """
        if population_size(tree) != self.size:
            raise ValueError(f"MemberLayout.pad: expected {self.size} members, got "
                             f"{population_size(tree)}")
        return pad_population(tree, self.num_devices)[0]

    def unpad(self, tree: Any) -> Any:
        """The real members of a padded population (every leaf's first ``size`` rows)."""
        return jax.tree.map(lambda x: x[:self.size], tree)

    def local(self, tree: Any) -> Any:
        """This device's block of a padded population: leaves ``[P_pad, ...]`` ->
        ``[L, ...]`` (varying), members ``d*L .. d*L+L-1``."""
        self._device()  # the bound axes must match num_devices
        return local_members(tree, self.axis_names)

    def gather(self, tree: Any) -> Any:
        """Every device's members in id order, bit for bit, on every device:
        leaves ``[L, ...]`` -> ``[P_pad, ...]`` (see :func:`gather_members`)."""
        return gather_members(tree, self.axis_names)

    # ---- fitness -----------------------------------------------------------------
    def rank(self, fitness: jax.Array, maximize: bool = True,
             worst_first: bool = False) -> jax.Array:
        """:func:`rank` of the real members: ``fitness`` is ``[P]`` or ``[P_pad]``
        (padding is left out), the result ``int32[P]``.

        Raises:
          ValueError: ``fitness`` holds neither ``size`` nor ``padded_size`` values.
        """
        if fitness.shape[0] not in (self.size, self.padded_size):
            raise ValueError(f"MemberLayout.rank: expected {self.size} or {self.padded_size} "
                             f"fitness values, got shape {fitness.shape}")
        return rank(self.unpad(fitness), maximize, worst_first)

    def fitness_metrics(self, fitness: jax.Array,
                        valid: jax.Array | None = None) -> dict[str, Any]:
        """``fitness/mean``, ``fitness/max`` (a :class:`~jaxtrainer.metrics.Max`) and
        ``fitness/min`` (a :class:`~jaxtrainer.metrics.Min`) over the real members
        whose fitness is valid (finite), and ``fitness/invalid`` (a
        :class:`~jaxtrainer.metrics.Sum`): how many real members were not. A
        generation of replicated fitness in which no member is valid reports
        ``fitness/mean`` NaN, so :class:`~jaxtrainer.callbacks.NaNGuard` stops a
        run whose every member failed, and only such a run.

        Args:
          fitness: without ``valid``, every member's fitness, replicated (``[P]``
            or ``[P_pad]``; padding is left out; the mean is a plain scalar, the
            same on every device); with ``valid``, this device's members' fitness
            ``[L]``.
          valid: ``bool[L]``: which of this device's values count (e.g. the
            finite ones); padding members never do. The Trainer pools the devices.
        """
        if valid is None:
            real = self.unpad(jnp.asarray(fitness).astype(jnp.float32))
            ok = jnp.isfinite(real)
            safe = jnp.where(ok, real, 0.0)
            mean = jnp.sum(safe) / jnp.maximum(jnp.sum(ok), 1)
            # replicated: device 0 alone counts, the Trainer sums over devices
            first = axis_index(self.axis_names) == 0
            return {"fitness/mean": jnp.where(jnp.any(ok), mean, jnp.nan),
                    "fitness/max": Max.of(safe, ok), "fitness/min": Min.of(safe, ok),
                    "fitness/invalid": Sum.of(jnp.where(first, jnp.sum(~ok), 0)
                                              .astype(jnp.float32))}
        real = self.mask()
        valid = real & valid & jnp.isfinite(fitness)
        safe = jnp.where(valid, fitness, 0.0)
        return {"fitness/mean": Mean.of(safe, valid), "fitness/max": Max.of(safe, valid),
                "fitness/min": Min.of(safe, valid),
                "fitness/invalid": Sum.of((real & ~valid).astype(jnp.float32))}
