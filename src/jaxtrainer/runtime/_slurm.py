"""SLURM batch jobs that outlive their time limit: requeue, then resume.

A job submitted with ``sbatch --signal=USR1@90 --requeue`` receives SIGUSR1
about 90 s before its time limit (every task of every ``srun`` step does). Under
``fit`` that signal checkpoints at the next step boundary, like SIGTERM; then,
with ``Trainer(requeue="auto")`` (the default) in a batch job, process 0 asks
SLURM to put the job back in the queue (``scontrol requeue $SLURM_JOB_ID``,
once) and every process exits (status 138, 128 + SIGUSR1). SLURM restarts the
same script with ``SLURM_RESTART_COUNT`` raised; a ``fit`` without a
``ckpt_path`` then resumes the newest checkpoint of a run this job wrote, so the
script needs no change. Every run started or resumed in a SLURM job records the
job's ids (:data:`JOB_VARIABLES`) in ``<run>/slurm_job.json``: a requeued job
resumes only a run whose recorded ids are its own (never another job's, nor
another task's of its job array under the same ``default_root_dir``), and starts
a new run where it has none with a checkpoint (preempted before its first).
A SIGTERM (``scancel``, the time limit itself) checkpoints and stops without a
requeue, as in PyTorch Lightning's SLURM environment.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from jaxtrainer._arguments import ArgumentError
from jaxtrainer.rundir import run_layout, storage

INTERACTIVE_JOB_NAMES = ("bash", "interactive")
"""SLURM job names of interactive shells (``srun --pty bash``, ``salloc``), never
a managed launch, as Lightning's SLURM environment decides it."""


def interactive_slurm_shell() -> bool:
    """Whether this process is in an interactive SLURM job: ``SLURM_JOB_ID`` set
    and ``SLURM_JOB_NAME`` one of :data:`INTERACTIVE_JOB_NAMES`. Its task
    layout (``SLURM_STEP_NUM_TASKS``, ``SLURM_PROCID``) describes the shell's
    step, not processes of a run."""
    return "SLURM_JOB_ID" in os.environ and \
        os.environ.get("SLURM_JOB_NAME", "") in INTERACTIVE_JOB_NAMES


REQUEUE_SIGNAL = signal.SIGUSR1
"""The signal that means "the time limit is near: checkpoint and requeue"."""

REQUEUE_CHOICES = ("auto", True, False)

SCONTROL_TIMEOUT = 60.0
"""Seconds ``scontrol requeue`` may take before the job ends without it."""


JOB_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")
"""The variables naming a SLURM job (and its task of a job array); a requeued job
keeps them, and resumes only a run that recorded the same values."""


def job_ids() -> dict[str, str] | None:
    """``{variable: value}`` of :data:`JOB_VARIABLES` (those set) when this
    process runs in a SLURM job (``SLURM_JOB_ID`` set), else ``None``."""
    ids = {name: os.environ.get(name, "").strip() for name in JOB_VARIABLES}
    if not ids["SLURM_JOB_ID"]:
        return None
    return {name: value for name, value in ids.items() if value}


def describe_job(ids: dict[str, str]) -> str:
    """``"job 4242"``, or ``"job 4243 (task 1 of array job 4240)"``."""
    array = ids.get("SLURM_ARRAY_JOB_ID")
    task = f" (task {ids.get('SLURM_ARRAY_TASK_ID', '?')} of array job {array})" if array else ""
    return f"job {ids.get('SLURM_JOB_ID', '?')}{task}"


def record_job(run_dir: str | os.PathLike) -> None:
    """Write this job's ids and ``SLURM_RESTART_COUNT`` to ``<run_dir>/slurm_job.json``
    (the run now belongs to this job); nothing outside a SLURM job.

    Raises:
      jaxtrainer.rundir.storage.StorageError: the file cannot be written.
    """
    ids = job_ids()
    if ids is None:
        return
    path = Path(run_dir) / run_layout.SLURM_JOB_FILE
    with storage.writing("the run's SLURM job record", path):
        path.write_text(json.dumps({**ids, "SLURM_RESTART_COUNT": restart_count()}, indent=1) + "\n")


def recorded_job(run_dir: str | os.PathLike) -> dict[str, str] | None:
    """The ids :func:`record_job` wrote in ``run_dir`` (:data:`JOB_VARIABLES`
    only), or ``None`` where there is no readable record."""
    try:
        found = json.loads((Path(run_dir) / run_layout.SLURM_JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    return {name: str(found[name]) for name in JOB_VARIABLES if found.get(name) not in (None, "")}


def other_job(run_dir: str | os.PathLike) -> str | None:
    """Why a requeue of this job must not resume the run in ``run_dir`` (another
    job's, or one that records no job), as a clause; ``None`` for this job's own run."""
    mine, theirs = job_ids() or {}, recorded_job(run_dir)
    if theirs is None:
        return f"it records no SLURM job ({run_layout.SLURM_JOB_FILE}), this is {describe_job(mine)}"
    if theirs != mine:
        return f"it is SLURM {describe_job(theirs)}'s run, this is {describe_job(mine)}"
    return None


def check_requeue(value: object) -> bool | str:
    """``value`` if it is one of :data:`REQUEUE_CHOICES`.

    Raises:
      ValueError: anything else, naming it and the choices.
    """
    if isinstance(value, bool) or value == "auto":
        return value  # type: ignore[return-value]
    raise ArgumentError("requeue", value,
                        ": expected 'auto' (requeue in a SLURM batch job), "
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
