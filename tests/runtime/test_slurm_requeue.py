"""A SLURM batch job near its time limit: SIGUSR1 (``sbatch --signal=USR1@90``)
checkpoints at the next step boundary, process 0 calls ``scontrol requeue`` once
(a stub on PATH records it), the job exits; the requeued job (same variables
plus ``SLURM_RESTART_COUNT=1``, the same script) resumes and ends bitwise equal
to a run never interrupted."""

from __future__ import annotations

import csv
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.runtime import _slurm as slurm
from tests._support._xla import xla_flags

REPO = Path(__file__).resolve().parents[2]

# One task of an srun step started by an sbatch script (job named "train").
SRUN_TASK = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_STEP_ID": "0",
             "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0"}

SCRIPT = """
import os, signal, sys
import numpy as np
import jaxtrainer as jt
from tests._support import toys

class TimeLimitNear(jt.Callback):  # what SLURM does 90 s before the limit, in the first job only
    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == 3 and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
            os.kill(os.getpid(), signal.SIGUSR1)

t = toys.trainer(sys.argv[1], strategy="single", max_steps=6, callbacks=[TimeLimitNear()])
t.fit(toys.Regression())
np.savez(sys.argv[2], *[np.asarray(x) for x in jax.tree.leaves(toys.leaves(t.state))])
""".replace("import numpy as np\n", "import jax\nimport numpy as np\n", 1)


def _run(root: Path, out: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JAX_"))}
    full = dict(clean, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1), PATH=f"{bin_dir}:{clean['PATH']}",
                SCONTROL_LOG=str(bin_dir / "calls"), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(root), str(out)],
                          cwd=REPO, env=full, capture_output=True, text=True, timeout=150)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_usr1_checkpoints_requeues_once_and_the_requeued_job_resumes_bitwise(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "scontrol"
    stub.write_text('#!/bin/sh\necho "$@" >> "$SCONTROL_LOG"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)

    first = _run(tmp_path / "runs", tmp_path / "first.npz", bin_dir, **SRUN_TASK)
    assert first.returncode == 128 + signal.SIGUSR1, first.stderr
    assert "stopped by SIGUSR1 at step 3" in first.stderr
    assert "requeued SLURM job 4242 (scontrol requeue 4242)" in first.stderr
    assert (bin_dir / "calls").read_text() == "requeue 4242\n"  # exactly one call
    assert not (tmp_path / "first.npz").exists()

    again = _run(tmp_path / "runs", tmp_path / "again.npz", bin_dir, **SRUN_TASK,
                 SLURM_RESTART_COUNT="1")
    assert again.returncode == 0, again.stderr
    assert "SLURM requeued this job (SLURM_RESTART_COUNT=1); resuming job 4242's run " \
        f"{tmp_path / 'runs' / 'version_0'} from its newest checkpoint" in again.stderr
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["version_0"]  # one run
    assert (bin_dir / "calls").read_text() == "requeue 4242\n"  # no second call

    # never interrupted (the callback sends nothing once a job was restarted)
    whole = _run(tmp_path / "whole", tmp_path / "whole.npz", bin_dir, SLURM_RESTART_COUNT="1")
    assert whole.returncode == 0, whole.stderr
    a, b = np.load(tmp_path / "again.npz"), np.load(tmp_path / "whole.npz")
    assert len(a.files) == len(b.files) > 0
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name])


def test_requeue_is_auto_in_a_batch_job_only_and_checked(monkeypatch):
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    assert not slurm.requeue_enabled("auto") and slurm.requeue_enabled(True)
    for k, v in SRUN_TASK.items():
        monkeypatch.setenv(k, v)
    assert slurm.requeue_enabled("auto") and not slurm.requeue_enabled(False)
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # salloc's shell: never a requeue
    assert not slurm.requeue_enabled("auto")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert slurm.restart_count() == 2
    with pytest.raises(ValueError, match=r"requeue='yes': expected 'auto'"):
        slurm.check_requeue("yes")


def _steps_logged(log_dir):
    with open(f"{log_dir}/metrics.csv") as f:
        return [(int(r["step"]), int(r["env_steps"]), r["loss"]) for r in csv.DictReader(f)]


def _in_job(monkeypatch, job, restarts=0, array=None):
    """This process as a task of SLURM batch job ``job`` (``array``: (array job, task))."""
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    for k, v in {**SRUN_TASK, "SLURM_JOB_ID": job, "SLURM_RESTART_COUNT": str(restarts)}.items():
        monkeypatch.setenv(k, v)
    if array is not None:
        monkeypatch.setenv("SLURM_ARRAY_JOB_ID", array[0])
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", array[1])


def _fit(root, steps, callbacks=(), **kw):
    from tests._support import toys

    t = toys.trainer(root, strategy="single", max_steps=steps, callbacks=[jt.CSVLogger(), *callbacks],
                     **kw)
    t.fit(toys.Regression())
    return t


def test_a_job_requeued_before_its_first_checkpoint_starts_fresh_beside_another_jobs_run(
        run_dir, monkeypatch, capsys):
    from tests._support import toys

    _in_job(monkeypatch, "4100")
    other = _fit(run_dir, 4)  # another job's finished run, checkpoint at step 4
    before = toys.files_snapshot(other.log_dir)
    _in_job(monkeypatch, "4242")
    first = _fit(run_dir, 6, enable_checkpointing=False)  # preempted before its first checkpoint
    capsys.readouterr()
    _in_job(monkeypatch, "4242", restarts=1)
    again = _fit(run_dir, 6)
    err = capsys.readouterr().err
    assert toys.files_snapshot(other.log_dir) == before  # nothing of job 4100's run touched
    assert again.log_dir not in (other.log_dir, first.log_dir) and again.global_step == 6
    assert [s for s, _, _ in _steps_logged(again.log_dir)] == [1, 2, 3, 4, 5, 6]  # from step 0
    assert "no run of job 4242 under" in err and "starting a new run" in err
    assert slurm.recorded_job(other.log_dir) == {"SLURM_JOB_ID": "4100"}
    assert slurm.recorded_job(again.log_dir) == {"SLURM_JOB_ID": "4242"}


def test_a_requeued_array_task_resumes_its_own_run_not_the_newer_one_of_another_task(
        run_dir, monkeypatch, capsys):
    from tests._support import toys

    _in_job(monkeypatch, "5001", array=("5000", "0"))
    own = _fit(run_dir, 4, [toys.StopAt(2)])  # task 0: checkpoint at 2, then preempted
    _in_job(monkeypatch, "5002", array=("5000", "1"))
    task1 = _fit(run_dir, 4)  # task 1 finished later: the newest run of the root
    before = toys.files_snapshot(task1.log_dir)
    capsys.readouterr()
    _in_job(monkeypatch, "5001", restarts=1, array=("5000", "0"))
    again = _fit(run_dir, 4)
    err = capsys.readouterr().err
    assert again.log_dir == own.log_dir and again.global_step == 4
    toys.assert_trees_equal(again.state, task1.state)  # 2 + 2 steps equal 4 straight
    assert f"resuming job 5001 (task 0 of array job 5000)'s run {own.log_dir}" in err
    assert "task 1 of array job 5000" in err  # the newer run passed over, and why
    assert toys.files_snapshot(task1.log_dir) == before
    recorded = json.loads((Path(own.log_dir) / "slurm_job.json").read_text())
    assert recorded == {"SLURM_JOB_ID": "5001", "SLURM_ARRAY_JOB_ID": "5000",
                        "SLURM_ARRAY_TASK_ID": "0", "SLURM_RESTART_COUNT": 1}
