"""TensorBoardLogger: event files written with tensorboardX."""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any

from jaxtrainer.loggers.base import Logger

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class TensorBoardLogger(Logger):
    """Scalars to TensorBoard event files in ``<log_dir>/tensorboard`` (x axis:
    global training steps), hyperparameters once per run (at the start of a
    fresh ``fit``, not again on resume) as a TensorBoard HParams entry and a
    markdown text table.

    Every value is a Python number (a logged value is never an array). The event file is
    flushed and closed on every exit path of ``fit`` (success, exception,
    preemption). A resumed run opens the writer with ``purge_step`` = the
    checkpoint's step, so TensorBoard hides events logged after that step by the
    interrupted run.

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

    def reset(self) -> None:
        self.writer, self.log_dir = None, None

    def start(self, trainer: Trainer, module: Module) -> None:
        from tensorboardX import SummaryWriter

        self.log_dir = os.fspath(self.save_dir or os.path.join(trainer.log_dir, "tensorboard"))
        resumed = trainer.global_step > 0
        # tensorboardX names event files by the second they were opened; a resume
        # opened within the same second as the run it continues would truncate that
        # run's file. A nanosecond suffix keeps the names unique and chronological.
        self.writer = SummaryWriter(self.log_dir, flush_secs=self.flush_secs,
                                    purge_step=trainer.global_step + 1 if resumed else None,
                                    filename_suffix=f".{time.time_ns()}")
        self._log_hparams = not resumed

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        if not params or not self._log_hparams:
            return
        from tensorboardX.summary import hparams

        text = "\n".join(f"| {k} | {v} |" for k, v in params.items())
        self.writer.add_text("hparams", "| name | value |\n|---|---|\n" + text, 0)
        # The HParams plugin's experiment + session start; a non-finite number
        # (e.g. max_grad_norm=inf: no clipping) goes in as text, which the plugin
        # shows as written, instead of a warning about a non-finite tensor.
        params = {k: str(v) if isinstance(v, float) and not math.isfinite(v) else v
                  for k, v in params.items()}
        for summary in hparams(params, {}):
            self.writer.file_writer.add_summary(summary)
        self.writer.flush()

    def log_metrics(self, metrics: dict[str, float | int], step: int) -> None:
        # One event per step holding every scalar (TensorBoard reads each value
        # as its own tag), not one event per scalar: a tenth of the host time.
        from tensorboardX.proto.summary_pb2 import Summary

        if metrics:
            values = [Summary.Value(tag=k, simple_value=float(v)) for k, v in metrics.items()]
            self.writer.file_writer.add_summary(Summary(value=values), step)

    def finalize(self, status: str) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None
