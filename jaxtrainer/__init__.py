"""jaxtrainer: train RL agents and evolving populations in JAX on any device layout."""

from jaxtrainer import distributed, metrics, strategies
from jaxtrainer.callbacks import Callback, ModelCheckpoint, RichProgressBar
from jaxtrainer.loggers import CSVLogger, TensorBoardLogger
from jaxtrainer.metrics import Mean
from jaxtrainer.module import Module, PopulationModule
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy, Strategy
from jaxtrainer.trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "CSVLogger",
    "Callback",
    "Mean",
    "ModelCheckpoint",
    "Module",
    "PmapStrategy",
    "PopulationModule",
    "RichProgressBar",
    "SingleDeviceStrategy",
    "Strategy",
    "TensorBoardLogger",
    "Trainer",
    "distributed",
    "metrics",
    "strategies",
]
