"""Loggers are callbacks that write metrics on the global-zero process."""

from jaxtrainer.loggers.base import Logger, to_number
from jaxtrainer.loggers.csv_logger import CSVLogger
from jaxtrainer.loggers.tensorboard import TensorBoardLogger
from jaxtrainer.loggers.wandb import WandbLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger", "WandbLogger", "to_number"]
