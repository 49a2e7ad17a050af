"""Shared helpers of the metric-monitoring callbacks."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable


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


def warn_unseen(owner: str, monitored: Iterable[str], seen: set[str]) -> None:
    """Warn (``UserWarning``) at the end of training when a monitored metric name
    never appeared in the metrics ``seen`` (a typo, or an evaluation metric of a
    run that never evaluated), listing the names there were."""
    missing = sorted(set(monitored) - seen)
    if seen and missing:
        warnings.warn(f"{owner}: {missing} never appeared in the metrics, so it did not act on "
                      f"them; the metrics were: {', '.join(sorted(seen))}",
                      UserWarning, stacklevel=3)


def is_finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))
