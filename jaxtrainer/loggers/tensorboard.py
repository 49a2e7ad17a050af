"""TensorBoardLogger: event files written with tensorboardX."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from jaxtrainer.loggers.base import Logger

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class TensorBoardLogger(Logger):
    """Scalars to TensorBoard event files in ``<log_dir>/tensorboard`` (x axis:
    global training steps), hyperparameters once as an ``hparams`` entry and a
    text summary.

    Args:
      save_dir: directory of the event files; default ``<trainer.log_dir>/tensorboard``.
      flush_secs: seconds between background flushes of the event file.
    """

    def __init__(self, save_dir: str | os.PathLike | None = None, flush_secs: int = 30):
        super().__init__()
        self.save_dir = save_dir
        self.flush_secs = flush_secs
        self.writer = None
        self.log_dir: str | None = None

    def start(self, trainer: Trainer, module: Module) -> None:
        from tensorboardX import SummaryWriter

        self.log_dir = os.fspath(self.save_dir or os.path.join(trainer.log_dir, "tensorboard"))
        self.writer = SummaryWriter(self.log_dir, flush_secs=self.flush_secs)

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        if params:
            text = "\n".join(f"| {k} | {v} |" for k, v in params.items())
            self.writer.add_text("hparams", "| name | value |\n|---|---|\n" + text, 0)

    def log_metrics(self, metrics: dict[str, float | int], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)

    def finalize(self, status: str) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None
