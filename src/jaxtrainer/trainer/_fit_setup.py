"""What ``Trainer.fit`` does before its first hook: the run directory.

:func:`open_run` resolves ``ckpt_path`` (or reserves a new ``version_N`` on
process 0), takes the directory's lock (:mod:`jaxtrainer.rundir._run_lock`)
and records and announces the run; :func:`resume_hint` is how a preemption
message says to resume. Every function takes the Trainer and acts for it on
every process (process 0 writes, the others learn the result by broadcast).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax

from jaxtrainer.callbacks.monitor import refuse_unlogged_evaluation_monitors
from jaxtrainer.checkpoint import _files as ckpt
from jaxtrainer.module import Module, counted_members
from jaxtrainer.rundir import _run_kind as run_kind
from jaxtrainer.rundir import _run_lock as run_lock
from jaxtrainer.rundir import module_record, run_layout, runs
from jaxtrainer.runtime import _slurm as slurm
from jaxtrainer.strategies.layout import LeafLayout
from jaxtrainer.strategies.single_device import SingleDeviceStrategy
from jaxtrainer.trainer._connectors import checkpoint_connector

if TYPE_CHECKING:
    from jaxtrainer.trainer import Trainer


def check_fit(trainer: Trainer, module: Module) -> None:
    """Refuse a ``fit`` that cannot start: TypeError for a ``module`` that is not a
    :class:`~jaxtrainer.Module`; ValueError when ``trainer`` has neither ``max_steps``
    nor ``max_env_steps`` (``fit`` needs one; such a trainer can only evaluate)."""
    if not isinstance(module, Module):
        raise TypeError(f"fit expects a jaxtrainer.Module, got {type(module).__name__}")
    if not trainer.has_budget:
        raise ValueError(f"{type(trainer).__name__}.fit needs a training budget: this trainer was "
                         "built with max_steps=None and max_env_steps=None; set max_steps or "
                         "max_env_steps (a trainer without one can only evaluate)")


def check_callbacks(trainer: Trainer, module: Module) -> None:
    """Refuse, before anything is written or compiled, an ``eval/`` monitor in a
    fit that never evaluates and two callbacks sharing one checkpoint state key.

    Raises:
      ValueError: naming the callback(s) and the fix.
    """
    refuse_unlogged_evaluation_monitors(trainer, module)
    checkpoint_connector.refuse_shared_state_keys(trainer)


def resolve_resume(trainer: Trainer, module: Module,
                   ckpt_path: str | os.PathLike | None) -> tuple[Path | None, int]:
    """``(checkpoint step directory or None, its step)``; sets ``log_dir`` to
    the resumed run, or to a new run directory reserved by process 0 (named, not
    made, where no callback writes there: :func:`writes_run_dir`).

    Raises:
      FileNotFoundError, ValueError: from
        :func:`jaxtrainer.trainer._connectors.checkpoint_connector.resolve_ckpt_path` and
        :func:`~jaxtrainer.trainer._connectors.checkpoint_connector.check_env_steps`.
    """
    if ckpt_path is None and slurm.restart_count() and slurm.requeue_enabled(trainer.requeue):
        resume = requeued_checkpoint(trainer, module)
    else:
        resume = None if ckpt_path is None else checkpoint_of(trainer, module, ckpt_path)
    if resume is None:
        trainer.log_dir = trainer.strategy.broadcast(
            runs.new_run_dir(trainer.default_root_dir, create=writes_run_dir(trainer))
            if trainer.is_global_zero else "")
        return None, 0
    step = checkpoint_connector.check_env_steps(resume, trainer.env_steps_per_step, type(module).__name__)
    trainer.log_dir = os.fspath(resume.parent.parent)
    return resume, step


def writes_run_dir(trainer: Trainer) -> bool:
    """Whether a callback of ``trainer`` may write into its run directory
    (:attr:`jaxtrainer.Callback.writes_run_dir`: loggers, checkpoints, videos,
    any callback that does not say otherwise); where none does, a new run makes
    no directory and records nothing, as Lightning makes no ``version_N``
    without a logger."""
    return any(getattr(cb, "writes_run_dir", True) for cb in trainer.callbacks)


def requeued_checkpoint(trainer: Trainer, module: Module) -> Path | None:
    """In a job SLURM requeued (``SLURM_RESTART_COUNT`` > 0): the newest
    checkpoint under ``default_root_dir`` of a run this job wrote (its recorded
    SLURM ids are this job's, :func:`jaxtrainer.runtime._slurm.other_job`) that this
    module can resume, else ``None`` (a new run: the job was requeued before its
    first checkpoint); process 0 says which on stderr."""
    kind = run_kind.acceptor_of(module)

    def accept(run_dir: Path) -> str | None:
        return slurm.other_job(run_dir) or kind(run_dir)

    try:
        resume = checkpoint_of(trainer, module, "last", accept)
    except (FileNotFoundError, ValueError):
        resume = None
    if trainer.is_global_zero:
        job = slurm.describe_job(slurm.job_ids() or {})
        print(f"jaxtrainer: SLURM requeued this job (SLURM_RESTART_COUNT={slurm.restart_count()}); "
              + (f"resuming {job}'s run {resume.parent.parent} from its newest checkpoint"
                 if resume is not None else f"no run of {job} under {trainer.default_root_dir} has "
                 "a checkpoint (preempted before its first): starting a new run"),
              file=sys.stderr, flush=True)
    return resume


def checkpoint_of(trainer: Trainer, module: Module, ckpt_path: str | os.PathLike,
                  accept: Any = None) -> Path:
    """The checkpoint step directory ``ckpt_path`` names for ``module``
    (``"last"``, ``"best"``, a run's ``checkpoints`` folder or a step directory;
    resolved on process 0, broadcast to the others). ``accept``: which runs
    ``"last"`` may take (:data:`jaxtrainer.checkpoint.resolve.Accept`); default
    those of ``module``'s kind (:func:`jaxtrainer.rundir._run_kind.acceptor_of`).

    Raises:
      FileNotFoundError: it names no checkpoint.
      ValueError: ``"best"`` where no best checkpoint was recorded.
    """
    return checkpoint_connector.resolve_ckpt_path(ckpt_path, trainer.default_root_dir, trainer.strategy,
                                                  accept or run_kind.acceptor_of(module))


def lock_run_dir(trainer: Trainer) -> Path | None:
    """Process 0 takes the run directory's lock; every process raises when
    another process owns the directory.

    Raises:
      jaxtrainer.rundir._run_lock.RunInUseError: another live process owns it.
    """
    lock, refused = None, ""
    if trainer.is_global_zero and os.path.isdir(trainer.log_dir):  # none made: nothing to hold
        try:
            lock = run_lock.acquire(trainer.log_dir)
        except run_lock.RunInUseError as e:
            refused = str(e)
    refused = trainer.strategy.broadcast(refused)
    if refused:
        raise run_lock.RunInUseError(refused)
    return lock


@contextlib.contextmanager
def run_dir_held(trainer: Trainer, new: bool) -> Iterator[None]:
    """Hold the run directory's lock (:func:`lock_run_dir`) for the body. When the
    body raises before the first training step of a ``new`` run, process 0 then
    removes the directory reserved for it unless it holds a checkpoint: what is
    there (the module's record, an empty ``hparams.csv``, an event file) records no
    training, and a fit that failed on its input leaves no stray ``version_N``."""
    lock = lock_run_dir(trainer)
    try:
        yield
    except BaseException:
        run_lock.release(lock)
        run_dir = Path(trainer.log_dir)
        if new and trainer.global_step == 0 and trainer.is_global_zero and run_dir.is_dir() \
                and not ckpt.steps(run_dir / run_layout.CHECKPOINTS_DIR):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    run_lock.release(lock)


def announce(trainer: Trainer, module: Module, resume: Path | None, step: int) -> None:
    """On process 0: a new run records how to rebuild its module (what
    ``jaxtrainer eval`` and ``load_policy`` read), a run in a SLURM job the
    job's ids (:func:`jaxtrainer.runtime._slurm.record_job`); print the strategy, the run
    directory and, resuming, the checkpoint and its step."""
    if not trainer.is_global_zero:
        return
    made = os.path.isdir(trainer.log_dir)
    if resume is None and made:
        module_record.write(trainer.log_dir, module)
        run_kind.write_members(trainer.log_dir, module)
    if made:
        slurm.record_job(trainer.log_dir)  # in a SLURM job: the run is this job's (its requeue resumes it)
    cache = f"; compilation cache {trainer.compilation_cache_dir}" if trainer.compilation_cache_dir else ""
    where = (f"run directory {trainer.log_dir}" if made else
             "no run directory (no logger, checkpoint or other callback writes one)")
    print(f"jaxtrainer: {trainer.strategy.describe()}; {where}{cache}", flush=True)
    hint = one_cpu_device_hint(trainer.strategy)
    if hint:
        print(hint, flush=True)
    if resume is not None:
        checkpoint_connector.report_resume(trainer, resume, step, counted_members(module))


def one_cpu_device_hint(strategy: Any) -> str | None:
    """A line for a strategy made for several devices that found one CPU device
    (the CPU backend shows one device unless told otherwise), saying how to get
    more; ``None`` otherwise."""
    devices = strategy.devices
    if (isinstance(strategy, SingleDeviceStrategy) or len(devices) != 1
            or devices[0].platform != "cpu" or jax.device_count() != 1):
        return None
    return (f"jaxtrainer: {type(strategy).__name__} runs on the one CPU device JAX shows; "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N before the command splits "
            "the CPU into N devices")


def resume_hint(trainer: Trainer, checkpoint: str) -> str:
    """How to resume, in the form the user launched with (``trainer.resume_hint``)."""
    if trainer.resume_hint is None:
        return f"fit(..., ckpt_path={checkpoint!r})"
    return trainer.resume_hint.format(checkpoint=checkpoint, default_root_dir=trainer.default_root_dir)


def adopt(trainer: Trainer, module: Module, state: Any) -> Any:
    """``state`` in ``module``'s tree structure: another instance of the module
    that made it may hold equal leaves under other static metadata (a flax
    TrainState's optimizer functions are new objects in each instance)."""
    want = jax.tree.structure(trainer.strategy.state_layout(module),
                              is_leaf=lambda x: isinstance(x, LeafLayout))
    leaves = jax.tree.leaves(state)
    if jax.tree.structure(state) == want or len(leaves) != want.num_leaves:
        return state
    return jax.tree.unflatten(want, leaves)
