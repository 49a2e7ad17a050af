"""Built-in callbacks."""

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.model_checkpoint import ModelCheckpoint
from jaxtrainer.callbacks.progress import RichProgressBar

__all__ = ["Callback", "ModelCheckpoint", "RichProgressBar"]
