"""State layout: which state leaves are per-device and which are replicated.

The rule, in one line: **a state leaf is per-device when ``init_state`` computes
it from the device (its key from** :func:`jaxtrainer.distributed.fold_in_device`
**or** :func:`jaxtrainer.distributed.axis_index` **) or sizes it with**
:func:`jaxtrainer.distributed.local_size` **(its shape depends on the device
count); every other leaf is replicated, and every training step must keep it
identical on every device.**

Per-device leaves are sharded on their leading axis (one logical array whose
leading axis is the devices' shares, concatenated), so a checkpoint holds one
logical copy and resumes on any device count that splits it; a per-device
scalar gains a leading axis of one per device. Replicated leaves are stored
once. The strategies (:class:`~jaxtrainer.strategies.Strategy`) infer the
layout by tracing ``init_state`` and check every traced ``training_step``
against it with :mod:`jaxtrainer.strategies.dependence`.

A module with ``global_view = True`` sees global arrays, and XLA partitions its
compiled step: there a leaf is split on its leading axis when that axis has the
module's ``num_envs`` entries and divides over the devices (:func:`infer_global`),
a choice of speed that never changes values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from jax.sharding import PartitionSpec as P

from jaxtrainer.strategies.dependence import Axes


@dataclass(frozen=True)
class LeafLayout:
    """How one state leaf is laid out: replicated, or sharded on its leading axis.

    ``expanded``: the per-device value is a scalar, so it gains a leading axis of
    size 1 per device (``num_devices`` globally).
    """

    sharded: bool
    expanded: bool = False


def is_layout(x: Any) -> bool:
    """Whether ``x`` is a :class:`LeafLayout` (the leaf test of layout trees)."""
    return isinstance(x, LeafLayout)


def path_str(path: Any) -> str:
    """A pytree path as errors print it (``['params']['w']``; ``<root>`` for the root)."""
    return jax.tree_util.keystr(path) or "<root>"


def infer(deps: Any, shapes: Any, other_shapes: Any | None, data_axes: tuple[str, ...]) -> Any:
    """The layout of a state, leaf by leaf.

    Args:
      deps: per leaf, the mesh axes ``init_state``'s value depends on
        (:func:`jaxtrainer.strategies.dependence.tree_dependence`).
      shapes: per leaf, its per-device shape on this strategy's devices
        (``jax.ShapeDtypeStruct`` leaves).
      other_shapes: the same state's per-device shapes traced for another
        device count, or None where that trace was not possible (then only
        ``deps`` decide).
      data_axes: the mesh axes global sizes are split over.

    Returns:
      A pytree of :class:`LeafLayout` shaped like the state.
    """
    axes = frozenset(data_axes)
    other = other_shapes if other_shapes is not None else shapes

    def leaf(dep: Axes, shape: Any, other_shape: Any) -> LeafLayout:
        sharded = bool(dep & axes) or tuple(shape.shape) != tuple(other_shape.shape)
        return LeafLayout(sharded, sharded and len(shape.shape) == 0)

    return jax.tree.map(leaf, deps, shapes, other)


def infer_global(shapes: Any, num_envs: int | None, num_devices: int) -> Any:
    """The layout of a ``global_view`` module's state, leaf by leaf.

    Args:
      shapes: per leaf, its global shape (``jax.ShapeDtypeStruct`` leaves).
      num_envs: the module's ``num_envs`` (None: every leaf replicated).
      num_devices: the devices the split axis is divided over.

    Returns:
      A pytree of :class:`LeafLayout`: sharded where the leaf's leading axis has
      ``num_envs`` entries and ``num_devices`` divides it, replicated elsewhere.
    """
    def leaf(shape: Any) -> LeafLayout:
        dims = tuple(shape.shape)
        return LeafLayout(bool(num_envs) and len(dims) > 0 and dims[0] == num_envs
                          and dims[0] % num_devices == 0)

    return jax.tree.map(leaf, shapes)


def input_dependence(layout: Any, data_axes: tuple[str, ...]) -> Any:
    """Per leaf, the axes a state laid out as ``layout`` varies over (the data
    axes for a sharded leaf, none for a replicated one)."""
    axes = frozenset(data_axes)
    return jax.tree.map(lambda lay: axes if lay.sharded else frozenset(), layout,
                        is_leaf=is_layout)


def check_replicated(deps: Any, layout: Any, where: str) -> None:
    """Raise where ``where`` (a step, e.g. ``MyAlgo.training_step``) returns a
    replicated leaf that it made differ between devices.

    ``deps``: per leaf of the returned state, the axes it depends on.

    Raises:
      ValueError: naming the first such leaf (and up to three more), the axes
        and the fixes.
    """
    bad: list[tuple[str, Axes]] = []

    def check(path, lay, dep):
        if not lay.sharded and dep:
            bad.append((path_str(path), dep))

    jax.tree_util.tree_map_with_path(check, layout, deps, is_leaf=is_layout)
    if not bad:
        return
    (leaf, dep), others = bad[0], [p for p, _ in bad[1:]]
    if others:
        leaf += (f" (and {len(others)} more: {', '.join(others[:3])}"
                 f"{', ...' if len(others) > 3 else ''})")
    raise ValueError(
        f"state leaf {leaf} is replicated (init_state builds it without the "
        f"device's key or index, and its shape does not depend on the device count) but "
        f"{where} makes it differ between devices (it depends on per-device values along "
        f"{sorted(dep)}). Average per-device values with jaxtrainer.distributed.pmean, "
        "e.g. grads = pmean(jax.grad(loss)(params)), or use "
        "jaxtrainer.distributed.gradient_update. If the leaf holds per-device data (env "
        "states, a replay buffer), make init_state build it per device: from "
        "jaxtrainer.distributed.fold_in_device(key), or sized with "
        "jaxtrainer.distributed.local_size. If the difference is noise drawn from the step "
        "key that every device should draw alike (a perturbation of replicated "
        "parameters), set step_key_per_device = False on the module: training_step then "
        "gets the same key on every device.")


def check_structure(state: Any, layout: Any, where: str) -> None:
    """Raise ValueError when ``state``'s tree structure is not ``layout``'s
    (``init_state``'s), showing both."""
    want = jax.tree.structure(layout, is_leaf=is_layout)
    got = jax.tree.structure(state)
    if want != got:
        raise ValueError(
            f"{where} returned a state whose structure differs from init_state's:\n"
            f"  init_state: {want}\n  {where}: {got}"
        )


def specs(layout: Any, data_axes: tuple[str, ...]) -> Any:
    """``PartitionSpec`` per leaf: the leading axis over ``data_axes`` when
    sharded, ``P()`` when replicated."""
    spec = P(data_axes if len(data_axes) > 1 else data_axes[0])
    return jax.tree.map(lambda lay: spec if lay.sharded else P(), layout, is_leaf=is_layout)


def expand(state: Any, layout: Any) -> Any:
    """Per-device scalars of ``state`` given their leading axis of one."""
    return jax.tree.map(lambda lay, x: x[None] if lay.expanded else x, layout, state,
                        is_leaf=is_layout)


def squeeze(state: Any, layout: Any) -> Any:
    """The inverse of :func:`expand`."""
    return jax.tree.map(lambda lay, x: x[0] if lay.expanded else x, layout, state,
                        is_leaf=is_layout)
