"""The names ``jaxtrainer`` exports, each imported on first use (``lazy_loader.attach_stub``)."""

from . import (
    algorithms,
    callbacks,
    checkpoint,
    distributed,
    envs,
    loggers,
    metrics,
    population,
    strategies,
)
from .callbacks import (  # noqa: F401 (exported: __all__ += callbacks.__all__ below)
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    NaNGuard,
    NonFiniteError,
    ProfilerCallback,
    RichProgressBar,
    ThroughputMonitor,
    Timer,
    VideoCallback,
)
from .inference.saved_run import load_policy
from .loggers import CSVLogger, TensorBoardLogger, WandbLogger
from .metrics import Last, Max, Mean, Min, Sum
from .module import Module, PopulationModule
from .policy import Policy, RecurrentPolicy
from .population import PopulationTrainer
from .strategies import PmapStrategy, ShardMapStrategy, SingleDeviceStrategy, Strategy
from .trainer import Preempted, Trainer

__version__: str

__all__ = [
    "algorithms",
    "callbacks",
    "checkpoint",
    "distributed",
    "envs",
    "loggers",
    "metrics",
    "population",
    "strategies",
    "CSVLogger",
    "TensorBoardLogger",
    "WandbLogger",
    "Last",
    "Max",
    "Mean",
    "Min",
    "Sum",
    "Module",
    "PopulationModule",
    "Policy",
    "RecurrentPolicy",
    "load_policy",
    "PopulationTrainer",
    "PmapStrategy",
    "ShardMapStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "Preempted",
    "Trainer",
]
__all__ += callbacks.__all__  # the built-in callbacks, as jaxtrainer.callbacks lists them
