"""ModelCheckpoint: save the training state with orbax."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from jaxtrainer import _arguments as arguments
from jaxtrainer import checkpoint as ckpt
from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.monitor import check_mode, warn_unseen
from jaxtrainer.rundir import module_record, run_layout, storage

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class ModelCheckpoint(Callback):
    """Save the module state, trainer counters, root PRNG key and every
    callback's ``state_dict()`` to ``<log_dir>/checkpoints/<step>``.

    Saves happen at log-interval boundaries once every callback's
    ``on_train_steps_end`` has run (likewise after ``on_train_end`` and
    ``on_exception``), so a checkpoint at step N records the metrics of the
    interval ending at N, evaluation included (evaluation runs before
    ``on_train_steps_end``), and every callback's state after it saw them, the
    rankings of the other ModelCheckpoints saving at N included (exact resume).

    Saves are atomic (orbax writes to a temporary directory and renames it when
    complete; :func:`jaxtrainer.checkpoint.latest_step_dir` ignores unfinished
    ones) and, with ``async_save``, the files are written in a background thread
    after the arrays were copied off the devices, so later training steps, which
    donate the state buffers, cannot change what is written. The newest
    checkpoint is always kept, so ``ckpt_path="last"`` resumes from it.

    Pruning (``save_top_k``) happens only once the newest save is complete: at
    the next save (which waits for the previous write, as orbax does anyway),
    on preemption and at the end of ``fit``. A save that fails (a full disk, a
    quota, a file size limit) raises
    :class:`~jaxtrainer.checkpoint.CheckpointWriteError`, one line naming the
    step directory, the OS error and the newest complete checkpoint; ``fit``
    stops with it, nothing is pruned, no temporary directory is left, and
    ``ckpt_path="last"`` resumes from the checkpoint before.

    Processes (``multi_node``): every hook runs on every process and each save
    is a collective (the sharded arrays are gathered), but only process 0
    writes, prunes and deletes checkpoint files (:class:`jaxtrainer.checkpoint.Manager`);
    no other process writes anything under ``dirpath``, which must be on a
    filesystem every process sees. Every process waits until process 0 has
    finished writing at ``teardown`` (end of ``fit``), on preemption and before
    a step is overwritten, so a later ``ckpt_path="last"`` finds the
    checkpoint on every process. After an exception, ``teardown`` waits on
    process 0 only (another process may be gone).

    No checkpoint is written while ``trainer.state_is_valid`` is ``False`` (set by
    :class:`~jaxtrainer.callbacks.NaNGuard`): the last good one stays the newest.

    Several ModelCheckpoint callbacks in one Trainer (e.g. one every N steps,
    one keeping the best by a metric) each write, prune and delete in a
    directory of their own: without ``dirpath``, the first one's is
    ``<log_dir>/checkpoints`` (where ``ckpt_path="last"`` looks), the others'
    ``<log_dir>/checkpoints_1``, ``checkpoints_2``, ...

    Args:
      dirpath: checkpoint directory; default ``<trainer.log_dir>/checkpoints``
        (``checkpoints_<i>`` for the ``i``-th other ModelCheckpoint without one).
      every_n_steps: save when the global step reaches a multiple of this
        (training steps; checked at log boundaries); ``None`` = not by step count.
      every_n_seconds: save when this much wall time (seconds) passed since the
        last save; ``None`` = not by time.
      monitor: metric name ranking checkpoints for ``save_top_k``. Only a
        checkpoint of a step where the metric was measured (in that step's log
        row or evaluation) is ranked; others (saved before it was first logged,
        the final save after the last evaluation, a time-based save, an
        interval without samples) rank last and never displace a ranked one.
        Equal values keep the older checkpoint.
      mode: ``"max"`` or ``"min"``; a ``monitor`` without ``mode`` warns and uses ``"min"`` for a
        loss or an error, ``"max"`` for other metrics (as EarlyStopping).
      save_top_k: keep the best ``k`` checkpoints by ``monitor`` plus the newest
        (``-1`` = keep all); without ``monitor``, keep the newest ``k``.
      save_last: save when training ends (budget spent or ``should_stop``).
      save_on_exception: save the last state when ``fit`` raises (not when the
        state is not finite, nor when a hook raised while ``trainer.state`` was
        already past ``global_step`` inside a fused call: then a message names the
        last checkpoint).
      async_save: write in a background thread (arrays are copied first).

    Attributes:
      best_model_path, best_model_score: the best checkpoint by ``monitor``
        (stored in every checkpoint's metadata: ``ckpt_path="best"`` in
        ``fit``/``evaluate`` and the recipes finds it there).
      last_model_path: the newest checkpoint written.

    Raises:
      ValueError: a bad argument, naming it.
      RuntimeError: on every other process, when writing failed on process 0
        (process 0 raises the original error).
    """

    order = 100

    def __init__(self, dirpath: str | os.PathLike | None = None, *, every_n_steps: int | None = None,
                 every_n_seconds: float | None = None, monitor: str | None = None,
                 mode: str | None = None, save_top_k: int = -1, save_last: bool = True,
                 save_on_exception: bool = False, async_save: bool = True) -> None:
        if every_n_steps is not None and (isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int)
                                          or every_n_steps < 1):
            raise ValueError(f"every_n_steps={every_n_steps!r}: expected a positive int or None")
        if every_n_seconds is not None and not every_n_seconds > 0:
            raise ValueError(f"every_n_seconds={every_n_seconds!r}: expected a positive number or None")
        if mode not in (None, "max", "min"):
            raise ValueError(f"mode={mode!r}: expected 'max' or 'min'")
        if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1 or save_top_k == 0:
            raise ValueError(f"save_top_k={save_top_k!r}: expected -1 (keep all) or a positive int")
        if monitor is not None:
            mode = check_mode("ModelCheckpoint", monitor, mode)
        self._dirpath_arg = dirpath
        self.dirpath: str | None = None if dirpath is None else arguments.expand_path(dirpath)
        self.every_n_steps = every_n_steps
        self.every_n_seconds = every_n_seconds
        self.monitor = monitor
        self.mode = mode or "max"
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.save_on_exception = save_on_exception
        self.async_save = async_save
        self.best_model_score: float | None = None
        self.best_model_path: str | None = None
        self.last_model_path: str | None = None
        self._scores: dict[int, float | None] = {}
        self._mgr = None
        self._last_time = 0.0
        self._last_saved_step = -1
        self._refused_step: int | None = None  # step whose non-finite state was refused
        self._metrics: dict[str, float] = {}
        self._measured: int | None = None  # the step where ``monitor`` was last measured
        self._save_due = False  # a save found due at this step, written by :func:`save_due`
        self._failed = self._quiet = False
        self._unpruned: int | None = None  # newest save, pruning pending until it is complete

    # ---------------------------------------------------------------------
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Start this run's state afresh (a callback reused for another ``fit``
        keeps nothing of the previous run; a resume then loads the checkpoint's)
        and open the checkpoint directory.

        Raises:
          FileExistsError: ``dirpath`` already holds checkpoints of another run
            (a fresh ``fit``, or a resume from a checkpoint in another
            directory): they are never overwritten or deleted.
        """
        if stage != "fit":
            return
        self.dirpath = self._resolve_dirpath(trainer)
        self.best_model_score = self.best_model_path = self.last_model_path = None
        self._scores, self._last_saved_step, self._refused_step = {}, -1, None
        self._metrics, self._failed, self._unpruned, self._quiet = {}, False, None, False
        self._measured, self._save_due = None, False
        self._check_not_another_runs(trainer)
        self._mgr = ckpt.manager(self.dirpath, async_save=self.async_save)
        self._last_time = time.monotonic()

    def _resolve_dirpath(self, trainer: Trainer) -> str:
        """This callback's directory: ``dirpath``, else ``<log_dir>/checkpoints``
        for the first ModelCheckpoint of the Trainer without one and
        ``<log_dir>/checkpoints_<i>`` for the ``i``-th other, so that two
        checkpoint callbacks never write, prune or delete in one directory.

        Raises:
          ValueError: another ModelCheckpoint of this Trainer has the same
            directory (before anything is written).
        """
        others = [cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)]
        unnamed = [cb for cb in others if cb._dirpath_arg is None]
        if self._dirpath_arg is not None:
            mine = os.path.realpath(arguments.expand_path(self._dirpath_arg))
            for cb in others:
                if cb is not self and cb._dirpath_arg is not None \
                        and os.path.realpath(arguments.expand_path(cb._dirpath_arg)) == mine:
                    raise ValueError(
                        f"two ModelCheckpoint callbacks share dirpath={self._dirpath_arg!r}; each "
                        "prunes and deletes in its own directory: give each its own dirpath (or "
                        "leave it unset: checkpoints, checkpoints_1, ... under the run directory)")
            return arguments.expand_path(self._dirpath_arg)
        i = next(i for i, cb in enumerate(unnamed) if cb is self)
        return os.path.join(trainer.log_dir, run_layout.checkpoints_dir(i))

    def _check_not_another_runs(self, trainer: Trainer) -> None:
        resumed_from = os.path.dirname(trainer.ckpt_path) if trainer.ckpt_path else None
        if resumed_from is not None and os.path.realpath(resumed_from) == os.path.realpath(self.dirpath):
            return  # the directory of the run this fit continues
        found = ckpt.steps_of_other_runs(self.dirpath, trainer.log_dir)
        if found:
            steps = ", ".join(str(s) for s in found[:8]) + (", ..." if len(found) > 8 else "")
            raise FileExistsError(
                f"ModelCheckpoint(dirpath={self.dirpath!r}) already holds checkpoints of another "
                f"run (steps {steps}); they are never overwritten or deleted. Pass another dirpath, "
                "leave dirpath unset (each run then saves under its own run directory), or resume "
                "that run with ckpt_path")

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        self._last_saved_step = trainer.global_step
        self._last_time = time.monotonic()

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        """True at the boundaries where a save is due (by steps or seconds)."""
        if self.every_n_steps and step // self.every_n_steps > self._last_saved_step // self.every_n_steps:
            return True
        return bool(self.every_n_seconds and time.monotonic() - self._last_time >= self.every_n_seconds)

    def _due(self, trainer: Trainer) -> bool:
        if trainer.state_ahead:  # became due after the next interval was enqueued: next boundary
            return False
        step = trainer.global_step
        if self.every_n_steps and step // self.every_n_steps > self._last_saved_step // self.every_n_steps:
            return True
        return bool(self.every_n_seconds and time.monotonic() - self._last_time >= self.every_n_seconds)

    def _seen(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        self._metrics.update(metrics)
        if self.monitor is not None and self.monitor in metrics:
            self._measured = trainer.global_step

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._seen(trainer, metrics)
        self._save_due = self._save_due or self._due(trainer)

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._seen(trainer, metrics)

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        if self.save_last and self._last_saved_step != trainer.global_step:
            self._save_due = True
        if self.monitor is not None:  # a typo ranked nothing: say so, naming the metrics there were
            warn_unseen(f"ModelCheckpoint(monitor={self.monitor!r})", [self.monitor],
                        set(self._metrics))

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        self._failed = True  # teardown then waits for process 0's writes without a collective
        # a storage error (a full disk) says so already: a save failing for it as well is not said again
        self._quiet = storage.as_storage_error(exception) is not None
        if self.save_on_exception and trainer.peek_state() is not None and self._mgr is not None:
            if trainer.state_ahead:
                # Raised while the hooks of a fused call (or a run-ahead boundary)
                # ran: trainer.state is past global_step, so no checkpoint of
                # global_step exists to write; say so instead of staying silent.
                if trainer.is_global_zero:
                    print(f"jaxtrainer: ModelCheckpoint: not saving on {type(exception).__name__} "
                          f"at step {trainer.global_step}: trainer.state is already further on "
                          "(a fused call's hooks were running); the last checkpoint is "
                          f"{self.last_model_path}", file=sys.stderr, flush=True)
            elif self._last_saved_step != trainer.global_step:
                self._save_due = True

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        if self._mgr is not None:
            try:
                if not self._failed:
                    self._commit()
                self._mgr.close(sync=not self._failed, report=not self._quiet)
            finally:
                self._mgr = None

    def _commit(self) -> None:
        """Wait until the newest save is written (a collective), then prune the
        checkpoints it replaces: a checkpoint is removed only after its
        replacement is complete, so a failed write (a full disk, a quota, a
        killed process) never leaves the run without a restorable checkpoint.

        Raises:
          jaxtrainer.checkpoint.CheckpointWriteError: the write failed; nothing
            is pruned and no temporary directory is left.
        """
        if self._mgr is None:
            return
        self._mgr.wait_until_finished()
        if self._unpruned is not None:
            newest, self._unpruned = self._unpruned, None
            self._prune(newest)

    @property
    def state_key(self) -> str:
        """Distinct for differently configured checkpoint callbacks of one Trainer
        (each keeps its own best and last paths in the checkpoint)."""
        return (f"ModelCheckpoint[dirpath={self._dirpath_arg!r},monitor={self.monitor!r},"
                f"mode={self.mode!r},every_n_steps={self.every_n_steps!r},"
                f"every_n_seconds={self.every_n_seconds!r}]")

    # ---------------------------------------------------------------------
    def _score(self, step: int) -> float:
        s = self._scores.get(step)
        if s is None or math.isnan(s):
            return -math.inf
        return s if self.mode == "max" else -s

    def _rank(self, step: int) -> tuple[float, int]:
        """Sort key, best first when reversed: the better score, on a tie the older step."""
        return self._score(step), -step

    def _prune(self, newest: int) -> None:
        if self.save_top_k == -1:
            return
        # Every step here is this run's: ``setup`` refused a directory holding
        # another run's. Scores of steps already gone (a resumed state was saved
        # before that save's pruning) rank nothing; unscored steps rank last.
        steps = sorted(self._mgr.all_steps())
        self._scores = {s: v for s, v in self._scores.items() if s in steps or s >= newest}
        if self.monitor is None:
            keep = set(steps[-self.save_top_k:])
        else:
            ranked = sorted(steps, key=self._rank, reverse=True)
            keep = set(ranked[:self.save_top_k])
        keep.add(newest)
        for s in steps:
            if s not in keep:
                self._mgr.delete(s)
                self._scores.pop(s, None)

    def save(self, trainer: Trainer, module: Module) -> str | None:
        """Save now if the state is valid. Every process must call it (the
        sharded arrays are gathered); only process 0 writes files, in the
        background with ``async_save``. Returns the step directory (on every
        process), or None when nothing was saved because
        ``trainer.state_is_valid`` is False.

        Raises:
          RuntimeError: called outside ``fit``; or, on every process but 0,
            writing failed on process 0.
        """
        if not self._prepare(trainer):
            return None
        self._write(trainer)
        return self.last_model_path

    def _prepare(self, trainer: Trainer) -> bool:
        """A save's first half: ask for the previous save's pruning and rank this
        step (best and last paths), so that every checkpoint written at this
        step holds this ranking. False: nothing is saved (the state is not finite).

        Raises:
          RuntimeError: as :meth:`save`.
        """
        step = trainer.global_step
        if trainer.state_ahead:
            raise RuntimeError(
                f"ModelCheckpoint.save at step {step}: trainer.state is already one interval "
                "further (the next interval was enqueued because every callback's needs_state "
                "was False at this boundary); save from a callback whose needs_state is True")
        if not trainer.state_is_valid:
            if trainer.is_global_zero and self._refused_step != step:
                self._refused_step = step  # once per step (a boundary save and save_last)
                last = self.last_model_path or "none was written in this run"
                print(f"jaxtrainer: ModelCheckpoint: not saving step {step}: the state is not finite; "
                      f"the last good checkpoint: {last}", flush=True)
            return False
        if self._mgr is None:
            raise RuntimeError("ModelCheckpoint.save called outside fit")
        self._commit()  # the previous save is complete: prune what it replaces
        measured = self.monitor is not None and self._measured == step
        self._scores[step] = self._metrics.get(self.monitor) if measured else None
        if self.monitor is not None:
            on_disk = set(self._mgr.all_steps()) | {step}
            ranked = [s for s in self._scores if s in on_disk and self._score(s) > -math.inf]
            if ranked:
                best = max(ranked, key=self._rank)
                self.best_model_score = self._scores[best]
                self.best_model_path = os.path.join(self.dirpath, str(best))
        self.last_model_path = os.path.join(self.dirpath, str(step))
        return True

    def _write(self, trainer: Trainer) -> None:
        """A save's second half, after :meth:`_prepare`: write the checkpoint of this step."""
        step = trainer.global_step
        if step in self._mgr.all_steps():  # left by a run resumed from an earlier checkpoint
            self._mgr.delete(step)
        self._unpruned = step  # pruned once this save is complete (next save, teardown)
        trainer.save_checkpoint(self._mgr, metrics={k: v for k, v in self._metrics.items()
                                                    if isinstance(v, (int, float))})
        self._last_saved_step = step
        self._last_time = time.monotonic()
        if not self.async_save:
            self._commit()

    def save_now(self, trainer: Trainer, module: Module) -> str | None:
        """Save the current step unless already saved, and block every process
        until process 0 has written every checkpoint file (used on preemption;
        a collective)."""
        if self._last_saved_step != trainer.global_step:
            self._save_due = True
            save_due(trainer, module)
        self._commit()
        return self.last_model_path

    def state_dict(self) -> dict[str, Any]:
        return {"best_model_score": self.best_model_score, "best_model_path": self.best_model_path,
                "last_model_path": self.last_model_path,
                "scores": {str(k): v for k, v in self._scores.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_model_score = state_dict.get("best_model_score")
        self.best_model_path = state_dict.get("best_model_path")
        self.last_model_path = state_dict.get("last_model_path")
        self._scores = {int(k): v for k, v in state_dict.get("scores", {}).items()}


def save_due(trainer: Trainer, module: Module) -> None:
    """Write the saves every ModelCheckpoint of ``trainer`` found due at this
    step (in its ``on_train_steps_end``, ``on_train_end`` or ``on_exception``),
    once every callback has run that hook: first each ranks the step, then each
    writes, so every checkpoint of the step holds every ModelCheckpoint's
    ranking of it. The Trainer calls it after those hooks; a collective.

    Raises:
      jaxtrainer.checkpoint.CheckpointWriteError, RuntimeError: as
        :meth:`ModelCheckpoint.save`.
    """
    savers = [cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb._save_due]
    for cb in savers:
        cb._save_due = False
    for cb in [cb for cb in savers if cb._prepare(trainer)]:
        cb._write(trainer)


def save_now(trainer: Trainer, module: Module) -> str:
    """Save the current step with every ModelCheckpoint (or a plain manager
    under ``<log_dir>/checkpoints`` when there is none), wait until the files
    are complete, and return the newest checkpoint path (used on preemption)."""
    savers = [cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)]
    path = ""
    for cb in savers:
        cb._save_due = cb._last_saved_step != trainer.global_step
    save_due(trainer, module)
    for cb in savers:
        path = cb.save_now(trainer, module) or path
    if not savers:
        directory = os.path.join(trainer.log_dir, run_layout.CHECKPOINTS_DIR)
        if trainer.is_global_zero and not module_record.exists(trainer.log_dir):
            module_record.write(trainer.log_dir, module)  # a run that wrote nothing until now
        with ckpt.manager(directory, async_save=False) as mgr:
            trainer.save_checkpoint(mgr, metrics=dict(trainer.callback_metrics))
        path = os.path.join(directory, str(trainer.global_step))
    return path
