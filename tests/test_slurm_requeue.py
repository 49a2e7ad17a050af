"""A SLURM batch job near its time limit: SIGUSR1 (``sbatch --signal=USR1@90``)
checkpoints at the next step boundary, process 0 calls ``scontrol requeue`` once
(a stub on PATH records it), the job exits; the requeued job (same variables
plus ``SLURM_RESTART_COUNT=1``, the same script) resumes and ends bitwise equal
to a run never interrupted."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jaxtrainer import slurm
from tests._xla import xla_flags

REPO = Path(__file__).resolve().parent.parent

# One task of an srun step started by an sbatch script (job named "train").
SRUN_TASK = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_STEP_ID": "0",
             "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0"}

SCRIPT = """
import os, signal, sys
import numpy as np
import jaxtrainer as jt
from tests import toys

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
    assert "SLURM requeued this job (SLURM_RESTART_COUNT=1); resuming with ckpt_path='last'" \
        in again.stderr
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
