"""Cross-device helpers for code that runs inside ``training_step``.

All of them are no-ops (or return trivial values) outside a mapped axis, so a
module written with them runs under every strategy.

Code written against EvoRL's ``evorl.distributed`` runs with its imports
changed to ``jaxtrainer.distributed``: every name EvoRL's package exports is
here, and EvoRL's submodules are at the same paths
(``jaxtrainer.distributed.comm``, ``.gradients``, ``.sharding``).

* EvoRL's names for jaxtrainer's: :data:`PMAP_AXIS_NAME` (:data:`AXIS_NAME`),
  :func:`get_global_ranks` (:func:`global_ranks`, as a device array),
  :func:`is_dist_initialized` (:func:`is_distributed`), :func:`get_process_id`
  (:func:`process_index`).
* EvoRL's own: :func:`unpmap` (the first device's copy of a ``jax.pmap``
  output), :func:`all_gather`, :data:`POP_AXIS_NAME` (``"POP"``),
  :func:`loss_and_pgrad`, :func:`agent_gradient_update`.
* Both forms, told apart by the arguments: :func:`gradient_update`,
  :func:`shmap_vmap`, :func:`shmap_map`, :func:`tree_device_put`,
  :func:`split_key_to_devices`; jaxtrainer's form goes to the core function
  (:mod:`jaxtrainer.distributed.gradient_step`,
  :mod:`jaxtrainer.distributed.population`, :mod:`jaxtrainer.distributed.keys`).
* :func:`pmean`, :func:`psum`, :func:`pmax`, :func:`pmin` take EvoRL's
  ``(x, axis_name=None)`` as they are.

The EvoRL names are implemented in :mod:`jaxtrainer.compat.evorl` and loaded
from there on first use, so importing this package does not import them.
"""

from typing import TYPE_CHECKING, Any

from jaxtrainer.distributed.axis import (
    AXIS_NAME,
    axis_index,
    axis_size,
    bound_axes,
    local_size,
    member_scope,
    per_device,
    pmax,
    pmean,
    pmin,
    psum,
    to_varying,
    tree_varying_axes,
    vary_like,
    varying_axes,
    without_vma_check,
)
from jaxtrainer.distributed.gradient_step import local_copy
from jaxtrainer.distributed.keys import fold_in_device
from jaxtrainer.distributed.members import (
    MemberLayout,
    gather_members,
    local_members,
    pad_population,
    population_size,
)
from jaxtrainer.distributed.process import (
    barrier,
    broadcast_from_zero,
    global_ranks,
    initialize,
    is_distributed,
    process_count,
    process_index,
)

if TYPE_CHECKING:
    from jaxtrainer.compat.evorl import (
        PMAP_AXIS_NAME,
        POP_AXIS_NAME,
        agent_gradient_update,
        all_gather,
        get_global_ranks,
        get_process_id,
        gradient_update,
        is_dist_initialized,
        loss_and_pgrad,
        shmap_map,
        shmap_vmap,
        split_key_to_devices,
        tree_device_put,
        unpmap,
    )

EVORL_NAMES = (
    "PMAP_AXIS_NAME",
    "POP_AXIS_NAME",
    "agent_gradient_update",
    "all_gather",
    "get_global_ranks",
    "get_process_id",
    "gradient_update",
    "is_dist_initialized",
    "loss_and_pgrad",
    "shmap_map",
    "shmap_vmap",
    "split_key_to_devices",
    "tree_device_put",
    "unpmap",
)
"""EvoRL's ``evorl.distributed`` names exported here, loaded from
:mod:`jaxtrainer.compat.evorl` on first use (the core never imports it)."""


def __getattr__(name: str) -> Any:
    if name in EVORL_NAMES:
        from jaxtrainer.compat import evorl

        value = getattr(evorl, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EVORL_NAMES))


__all__ = [
    "AXIS_NAME",
    "MemberLayout",
    "PMAP_AXIS_NAME",
    "POP_AXIS_NAME",
    "agent_gradient_update",
    "all_gather",
    "axis_index",
    "axis_size",
    "barrier",
    "bound_axes",
    "broadcast_from_zero",
    "fold_in_device",
    "gather_members",
    "get_global_ranks",
    "get_process_id",
    "global_ranks",
    "gradient_update",
    "initialize",
    "is_dist_initialized",
    "is_distributed",
    "local_copy",
    "local_members",
    "local_size",
    "loss_and_pgrad",
    "member_scope",
    "pad_population",
    "per_device",
    "pmax",
    "pmean",
    "pmin",
    "population_size",
    "process_count",
    "process_index",
    "psum",
    "shmap_map",
    "shmap_vmap",
    "split_key_to_devices",
    "to_varying",
    "tree_device_put",
    "tree_varying_axes",
    "unpmap",
    "vary_like",
    "varying_axes",
    "without_vma_check",
]
