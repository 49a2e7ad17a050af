"""EvoRL's communication helpers (``evorl.distributed.comm``), with EvoRL's
names and arguments.

* :func:`pmean`, :func:`psum`, :func:`pmax`, :func:`pmin`: jaxtrainer's own
  (``axis_name=None`` returns the value, as EvoRL's do).
* :func:`all_gather`, :func:`unpmap`: EvoRL's two gather helpers, ``None`` axis
  name meaning one device.
* :func:`split_key_to_devices`: also with EvoRL's list of devices.
* :func:`is_dist_initialized`, :func:`get_process_id`, :func:`get_global_ranks`:
  EvoRL's names for :func:`~jaxtrainer.distributed.is_distributed`,
  :func:`~jaxtrainer.distributed.process_index` and
  :func:`~jaxtrainer.distributed.global_ranks`, in EvoRL's return forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtrainer.aliases import warn_changed
from jaxtrainer.distributed import keys
from jaxtrainer.distributed._axis import (
    AXIS_NAME,
    AxisName,
    axis_tuple,
    bound_axes,
    pmax,
    pmean,
    pmin,
    psum,
)
from jaxtrainer.distributed._process import global_ranks, is_distributed, process_index

__all__ = ["all_gather", "get_global_ranks", "get_process_id", "is_dist_initialized", "pmax",
           "pmean", "pmin", "psum", "split_key_to_devices", "unpmap"]

# jax.lax.all_gather's keyword arguments, which EvoRL's all_gather passes on
_ALL_GATHER_KWARGS = ("axis", "tiled", "axis_index_groups")


def _names(what: str, axis_name: Any) -> tuple[str, ...]:
    """``axis_name`` (a name or a sequence of names) as a tuple.

    Raises:
      ValueError: it is neither.
    """
    names = axis_tuple(axis_name) if isinstance(axis_name, (str, Sequence)) else ()
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what}: axis_name={axis_name!r}: expected a mesh axis name, a "
                         "sequence of names, or None (one device)")
    return names


def unpmap(tree: Any, axis_name: AxisName | None = None) -> Any:
    """The first device's copy of a ``jax.pmap`` output (EvoRL's ``unpmap``).

    Args:
      tree: a pytree of arrays laid out as ``jax.pmap(..., out_axes=0)`` returns
        them, every leaf ``[num_devices, ...]``.
      axis_name: the pmap axis the tree came from (EvoRL passes its workflow's
        ``pmap_axis_name``), or ``None``: the tree did not come from a pmap
        (one device) and is returned as it is.

    Returns:
      ``tree`` with every leaf ``x`` replaced by ``x[0]`` (``[...]``: the
      leading device axis dropped); ``tree`` itself when ``axis_name`` is
      ``None``. The name is not looked up: this runs on the host, outside the
      mapped computation.

    Raises:
      ValueError: ``axis_name`` is not a name, names or ``None``; a leaf is a
        scalar (no leading device axis).
    """
    if axis_name is None:
        return tree
    _names("unpmap", axis_name)

    def first(x: Any) -> Any:
        if not np.ndim(x):
            raise ValueError(f"unpmap: a leaf of shape () ({x!r}) has no leading device axis; "
                             f"expected every leaf [num_devices, ...] as jax.pmap returns it, "
                             "or axis_name=None for a value that did not come from a pmap")
        return x[0]

    return jax.tree.map(first, tree)


def all_gather(x: Any, axis_name: AxisName | None = None, **kwargs: Any) -> Any:
    """Every device's ``x``, stacked: ``jax.lax.all_gather`` (EvoRL's ``all_gather``).

    Args:
      x: a pytree of arrays, each ``[...]`` on this device.
      axis_name: the mesh axis (or axes) to gather over; ``None`` returns ``x``
        unchanged (EvoRL's one-device case).
      **kwargs: ``jax.lax.all_gather``'s ``axis`` (where the new device axis
        goes, default 0), ``tiled`` (concatenate along ``axis`` instead of
        stacking, default False) and ``axis_index_groups``.

    Returns:
      each leaf as ``jax.lax.all_gather`` returns it over the bound axes of
      ``axis_name``: ``[n, ...]`` for ``n`` devices (``tiled=True``: ``x``'s
      shape with dimension ``axis`` ``n`` times as long). Axes that are not
      bound, or hidden by :func:`~jaxtrainer.distributed.member_scope`, count
      as one device, so outside a mapped computation the result is
      ``x`` with a new axis of size 1 at ``axis`` (``x`` itself when tiled),
      the same shape one device gets inside ``jax.pmap``.

    Raises:
      ValueError: ``axis_name`` is not a name, names or ``None``; a keyword
        other than those three.
    """
    if axis_name is None:
        return x
    names = bound_axes(_names("all_gather", axis_name))
    unknown = sorted(set(kwargs) - set(_ALL_GATHER_KWARGS))
    if unknown:
        raise ValueError(f"all_gather: unexpected keyword argument(s) {unknown}; expected "
                         f"{list(_ALL_GATHER_KWARGS)} (those of jax.lax.all_gather)")
    if names:
        return jax.lax.all_gather(x, names if len(names) > 1 else names[0], **kwargs)
    if kwargs.get("tiled", False):
        return x
    return jax.tree.map(lambda leaf: jnp.expand_dims(leaf, kwargs.get("axis", 0)), x)


def split_key_to_devices(key: jax.Array, devices: int | Sequence[jax.Device]) -> jax.Array:
    """EvoRL's ``split_key_to_devices(key, devices)``: one key per device, as
    :func:`jaxtrainer.distributed.device_keys` makes them, placed on the devices.
    (An int ``devices``, jaxtrainer's old form, is deprecated: that is
    :func:`~jaxtrainer.distributed.device_keys`.)

    Args:
      key: a typed key (``jax.random.key``) or a raw ``uint32[2]`` key
        (``jax.random.PRNGKey``); the rows have the same kind.
      devices: a sequence of distinct ``jax.Device`` (EvoRL's form): one row per
        device, row ``d`` placed on ``devices[d]`` (sharded over a 1-D mesh of
        ``devices``), ready for ``jax.pmap`` over them; or a positive int, the
        number of rows (unplaced; deprecated). Row ``d`` is ``fold_in(key, d)``, what the
        Trainer's device ``d`` draws (EvoRL's rows are ``jax.random.split``'s:
        other keys, the same independence).

    Returns:
      ``key[len(devices)]`` (or ``key[devices]``).

    Raises:
      ValueError: ``devices`` is neither a positive int nor a non-empty sequence
        of distinct devices.
    """
    if isinstance(devices, int) or not isinstance(devices, Sequence) or isinstance(devices, str):
        warn_changed("jaxtrainer.distributed.split_key_to_devices(key, num_devices)",
                     "jaxtrainer.distributed.device_keys(key, num_devices)")
        return keys.device_keys(key, devices)
    listed = list(devices)
    if not listed or not all(isinstance(d, jax.Device) for d in listed) \
            or len(set(listed)) != len(listed):
        raise ValueError(f"split_key_to_devices: devices={devices!r}: expected a non-empty "
                         "sequence of distinct jax.Device, or a positive int")
    rows = keys.device_keys(key, len(listed))
    mesh = Mesh(np.asarray(listed, dtype=object), (AXIS_NAME,))
    return jax.device_put(rows, NamedSharding(mesh, PartitionSpec(AXIS_NAME)))


def is_dist_initialized() -> bool:
    """EvoRL's name for :func:`~jaxtrainer.distributed.is_distributed`: True when
    ``jax.distributed`` is initialised in this process."""
    return is_distributed()


def get_process_id() -> int:
    """EvoRL's name for :func:`~jaxtrainer.distributed.process_index`: this
    process's index, ``0 .. process_count - 1`` (0 in a single process)."""
    return process_index()


def get_global_ranks() -> jax.Array:
    """EvoRL's ``get_global_ranks``: :func:`~jaxtrainer.distributed.global_ranks`
    as a device array.

    Returns:
      ``int32[num_local_devices]``: the global ranks of this process's devices
      (their positions in ``jax.devices()``), element ``i`` placed on this
      process's ``i``-th device (sharded over a 1-D mesh of them), ready for
      ``jax.pmap``. With 2 processes of 2 devices: ``[0, 1]`` on process 0 and
      ``[2, 3]`` on process 1.
    """
    devices = list(jax.devices())
    me = jax.process_index()
    local = [d for d in devices if d.process_index == me]
    mesh = Mesh(np.asarray(local, dtype=object), (AXIS_NAME,))
    return jax.device_put(np.asarray(global_ranks(devices), np.int32),
                          NamedSharding(mesh, PartitionSpec(AXIS_NAME)))
