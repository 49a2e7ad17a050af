"""EvoRL's distributed namespace (``evorl.distributed``), for code written against it.

Code written for EvoRL runs with its ``evorl.distributed`` imports changed to
``jaxtrainer.distributed``, which exports every name here at the path EvoRL
gives it: the package (all names below), ``jaxtrainer.distributed.comm``,
``jaxtrainer.distributed.gradients`` and ``jaxtrainer.distributed.sharding``.
The submodules of this package mirror EvoRL's:

* :mod:`.comm`: ``pmean``/``psum``/``pmax``/``pmin(x, axis_name=None)``,
  ``all_gather``, ``unpmap``, ``split_key_to_devices(key, devices)``,
  ``is_dist_initialized``, ``get_process_id``, ``get_global_ranks``.
* :mod:`.gradients`: ``loss_and_pgrad``, ``gradient_update(loss_fn, optimizer,
  pmap_axis_name, has_aux=False)``, ``agent_gradient_update``.
* :mod:`.sharding`: ``shmap_vmap``/``shmap_map(fn, mesh, in_specs, out_specs)``,
  ``tree_device_put(tree, sharding_or_device)``.

Each name takes EvoRL's signature. Where jaxtrainer has its own helper under
another name (``averaged_update``, ``sharded_vmap``, ``sharded_map``,
``shard_tree``, ``device_keys``), a call of EvoRL's name in jaxtrainer's old form
(before 0.2.1 the names took both) still runs with a ``DeprecationWarning``,
until 0.3.0; a call that fits neither is a ValueError naming both.
"""

from jaxtrainer.compat.evorl.comm import (
    all_gather,
    get_global_ranks,
    get_process_id,
    is_dist_initialized,
    pmax,
    pmean,
    pmin,
    psum,
    split_key_to_devices,
    unpmap,
)
from jaxtrainer.compat.evorl.gradients import agent_gradient_update, gradient_update, loss_and_pgrad
from jaxtrainer.compat.evorl.sharding import shmap_map, shmap_vmap, tree_device_put
from jaxtrainer.distributed._axis import AXIS_NAME

PMAP_AXIS_NAME = AXIS_NAME
"""EvoRL's name for the data-parallel axis (``evorl.distributed.PMAP_AXIS_NAME``),
the one ``pmean(grads, axis_name=PMAP_AXIS_NAME)`` averages over. Its value is
jaxtrainer's :data:`~jaxtrainer.distributed.AXIS_NAME` (``"devices"``), not
EvoRL's ``"P"``, so EvoRL code that names the axis through this constant reduces
over the axis every strategy binds (and over its own ``jax.pmap`` axis, which it
names with the same constant)."""

POP_AXIS_NAME = "POP"
"""EvoRL's name for the device axis of its evolutionary workflows
(``evorl.distributed.POP_AXIS_NAME``), with EvoRL's value: EvoRL's code binds
it itself (``jax.pmap(..., axis_name=POP_AXIS_NAME)``) and gathers over it
(:func:`all_gather`); no jaxtrainer strategy binds it."""

__all__ = [
    "PMAP_AXIS_NAME", "POP_AXIS_NAME", "agent_gradient_update", "all_gather", "get_global_ranks",
    "get_process_id", "gradient_update", "is_dist_initialized", "loss_and_pgrad", "pmax", "pmean",
    "pmin", "psum", "shmap_map", "shmap_vmap", "split_key_to_devices", "tree_device_put", "unpmap"]
