"""Collectives between processes on CPU: gloo (default) or MPI
(``JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi``, through MPItrampoline); a wrong
choice or a missing piece fails before JAX starts, naming what to set."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import jax
import pytest

from jaxtrainer import distributed as jd
from jaxtrainer.distributed import _cpu_collectives as cpu_collectives

LAUNCHER = "OMPI_COMM_WORLD_SIZE"


@pytest.fixture
def clean(monkeypatch):
    for name in (cpu_collectives.ENV, cpu_collectives.ENV_MPI_LIBRARY,
                 *cpu_collectives.MPI_LAUNCHER_ENV):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_gloo_unless_asked(clean):
    assert cpu_collectives.resolve() == "gloo"
    clean.setenv(cpu_collectives.ENV, "gloo")
    assert cpu_collectives.resolve() == "gloo"


def test_jaxs_own_setting_is_asked_too(clean):
    jax.config.update("jax_cpu_collectives_implementation", "mpi")  # as a script may set it
    try:
        with pytest.raises(RuntimeError, match="jax_cpu_collectives_implementation='mpi'"):
            cpu_collectives.resolve()
    finally:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def test_an_unknown_choice_lists_the_choices(clean):
    with pytest.raises(ValueError, match=re.escape("cpu_collectives='nccl': expected one of "
                                                   "'gloo', 'mpi'")):
        cpu_collectives.resolve("nccl")
    clean.setenv(cpu_collectives.ENV, "megascale")
    with pytest.raises(ValueError, match="JAX_CPU_COLLECTIVES_IMPLEMENTATION='megascale'"):
        cpu_collectives.resolve()


def test_mpi_needs_an_mpi_launcher_and_the_wrapper_library(clean, tmp_path):
    clean.setenv(cpu_collectives.ENV, "mpi")
    with pytest.raises(RuntimeError, match="no MPI launcher started this process .*mpirun -np N"):
        cpu_collectives.resolve()
    clean.setenv(LAUNCHER, "2")
    with pytest.raises(RuntimeError, match="MPITRAMPOLINE_LIB is not set"):
        cpu_collectives.resolve()
    missing = tmp_path / "libmpiwrapper.so"
    clean.setenv(cpu_collectives.ENV_MPI_LIBRARY, str(missing))
    with pytest.raises(RuntimeError, match=re.escape(f"MPITRAMPOLINE_LIB='{missing}' names no file")):
        cpu_collectives.resolve()
    missing.write_bytes(b"")
    assert cpu_collectives.resolve() == "mpi"


def test_initialize_checks_the_choice_before_starting_anything(clean):
    clean.setenv(LAUNCHER, "2")
    clean.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1")  # never reached
    clean.setenv("JAX_NUM_PROCESSES", "2")
    clean.setenv("JAX_PROCESS_ID", "1")
    with pytest.raises(RuntimeError, match="cpu_collectives='mpi': jaxlib loads MPI"):
        jd.initialize(cpu_collectives="mpi", initialization_timeout=1)


# Before JAX starts (jaxtrainer fit, each rank of jaxtrainer launch), the variables JAX and
# jaxlib read at import; and the launcher refuses MPI collectives (its processes are not MPI's).
@pytest.mark.slow
@pytest.mark.parametrize("env, status, message", [
    ({"JAX_CPU_COLLECTIVES_IMPLEMENTATION": "nccl"}, 2,
     "jaxtrainer fit: error: JAX_CPU_COLLECTIVES_IMPLEMENTATION='nccl': expected one of 'gloo', "
     "'mpi' (or unset: gloo)"),
    ({"MPITRAMPOLINE_LIB": "/nonexistent.so"}, 2,
     "jaxtrainer fit: error: MPITRAMPOLINE_LIB='/nonexistent.so' names no file: jaxlib loads it "
     "when JAX starts"),
])
def test_the_command_names_a_bad_collectives_variable_before_jax_starts(env, status, message):
    proc = subprocess.run([sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo"],
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=60)
    assert proc.returncode == status and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_jaxtrainer_launch_refuses_mpi_collectives_before_starting_a_process(clean, capsys):
    from jaxtrainer.commands import _launch as launch

    clean.setenv(cpu_collectives.ENV, "mpi")
    assert launch.main(["--nproc-per-node", "2", "recipes/ppo.py"]) == 2
    assert "MPI collectives need processes that an MPI launcher starts; run mpirun" in \
        capsys.readouterr().err
