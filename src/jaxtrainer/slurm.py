"""SLURM batch jobs that outlive their time limit: requeue, then resume.

A job submitted with ``sbatch --signal=USR1@90 --requeue`` receives SIGUSR1
about 90 s before its time limit (every task of every ``srun`` step does). Under
``fit`` that signal checkpoints at the next step boundary, like SIGTERM; then,
with ``Trainer(requeue="auto")`` (the default) in a batch job, process 0 asks
SLURM to put the job back in the queue (``scontrol requeue $SLURM_JOB_ID``,
once) and every process exits (status 138, 128 + SIGUSR1). SLURM restarts the
same script with ``SLURM_RESTART_COUNT`` raised; a ``fit`` without a
``ckpt_path`` then resumes from ``"last"``, so the script needs no change.
A SIGTERM (``scancel``, the time limit itself) checkpoints and stops without a
requeue, as in PyTorch Lightning's SLURM environment.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

from jaxtrainer.distributed.process import interactive_slurm_shell

REQUEUE_SIGNAL = signal.SIGUSR1
"""The signal that means "the time limit is near: checkpoint and requeue"."""

REQUEUE_CHOICES = ("auto", True, False)

SCONTROL_TIMEOUT = 60.0
"""Seconds ``scontrol requeue`` may take before the job ends without it."""


def check_requeue(value: object) -> bool | str:
    """``value`` if it is one of :data:`REQUEUE_CHOICES`.

    Raises:
      ValueError: anything else, naming it and the choices.
    """
    if isinstance(value, bool) or value == "auto":
        return value  # type: ignore[return-value]
    raise ValueError(f"requeue={value!r}: expected 'auto' (requeue in a SLURM batch job), "
                     "True or False")


def batch_job_id() -> str | None:
    """``SLURM_JOB_ID`` when this process runs in a SLURM job that is not an
    interactive shell (``salloc``, ``srun --pty bash``), else ``None``."""
    job = os.environ.get("SLURM_JOB_ID", "").strip()
    if not job or interactive_slurm_shell():
        return None
    return job


def requeue_enabled(requeue: bool | str) -> bool:
    """Whether a SIGUSR1 preemption requeues the job: ``True``; or ``"auto"``
    in a SLURM batch job (:func:`batch_job_id`)."""
    return requeue is True or (requeue == "auto" and batch_job_id() is not None)


def restart_count() -> int:
    """How many times SLURM has requeued this job (``SLURM_RESTART_COUNT``, 0
    when unset or not a number)."""
    raw = os.environ.get("SLURM_RESTART_COUNT", "").strip()
    return int(raw) if raw.isdigit() else 0


def requeue_after(signum: int, requeue: bool | str) -> str | None:
    """After a preemption by ``signum`` has checkpointed the run: when it was
    :data:`REQUEUE_SIGNAL` and :func:`requeue_enabled`, ``scontrol requeue``
    this job (:func:`requeue_job`) and return what happened; else ``None``."""
    job = os.environ.get("SLURM_JOB_ID", "").strip()
    if signum != REQUEUE_SIGNAL or not job or not requeue_enabled(requeue):
        return None
    return requeue_job(job)


def requeue_job(job_id: str) -> str:
    """Run ``scontrol requeue <job_id>`` once; a sentence saying what happened
    (never raises: the checkpoint is on disk whatever ``scontrol`` does)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return (f"could not requeue SLURM job {job_id}: scontrol is not on PATH; "
                "resubmit the job to resume")
    try:
        done = subprocess.run([scontrol, "requeue", job_id], capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not requeue SLURM job {job_id} ({type(e).__name__}: {e}); resubmit it to resume"
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        return (f"scontrol requeue {job_id} failed (status {done.returncode}"
                f"{': ' + reason[-1] if reason else ''}); resubmit the job to resume")
    return f"requeued SLURM job {job_id} (scontrol requeue {job_id}); it resumes from this checkpoint"
