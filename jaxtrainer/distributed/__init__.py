"""Cross-device helpers for code that runs inside ``training_step``.

All of them are no-ops (or return trivial values) outside a mapped axis, so a
module written with them runs under every strategy.

Code written against ``evorl.distributed`` runs with its import changed to this
package: :data:`PMAP_AXIS_NAME`, :func:`get_global_ranks` and
:func:`is_dist_initialized` are EvoRL's names for :data:`AXIS_NAME`,
:func:`global_ranks` and :func:`is_distributed`; :func:`split_key_to_devices`
and :func:`pmean`/:func:`psum`/:func:`pmax`/:func:`pmin` take the arguments
EvoRL's versions take; and EvoRL's call forms of :func:`gradient_update`,
:func:`loss_and_pgrad`, :func:`agent_gradient_update`, :func:`shmap_vmap`,
:func:`shmap_map` and :func:`tree_device_put` are those of
:mod:`jaxtrainer.compat.evorl`, exported here under EvoRL's names: where a name
is jaxtrainer's too, the function takes both forms and hands jaxtrainer's to
the core function (:mod:`jaxtrainer.distributed.gradients`,
:mod:`jaxtrainer.distributed.population`).
"""

# EvoRL's names, both forms where the name is jaxtrainer's too (after the core modules)
from jaxtrainer.compat.evorl import (  # noqa: E402
    agent_gradient_update,
    gradient_update,
    loss_and_pgrad,
    shmap_map,
    shmap_vmap,
    tree_device_put,
)
from jaxtrainer.distributed.axis import (
    AXIS_NAME,
    PMAP_AXIS_NAME,
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
from jaxtrainer.distributed.gradients import local_copy
from jaxtrainer.distributed.keys import fold_in_device, split_key_to_devices
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
    get_global_ranks,
    global_ranks,
    initialize,
    is_dist_initialized,
    is_distributed,
    process_count,
    process_index,
)

__all__ = [
    "AXIS_NAME",
    "MemberLayout",
    "PMAP_AXIS_NAME",
    "agent_gradient_update",
    "axis_index",
    "axis_size",
    "barrier",
    "bound_axes",
    "broadcast_from_zero",
    "fold_in_device",
    "gather_members",
    "get_global_ranks",
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
    "per_device",
    "to_varying",
    "tree_device_put",
    "tree_varying_axes",
    "vary_like",
    "varying_axes",
    "without_vma_check",
]
