"""jaxtrainer: train RL agents and evolving populations in JAX on any device layout."""

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
