"""Collectives between processes on CPU: gloo (default) or MPI
(``JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi``, through MPItrampoline); a wrong
choice or a missing piece fails before JAX starts, naming what to set."""

from __future__ import annotations

import re

import jax
import pytest

from jaxtrainer import distributed as jd
from jaxtrainer.distributed import cpu_collectives

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


def test_mpi_needs_the_wrapper_library_and_an_mpi_launcher(clean, tmp_path):
    clean.setenv(cpu_collectives.ENV, "mpi")
    with pytest.raises(RuntimeError, match="MPITRAMPOLINE_LIB is not set"):
        cpu_collectives.resolve()
    missing = tmp_path / "libmpiwrapper.so"
    clean.setenv(cpu_collectives.ENV_MPI_LIBRARY, str(missing))
    with pytest.raises(RuntimeError, match=re.escape(f"MPITRAMPOLINE_LIB='{missing}' names no file")):
        cpu_collectives.resolve()
    missing.write_bytes(b"")
    with pytest.raises(RuntimeError, match="no MPI launcher started this process .*mpirun -np N"):
        cpu_collectives.resolve()
    clean.setenv(LAUNCHER, "2")
    assert cpu_collectives.resolve() == "mpi"


def test_initialize_checks_the_choice_before_starting_anything(clean):
    clean.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1")  # never reached
    clean.setenv("JAX_NUM_PROCESSES", "2")
    clean.setenv("JAX_PROCESS_ID", "1")
    with pytest.raises(RuntimeError, match="cpu_collectives='mpi': jaxlib loads MPI"):
        jd.initialize(cpu_collectives="mpi", initialization_timeout=1)
