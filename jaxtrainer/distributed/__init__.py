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
    pmax,
    pmean,
    pmin,
    psum,
    varying_axes,
)
from jaxtrainer.distributed.gradients import gradient_update, local_copy
from jaxtrainer.distributed.keys import fold_in_device, split_key_to_devices
from jaxtrainer.distributed.population import (
    gather_members,
    local_members,
    pad_population,
    population_size,
    shmap_map,
    shmap_vmap,
    tree_device_put,
)

__all__ = [
    "AXIS_NAME",
    "axis_index",
    "axis_size",
    "bound_axes",
    "fold_in_device",
    "gather_members",
    "gradient_update",
    "local_copy",
    "local_members",
    "local_size",
    "pad_population",
    "pmax",
    "pmean",
    "pmin",
    "population_size",
    "psum",
    "shmap_map",
    "shmap_vmap",
    "split_key_to_devices",
    "tree_device_put",
    "varying_axes",
]
