"""Cross-device helpers for code that runs inside ``training_step``.

All of them are no-ops (or return trivial values) outside a mapped axis, so a
module written with them runs under every strategy: the collectives
(:func:`pmean`, :func:`psum`, ...), the data-parallel step
(:func:`averaged_update`, :func:`local_copy`), per-device keys
(:func:`fold_in_device`, :func:`device_keys`), member maps over a mesh
(:func:`sharded_vmap`, :func:`sharded_map`, :func:`shard_tree`) and the
processes of a multi-node run (:func:`initialize`, :func:`process_index`, ...).

Code written against EvoRL's ``evorl.distributed`` runs with its imports
changed to ``jaxtrainer.distributed``: every name EvoRL's package exports is
found here with EvoRL's signature, and EvoRL's submodules at the same paths
(``jaxtrainer.distributed.comm``, ``.gradients``, ``.sharding``). They are
:mod:`jaxtrainer.compat.evorl`'s, found here through :mod:`jaxtrainer.aliases`
(loaded on first use: importing this package does not import them). Where
EvoRL's name is also a helper here under another name (EvoRL's
``gradient_update``, ``shmap_vmap``, ``shmap_map``, ``tree_device_put``,
``split_key_to_devices``; jaxtrainer's :func:`averaged_update`,
:func:`sharded_vmap`, :func:`sharded_map`, :func:`shard_tree`,
:func:`device_keys`), a call of EvoRL's name in jaxtrainer's old form still
works with a ``DeprecationWarning`` until 0.3.0.
"""

from typing import TYPE_CHECKING

from jaxtrainer import aliases
from jaxtrainer.distributed._axis import (
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
from jaxtrainer.distributed._gradient_step import averaged_update, local_copy
from jaxtrainer.distributed._members import (
    MemberLayout,
    gather_members,
    local_members,
    pad_population,
    population_size,
)
from jaxtrainer.distributed._population import shard_tree, sharded_map, sharded_vmap
from jaxtrainer.distributed._process import (
    barrier,
    broadcast_from_zero,
    global_ranks,
    initialize,
    is_distributed,
    process_count,
    process_index,
)
from jaxtrainer.distributed.keys import device_keys, fold_in_device

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

__getattr__, __dir__ = aliases.attach(__name__)  # EvoRL's names, on first use

__all__ = [
    "AXIS_NAME",
    "MemberLayout",
    "PMAP_AXIS_NAME",
    "POP_AXIS_NAME",
    "agent_gradient_update",
    "all_gather",
    "averaged_update",
    "axis_index",
    "axis_size",
    "barrier",
    "bound_axes",
    "broadcast_from_zero",
    "device_keys",
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
    "shard_tree",
    "sharded_map",
    "sharded_vmap",
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
