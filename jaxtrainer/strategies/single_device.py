"""One device."""

from __future__ import annotations

import jax

from jaxtrainer.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    """Run on one device (``devices``: ``"auto"`` = ``jax.devices()[0]``, an
    index-free int 1, or a one-element list). Collectives are over a 1-device
    axis, so ``pmean`` is exact and free."""

    name = "single"

    def select_devices(self) -> list[jax.Device]:
        arg = self._devices_arg
        if isinstance(arg, int) and arg != 1:
            raise ValueError(f"devices={arg}: strategy 'single' uses exactly 1 device")
        if not isinstance(arg, (int, str)) and len(list(arg)) != 1:
            raise ValueError(
                f"devices={list(arg)}: strategy 'single' uses exactly 1 device, got {len(list(arg))}"
            )
        return self._requested(jax.local_devices())[:1]
