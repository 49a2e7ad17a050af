"""TensorBoardLogger: event files written with tensorboardX."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from jaxtrainer.deferred_import import deferred_imports
from jaxtrainer.loggers.base import Logger

TENSORBOARDX_STORAGE = ("boto3",)
"""Modules tensorboardX imports at import time for ``s3://`` log directories
only; imported on first use instead (see :mod:`jaxtrainer.deferred_import`)."""

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

    The file is written by a background thread started at the first logged
    metrics: importing tensorboardX and opening the writer (about 0.3 s on 2 CPU
    cores) then overlap the training call that runs meanwhile instead of
    delaying the first one, and writes never hold up the loop. The directory is
    created in ``on_fit_start`` (a bad path fails there, before training);
    :meth:`finalize` waits for every write and re-raises the first error the
    thread met (a full disk, say), as does the next log call once it is known.

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
        self._writer_args: dict[str, Any] = {}
        self._queued: list[tuple[Callable[..., None], tuple]] = []
        self._thread: ThreadPoolExecutor | None = None
        self._writes: list[Future] = []

    def reset(self) -> None:
        self.writer, self.log_dir = None, None
        self._queued, self._thread, self._writes = [], None, []

    def start(self, trainer: Trainer, module: Module) -> None:
        self.log_dir = os.fspath(self.save_dir or os.path.join(trainer.log_dir, "tensorboard"))
        os.makedirs(self.log_dir, exist_ok=True)
        resumed = trainer.global_step > 0
        # tensorboardX names event files by the second they were opened; a resume
        # opened within the same second as the run it continues would truncate that
        # run's file. A nanosecond suffix keeps the names unique and chronological.
        self._writer_args = dict(flush_secs=self.flush_secs,
                                 purge_step=trainer.global_step + 1 if resumed else None,
                                 filename_suffix=f".{time.time_ns()}")
        self._log_hparams = not resumed
        self._queued, self._thread, self._writes = [(self._open, ())], None, []

    # -- on the writer thread (or, when nothing was logged, in finalize) -------
    def _open(self) -> None:
        with deferred_imports(*TENSORBOARDX_STORAGE):
            from tensorboardX import SummaryWriter
        self.writer = SummaryWriter(self.log_dir, **self._writer_args)

    def _write_hparams(self, params: dict[str, Any]) -> None:
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

    def _write_scalars(self, values: list[tuple[str, float]], step: int) -> None:
        # One event per step holding every scalar (TensorBoard reads each value
        # as its own tag), not one event per scalar: a tenth of the host time.
        from tensorboardX.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in values])
        self.writer.file_writer.add_summary(summary, step)

    def _close_writer(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None

    # -- from the training loop ------------------------------------------------
    def _raise_failed(self) -> None:
        """Re-raise the first error of a finished write; forget finished ones."""
        failed = [f for f in self._writes if f.done() and f.exception() is not None]
        self._writes = [f for f in self._writes if not f.done()]
        if failed:
            raise failed[0].exception()

    def _submit(self, fn: Callable[..., None], *args: Any, start: bool = False) -> None:
        """Run ``fn(*args)`` on the writer thread, after what was submitted
        before; queued until the thread exists, which ``start`` creates."""
        if self._thread is None:
            self._queued.append((fn, args))
            if start:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="jaxtrainer-tensorboard")
                queued, self._queued = self._queued, []
                self._writes += [self._thread.submit(f, *a) for f, a in queued]
            return
        self._raise_failed()
        self._writes.append(self._thread.submit(fn, *args))

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        if params and self._log_hparams:
            self._submit(self._write_hparams, dict(params))

    def log_metrics(self, metrics: dict[str, float | int], step: int) -> None:
        if metrics:
            self._submit(self._write_scalars, [(k, float(v)) for k, v in metrics.items()], step,
                         start=True)  # the first metrics start the writer thread

    def finalize(self, status: str) -> None:
        thread, queued = self._thread, self._queued
        self._thread, self._queued = None, []
        if thread is None:  # nothing logged yet: open, write what is queued and close here
            try:
                for fn, args in queued:
                    fn(*args)
            finally:
                self._close_writer()
            return
        self._writes.append(thread.submit(self._close_writer))
        thread.shutdown(wait=True)
        writes, self._writes = self._writes, []
        errors = [f.exception() for f in writes if f.exception() is not None]
        if errors:
            raise errors[0]
