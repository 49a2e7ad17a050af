"""Shared helpers of the metric-monitoring callbacks."""

from __future__ import annotations

import math
import warnings


def check_mode(owner: str, monitor: str, mode: str | None, default: str) -> str:
    """Validate ``mode``; warn and use ``default`` when it is None.

    Raises:
      ValueError: ``mode`` is neither ``"max"`` nor ``"min"``.
    """
    if mode is None:
        warnings.warn(f"{owner}(monitor={monitor!r}) has no mode; assuming mode={default!r}. "
                      "Pass mode='max' or mode='min'.", UserWarning, stacklevel=3)
        return default
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r}: expected 'max' or 'min'")
    return mode


def is_finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))
