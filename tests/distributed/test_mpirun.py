"""``mpirun -np 2 jaxtrainer fit ...`` (Open MPI, from the distribution's
``openmpi-bin``) starts one multi_node run with no other setting: the layout
comes from Open MPI's variables, one run directory is written, and the final
state is bitwise the one ``jaxtrainer launch --nproc-per-node 2`` gives."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxtrainer.checkpoint import _files as files
from tests._support._xla import xla_flags
from tests._support.commands import TINY_PPO
from tests.distributed.test_cluster_detection import CLUSTER_PREFIXES

REPO = Path(__file__).resolve().parents[2]
STEPS = 6
ARGS = [*[a for a in TINY_PPO if not a.startswith("trainer.strategy")],
        "trainer.strategy=multi_node", f"trainer.max_steps={STEPS}"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLUSTER_PREFIXES)}
    return dict(env, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1), PYTHONUNBUFFERED="1")


def _mpirun_np2() -> list[str]:
    """``mpirun --allow-run-as-root --oversubscribe -np 2``."""
    mpirun = shutil.which("mpirun")
    assert mpirun is not None, "mpirun not found: install openmpi-bin (.ci/run does)"
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]


def _mpirun_jaxtrainer() -> list[str]:
    """``mpirun ... -np 2 jaxtrainer``."""
    jaxtrainer = shutil.which("jaxtrainer")
    return [*_mpirun_np2(), *([jaxtrainer] if jaxtrainer else
                              [sys.executable, "-m", "jaxtrainer.commands._cli"])]


def _mpirun(root: Path, **env: str) -> subprocess.CompletedProcess:
    """``mpirun -np 2 jaxtrainer fit ppo`` (tiny) writing under ``root``."""
    return subprocess.run(
        [*_mpirun_jaxtrainer(), "fit", "ppo", *ARGS, f"trainer.default_root_dir={root}"],
        cwd=REPO, env=dict(_env(), **env), capture_output=True, text=True, timeout=180)


def _assert_bitwise_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b) and len(a) > 4
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _final_state(root: Path) -> dict[str, np.ndarray]:
    """The newest checkpoint of the one run directory under ``root``, leaf by leaf."""
    [run] = list(root.iterdir())  # one run directory
    step = max((p for p in (run / "checkpoints").iterdir() if p.name.isdigit()),
               key=lambda p: int(p.name))
    state = files._read(step, files.STATE)
    return {jax.tree_util.keystr(k): np.asarray(v)
            for k, v in jax.tree_util.tree_flatten_with_path(state)[0]}


BUDGET = "trainer.max_env_steps=1024"  # 2 updates of 512 env steps


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_documented_mpirun_command_trains_bitwise_as_jaxtrainer_launch(tmp_path):
    """``mpirun --allow-run-as-root --oversubscribe -np 2 jaxtrainer fit ppo
    trainer.strategy=multi_node``, as the multi-node guide gives it, at 2 of the
    recipe's 976 updates (the processes are what is tested here; PPO's learning is held
    by its own tests): one run directory, one final line, and the final state and
    evaluation bitwise those of ``jaxtrainer launch --nproc-per-node 2``."""
    (tmp_path / "mpi").mkdir()
    by_mpi = subprocess.run(
        [*_mpirun_jaxtrainer(), "fit", "ppo", "trainer.strategy=multi_node", BUDGET],
        cwd=tmp_path / "mpi", env=_env(), capture_output=True, text=True, timeout=400)
    assert by_mpi.returncode == 0, by_mpi.stderr[-3000:]
    assert "OMPI_COMM_WORLD_SIZE=2, OMPI_COMM_WORLD_RANK=1" in by_mpi.stderr  # rank 1 joined
    # Open MPI gives the processes a terminal: the progress bar is drawn, then the final line
    returns = re.findall(r"eval/episode_return=(-?[\d.]+)", by_mpi.stdout)
    assert len(returns) == 1, by_mpi.stdout[-3000:]  # process 0 alone reports

    (tmp_path / "launch").mkdir()
    by_launch = subprocess.run(
        [sys.executable, "-m", "jaxtrainer.commands._cli", "launch", "--nproc-per-node", "2",
         str(REPO / "recipes" / "ppo.py"), "trainer.strategy=multi_node", BUDGET],
        cwd=tmp_path / "launch", env=_env(), capture_output=True, text=True, timeout=400)
    assert by_launch.returncode == 0, by_launch.stderr[-3000:]
    mpi, launch = (_final_state(tmp_path / side / "runs" / "ppo") for side in ("mpi", "launch"))
    _assert_bitwise_equal(mpi, launch)
    assert f"eval/episode_return={returns[0]} " in by_launch.stdout  # the same evaluation


MPI_LIBRARY = os.environ.get("MPITRAMPOLINE_LIB", "")


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(not os.path.isfile(MPI_LIBRARY), reason=(
    "MPI collectives load MPI through MPItrampoline: set MPITRAMPOLINE_LIB to a libmpiwrapper.so "
    "built against the mpirun on PATH (multi-node guide, 'MPI collectives')"))
def test_mpi_collectives_end_cleanly_with_the_state_gloo_gives(tmp_path):
    by_mpi = _mpirun(tmp_path / "mpi", JAX_CPU_COLLECTIVES_IMPLEMENTATION="mpi")
    # exit status 0: no MPI call after MPI_Finalize when the process ends
    assert by_mpi.returncode == 0, by_mpi.stderr[-3000:]
    assert "MPI_FINALIZE" not in by_mpi.stderr and "abort" not in by_mpi.stderr.lower()
    by_gloo = _mpirun(tmp_path / "gloo")
    assert by_gloo.returncode == 0, by_gloo.stderr[-3000:]
    # two processes: a + b either way round, so the all-reduces agree to the bit
    _assert_bitwise_equal(_final_state(tmp_path / "mpi"), _final_state(tmp_path / "gloo"))

    # a user's script (no jaxtrainer command around it) that ends as scripts do: status 0
    script = ("from jaxtrainer import distributed as jd; jd.initialize(); import jax; "
              "import numpy as np; from jax.experimental import multihost_utils as mu; "
              "print('sum', mu.process_allgather(np.float32(jax.process_index() + 1)).sum())")
    plain = subprocess.run(
        [*_mpirun_np2(), sys.executable, "-c", script], cwd=tmp_path,
        env=dict(_env(), JAX_CPU_COLLECTIVES_IMPLEMENTATION="mpi"),
        capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.count("sum 3.0") == 2, plain.stdout
