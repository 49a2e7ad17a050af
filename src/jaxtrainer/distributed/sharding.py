"""EvoRL's ``evorl.distributed.sharding`` at jaxtrainer's path: ``shmap_vmap``,
``shmap_map`` and ``tree_device_put`` in both forms, from
:mod:`jaxtrainer.compat.evorl.sharding` (jaxtrainer's own forms only:
:mod:`jaxtrainer.distributed.population`)."""

from jaxtrainer.distributed.forwarding import forward

EVORL_NAMES = (
    "shmap_map", "shmap_vmap", "tree_device_put")
"""EvoRL's names at this path."""
__all__ = list(EVORL_NAMES)

__getattr__, __dir__ = forward(
    "jaxtrainer.compat.evorl.sharding", [n for n in __all__ if n not in globals()], __name__)
