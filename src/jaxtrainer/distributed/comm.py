"""EvoRL's ``evorl.distributed.comm`` at jaxtrainer's path: ``from
jaxtrainer.distributed.comm import psum, unpmap`` where EvoRL's code writes
``from evorl.distributed.comm import psum, unpmap``. The functions are
:mod:`jaxtrainer.compat.evorl.comm`'s."""

from jaxtrainer.distributed.forwarding import forward

EVORL_NAMES = (
    "all_gather", "get_global_ranks", "get_process_id", "is_dist_initialized", "pmax",
    "pmean", "pmin", "psum", "split_key_to_devices", "unpmap")
"""EvoRL's names at this path."""
__all__ = list(EVORL_NAMES)

__getattr__, __dir__ = forward(
    "jaxtrainer.compat.evorl.comm", [n for n in __all__ if n not in globals()], __name__)
