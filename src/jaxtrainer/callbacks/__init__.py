"""Built-in callbacks."""

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.early_stopping import EarlyStopping
from jaxtrainer.callbacks.lr_monitor import LearningRateMonitor
from jaxtrainer.callbacks.model_checkpoint import ModelCheckpoint
from jaxtrainer.callbacks.nan_guard import NaNGuard, NonFiniteError
from jaxtrainer.callbacks.profiler import ProfilerCallback
from jaxtrainer.callbacks.progress import RichProgressBar
from jaxtrainer.callbacks.throughput import ThroughputMonitor
from jaxtrainer.callbacks.timer import Timer
from jaxtrainer.callbacks.video import VideoCallback

__all__ = [
    "Callback",
    "EarlyStopping",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "NaNGuard",
    "NonFiniteError",
    "ProfilerCallback",
    "RichProgressBar",
    "ThroughputMonitor",
    "Timer",
    "VideoCallback",
]
