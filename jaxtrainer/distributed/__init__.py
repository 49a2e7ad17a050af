"""Cross-device helpers for code that runs inside ``training_step``.

All of them are no-ops (or return trivial values) outside a mapped axis, so a
module written with them runs under every strategy.
"""

from jaxtrainer.distributed.axis import (
    AXIS_NAME,
    axis_index,
    axis_size,
    bound_axes,
    local_size,
    member_scope,
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
from jaxtrainer.distributed.gradients import gradient_update, local_copy
from jaxtrainer.distributed.keys import fold_in_device, split_key_to_devices
from jaxtrainer.distributed.members import (
    MemberLayout,
    gather_members,
    local_members,
    pad_population,
    population_size,
)
from jaxtrainer.distributed.population import shmap_map, shmap_vmap, tree_device_put
from jaxtrainer.distributed.process import (
    barrier,
    broadcast_from_zero,
    global_ranks,
    initialize,
    is_distributed,
    process_count,
    process_index,
)

__all__ = [
    "AXIS_NAME",
    "MemberLayout",
    "axis_index",
    "axis_size",
    "barrier",
    "bound_axes",
    "broadcast_from_zero",
    "fold_in_device",
    "gather_members",
    "global_ranks",
    "gradient_update",
    "initialize",
    "is_distributed",
    "local_copy",
    "local_members",
    "local_size",
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
    "to_varying",
    "tree_device_put",
    "tree_varying_axes",
    "vary_like",
    "varying_axes",
    "without_vma_check",
]
