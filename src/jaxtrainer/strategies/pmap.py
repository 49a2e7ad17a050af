"""Data parallelism over the devices of this process."""

from __future__ import annotations

import jax

from jaxtrainer.strategies.base import Strategy


class PmapStrategy(Strategy):
    """Replicate parameters and split batches over every local device.

    The classic ``pmap`` data-parallel layout, built the way current JAX builds
    ``pmap`` itself: ``jit`` of ``shard_map`` over a 1-D mesh of the local devices
    named :data:`jaxtrainer.distributed.AXIS_NAME`. Parameters are replicated
    (``PartitionSpec()``), per-device state is sharded on its leading axis, and
    ``jaxtrainer.distributed.pmean`` averages gradients with an all-reduce.

    Args:
      devices: ``"auto"`` (all local devices), an int ``n`` (the first ``n``), a
        list of local device indices (``[0, 2]``) or a list of local devices.
    """

    name = "pmap"

    def select_devices(self) -> list[jax.Device]:
        return self._requested(jax.local_devices())
