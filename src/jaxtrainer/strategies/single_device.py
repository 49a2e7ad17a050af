"""One device."""

from __future__ import annotations

import jax

from jaxtrainer._arguments import ArgumentError
from jaxtrainer.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    """Run on one local device (``devices``: ``"auto"`` or 1 = the first local
    device, ``[i]`` = local device ``i``, or a one-element list of devices).
    Collectives are over a 1-device axis, so ``pmean`` is exact and free."""

    name = "single"

    def select_devices(self) -> list[jax.Device]:
        arg = self._devices_arg
        if isinstance(arg, int) and arg != 1:
            raise ArgumentError("devices", arg, ": strategy 'single' uses exactly 1 device")
        if isinstance(arg, list) and len(arg) != 1:
            raise ArgumentError("devices", arg,
                                f": strategy 'single' uses exactly 1 device, got {len(arg)}")
        return self._requested(jax.local_devices())[:1]
