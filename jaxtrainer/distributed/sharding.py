"""EvoRL's ``evorl.distributed.sharding`` at jaxtrainer's path: ``shmap_vmap``,
``shmap_map`` and ``tree_device_put`` in both forms, from
:mod:`jaxtrainer.compat.evorl.sharding` (jaxtrainer's own forms only:
:mod:`jaxtrainer.distributed.population`)."""

from jaxtrainer.compat.evorl.sharding import shmap_map, shmap_vmap, tree_device_put

__all__ = ["shmap_map", "shmap_vmap", "tree_device_put"]
