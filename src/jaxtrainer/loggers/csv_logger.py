"""CSVLogger: ``metrics.csv`` in the run directory."""

from __future__ import annotations

import contextlib
import csv
import io
import os
from typing import TYPE_CHECKING, Any

from jaxtrainer import _arguments as arguments
from jaxtrainer.loggers.base import Logger
from jaxtrainer.rundir import run_layout, storage

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


_BUDGET_ROWS = tuple(f"trainer/{name}" for name in run_layout.BUDGET_ARGUMENTS)
"""``hparams.csv`` rows of a run's budget; with them a module's ``total_updates``
rows (``module/total_updates``: the updates its schedules span, the budget
unless set). A resume given another budget records it there."""


def _budget_row(name: str) -> bool:
    return name in _BUDGET_ROWS or (name.startswith("module/") and name.endswith("/total_updates"))


class CSVLogger(Logger):
    """Write one row per log call to ``<log_dir>/metrics.csv`` (column ``step``
    first, then metric names in order of first appearance; empty cells where a
    metric was not logged) and hyperparameters to ``hparams.csv``.

    Rows are appended; a new column rewrites the file once with the wider
    header (atomically, via a temporary file and ``os.replace``), so the file is
    always valid CSV. Resuming a run appends to the existing file after dropping
    rows logged past the checkpoint's step, so a resumed run's file equals an
    uninterrupted run's. Values are Python numbers (never arrays).
    ``hparams.csv`` is written once per run, at the start of a fresh ``fit``; a
    resume keeps the file the run started with (as :class:`TensorBoardLogger`
    keeps its HParams entry) but for the rows of the budget
    (``trainer/max_steps``, ``trainer/max_env_steps``, ``module/total_updates``),
    which say the budget the run was last given.

    Args:
      save_dir: directory for the files; default ``trainer.log_dir``.
      flush_every_n_rows: rows buffered between writes (1 = write every row;
        the rows of fused log intervals, fetched together, are written together).
    """

    def __init__(self, save_dir: str | os.PathLike | None = None, flush_every_n_rows: int = 1):
        super().__init__()
        self.save_dir = None if save_dir is None else arguments.directory(
            "CSVLogger(save_dir)", save_dir)
        self.flush_every_n_rows = max(1, int(flush_every_n_rows))
        self.path: str | None = None
        self._columns: list[str] = []
        self._rows: list[dict[str, Any]] = []
        self._pending = 0
        self._written_columns: list[str] = []
        self._hold = False
        self._resumed = False

    def reset(self) -> None:
        self.path, self._columns, self._rows, self._written_columns = None, [], [], []
        self._pending, self._resumed = 0, False

    def start(self, trainer: Trainer, module: Module) -> None:
        directory = os.fspath(self.save_dir or trainer.log_dir)
        with storage.writing("the metrics directory", directory):
            os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, run_layout.METRICS_FILE)
        self._columns, self._rows = ["step"], []
        if os.path.exists(self.path):
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self._columns = list(reader.fieldnames or ["step"])
                self._rows = [dict(r) for r in reader]
        self._written_columns = list(self._columns) if self._rows else []
        self._pending = 0
        self._resumed = trainer.global_step > 0
        # Resuming from a checkpoint older than the last logged row (a crash or
        # preemption after it): drop the rows the resumed run will log again, so
        # the file equals an uninterrupted run's.
        kept = [r for r in self._rows if not r.get("step") or int(float(r["step"])) <= trainer.global_step]
        if len(kept) != len(self._rows):
            self._rows = kept
            self._written_columns = []  # rewrite the file on the next write
            self._write()

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        assert self.path is not None
        path = os.path.join(os.path.dirname(self.path), run_layout.HPARAMS_FILE)
        if self._resumed and os.path.exists(path):
            # the run's hyperparameters are those it started with, and the budget it was last given
            with open(path, newline="") as f:
                rows = [r for r in csv.reader(f) if len(r) == 2][1:]
            budget = {k: str(v) for k, v in params.items() if _budget_row(k)}
            if all(budget.get(k, v) == v for k, v in rows):
                return
            params = {k: budget.get(k, v) for k, v in rows}
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(["name", "value"])
        for k, v in params.items():
            writer.writerow([k, v])
        _replace(path, text.getvalue(), "the hyperparameters file")

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        # Rows of one host sync (fused log intervals) are written together.
        self._hold = trainer.more_metrics_pending
        try:
            super().on_train_steps_end(trainer, module, metrics)
        finally:
            self._hold = False

    def log_metrics(self, metrics: dict[str, float | int], step: int) -> None:
        for k in metrics:
            if k not in self._columns:
                self._columns.append(k)
        self._rows.append({"step": step, **metrics})
        self._pending += 1
        if self._pending >= self.flush_every_n_rows and not self._hold:
            self._write()

    def _write(self) -> None:
        """Append the pending rows (or rewrite the file with a wider header).

        Raises:
          jaxtrainer.rundir.storage.StorageError: the file cannot be written; it keeps
            the complete rows it had (a cut-short append is truncated away).
        """
        assert self.path is not None
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=self._columns, restval="")
        if self._columns == self._written_columns:
            writer.writerows(self._rows[len(self._rows) - self._pending:])
            _append(self.path, text.getvalue(), "the metrics file")
        else:
            writer.writeheader()
            writer.writerows(self._rows)
            _replace(self.path, text.getvalue(), "the metrics file")
            self._written_columns = list(self._columns)
        self._pending = 0

    def finalize(self, status: str) -> None:
        if self._pending:
            self._write()


def _append(path: str, text: str, what: str) -> None:
    """Append ``text`` to ``path`` whole or not at all: a write cut short (a
    full disk) is truncated back to the file's previous end.

    Raises:
      jaxtrainer.rundir.storage.StorageError: naming ``what``, ``path`` and the OS error.
    """
    with storage.writing(what, path):
        end = os.path.getsize(path) if os.path.exists(path) else 0
        try:
            with open(path, "a", newline="") as f:
                f.write(text)
        except OSError:
            with contextlib.suppress(OSError):
                os.truncate(path, end)  # shrinking a file needs no space
            raise


def _replace(path: str, text: str, what: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file, then
    ``os.replace``): a crash or a full disk never leaves a half-written file,
    and no temporary file stays.

    Raises:
      jaxtrainer.rundir.storage.StorageError: naming ``what``, ``path`` and the OS error.
    """
    storage.replace_file(path, text, what)
