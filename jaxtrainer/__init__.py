"""jaxtrainer: train RL agents and evolving populations in JAX on any device layout.

The names below are imported on first use (:pep:`562`): ``import jaxtrainer``
imports no JAX, so a command can take Ctrl-C from its first line
(:mod:`jaxtrainer.startup`) before the heavy imports start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxtrainer import checkpoint, distributed, metrics, strategies
    from jaxtrainer.callbacks import (
        Callback,
        EarlyStopping,
        LearningRateMonitor,
        ModelCheckpoint,
        NaNGuard,
        NonFiniteError,
        RichProgressBar,
        ThroughputMonitor,
        Timer,
    )
    from jaxtrainer.loggers import CSVLogger, TensorBoardLogger, WandbLogger
    from jaxtrainer.metrics import Last, Max, Mean, Min, Sum
    from jaxtrainer.module import Module, PopulationModule
    from jaxtrainer.policy import Policy, RecurrentPolicy, load_policy
    from jaxtrainer.population import PopulationTrainer
    from jaxtrainer.strategies import PmapStrategy, ShardMapStrategy, SingleDeviceStrategy, Strategy
    from jaxtrainer.trainer import Preempted, Trainer

_WHERE = {
    "Callback": "jaxtrainer.callbacks", "EarlyStopping": "jaxtrainer.callbacks",
    "LearningRateMonitor": "jaxtrainer.callbacks", "ModelCheckpoint": "jaxtrainer.callbacks",
    "NaNGuard": "jaxtrainer.callbacks", "NonFiniteError": "jaxtrainer.callbacks",
    "RichProgressBar": "jaxtrainer.callbacks", "ThroughputMonitor": "jaxtrainer.callbacks",
    "Timer": "jaxtrainer.callbacks",
    "CSVLogger": "jaxtrainer.loggers", "TensorBoardLogger": "jaxtrainer.loggers",
    "WandbLogger": "jaxtrainer.loggers",
    "Last": "jaxtrainer.metrics", "Max": "jaxtrainer.metrics", "Mean": "jaxtrainer.metrics",
    "Min": "jaxtrainer.metrics", "Sum": "jaxtrainer.metrics",
    "Module": "jaxtrainer.module", "PopulationModule": "jaxtrainer.module",
    "Policy": "jaxtrainer.policy", "RecurrentPolicy": "jaxtrainer.policy",
    "load_policy": "jaxtrainer.policy",
    "PopulationTrainer": "jaxtrainer.population",
    "PmapStrategy": "jaxtrainer.strategies", "ShardMapStrategy": "jaxtrainer.strategies",
    "SingleDeviceStrategy": "jaxtrainer.strategies", "Strategy": "jaxtrainer.strategies",
    "Preempted": "jaxtrainer.trainer", "Trainer": "jaxtrainer.trainer",
}
"""Where each public name lives; submodules (``jaxtrainer.checkpoint``, ...) import as usual."""

__version__ = "0.2.0"

__all__ = [
    "CSVLogger",
    "Callback",
    "Last",
    "Max",
    "Mean",
    "Min",
    "ModelCheckpoint",
    "Module",
    "PmapStrategy",
    "PopulationModule",
    "RichProgressBar",
    "SingleDeviceStrategy",
    "Strategy",
    "Sum",
    "TensorBoardLogger",
    "Trainer",
    "distributed",
    "metrics",
    "strategies",
    "EarlyStopping",
    "LearningRateMonitor",
    "NaNGuard",
    "NonFiniteError",
    "Preempted",
    "ThroughputMonitor",
    "Timer",
    "WandbLogger",
    "checkpoint",
    "PopulationTrainer",
    "ShardMapStrategy",
    "Policy",
    "RecurrentPolicy",
    "load_policy",
]


def __getattr__(name: str) -> Any:
    """A public name (imported on first use) or a submodule (``jt.checkpoint``)."""
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    if name.startswith("_"):
        raise AttributeError(f"module 'jaxtrainer' has no attribute {name!r}")
    try:
        return importlib.import_module(f"jaxtrainer.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"jaxtrainer.{name}":
            raise
        raise AttributeError(f"module 'jaxtrainer' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
