"""EvoRL's ``evorl.distributed.comm`` at jaxtrainer's path: ``from
jaxtrainer.distributed.comm import psum, unpmap`` where EvoRL's code writes
``from evorl.distributed.comm import psum, unpmap``. The functions are
:mod:`jaxtrainer.compat.evorl.comm`'s."""

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

__all__ = ["all_gather", "get_global_ranks", "get_process_id", "is_dist_initialized", "pmax",
           "pmean", "pmin", "psum", "split_key_to_devices", "unpmap"]
