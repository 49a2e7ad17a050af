"""Shared helpers of the metric-monitoring callbacks."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any


def _default_mode(monitor: str) -> str:
    """The mode a metric named ``monitor`` is ranked in when none is given, the
    same for every callback: ``"min"`` for a loss or an error, ``"max"`` for the
    rest (returns, fitness: what RL runs rank on)."""
    name = monitor.lower()
    return "min" if "loss" in name or "error" in name else "max"


def check_mode(owner: str, monitor: str, mode: str | None, default: str | None = None) -> str:
    """Validate ``monitor`` and ``mode``; warn and use ``default`` (:func:`_default_mode`
    of ``monitor`` when ``None``) when ``mode`` is None.

    Raises:
      ValueError: ``monitor`` is not a non-empty string (a metric name), or ``mode``
        is neither ``"max"`` nor ``"min"``.
    """
    if not isinstance(monitor, str) or not monitor:
        raise ValueError(f"{owner}: monitor={monitor!r}: expected a metric name such as "
                         "'eval/episode_return'")
    default = _default_mode(monitor) if default is None else default
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


def refuse_unlogged_evaluation_monitors(trainer: Any, module: Any) -> None:
    """Refuse, before anything is written or compiled, a callback that monitors
    an ``eval/`` metric in a fit that never evaluates.

    ``eval/`` metrics come only from evaluations, so a ``ModelCheckpoint`` ranking
    by one would keep the newest checkpoints instead of the best, and an
    ``EarlyStopping`` on one would never act. A callback monitors ``name`` when
    its ``monitor`` attribute is that string.

    Raises:
      ValueError: such a monitor while ``trainer.eval_every_n_steps`` is None or
        ``module`` defines no evaluation; the message names the callback, the
        metric and the fix.
    """
    if trainer.eval_every_n_steps is not None and module.has_evaluation():
        return
    for cb in trainer.callbacks:
        name = getattr(cb, "monitor", None)
        if not (isinstance(name, str) and name.startswith("eval/")):
            continue
        if trainer.eval_every_n_steps is None:
            raise ValueError(
                f"{type(cb).__name__}(monitor={name!r}): eval/ metrics are logged only by "
                "evaluations and this fit runs none; set eval_every_n_steps "
                "(Trainer(eval_every_n_steps=N), in a recipe trainer.eval_every_n_steps=N)")
        raise ValueError(f"{type(cb).__name__}(monitor={name!r}): {type(module).__name__} defines "
                         "no evaluation_step (nor policy), so eval/ metrics are never logged")


def is_finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))
