"""Which library carries the collectives between processes on CPU devices.

* ``"gloo"`` (the default): TCP, works with any launcher (``jaxtrainer launch``,
  SLURM, Kubernetes, ``mpirun``). Each all-reduce is a ring of small messages,
  every one a thread wake-up on each side: 0.6-3.5 ms for 36 KB between two
  processes of a 2-core virtual machine, however fast the link.
* ``"mpi"``: the MPI library the processes were started with, through
  `MPItrampoline <https://github.com/eschnett/MPItrampoline>`_ (the only way
  jaxlib loads MPI). Processes on one machine exchange through shared memory
  (about 20 us for the same 36 KB); between machines MPI uses the site's fabric.
  Needs ``MPITRAMPOLINE_LIB`` pointing to a ``libmpiwrapper.so`` built with
  `MPIwrapper <https://github.com/eschnett/MPIwrapper>`_ against that MPI, and
  processes started by ``mpirun``/``mpiexec``/``srun --mpi=pmix``.

JAX's own variable ``JAX_CPU_COLLECTIVES_IMPLEMENTATION`` selects it when
:func:`jaxtrainer.distributed.initialize` is not given ``cpu_collectives``.
"""

from __future__ import annotations

import ctypes
import os

import jax

from jaxtrainer._arguments import CPU_COLLECTIVES as CHOICES
from jaxtrainer._arguments import CPU_COLLECTIVES_ENV as ENV
from jaxtrainer._arguments import MPI_LIBRARY_ENV as ENV_MPI_LIBRARY

# set in every process an MPI launcher starts (Open MPI; MPICH/Hydra and Intel MPI; PMIx, e.g.
# ``srun --mpi=pmix``)
MPI_LAUNCHER_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def resolve(choice: str | None = None) -> str:
    """``choice``, else ``$JAX_CPU_COLLECTIVES_IMPLEMENTATION``, else JAX's
    ``jax_cpu_collectives_implementation`` setting (``"gloo"`` unless changed); checked.

    Raises:
      ValueError: not one of :data:`CHOICES` (the message lists them).
      RuntimeError: ``"mpi"`` in a process no MPI launcher started (MPI would
        see a one-process world and every collective would wait forever), or
        without ``MPITRAMPOLINE_LIB`` naming an existing file.
    """
    if choice is not None:
        source, value = "cpu_collectives", choice
    elif os.environ.get(ENV):
        source, value = ENV, os.environ[ENV]
    else:
        source = "jax_cpu_collectives_implementation"
        value = jax.config.jax_cpu_collectives_implementation or "gloo"
    if value not in CHOICES:
        raise ValueError(f"{source}={value!r}: expected one of {', '.join(map(repr, CHOICES))}")
    if value == "mpi":
        if not any(name in os.environ for name in MPI_LAUNCHER_ENV):
            raise RuntimeError(
                f"{source}='mpi': no MPI launcher started this process (none of "
                f"{', '.join(MPI_LAUNCHER_ENV)} is set). Start every process with "
                "mpirun -np N (or srun --mpi=pmix); jaxtrainer launch starts processes MPI "
                "does not know: use 'gloo' with it")
        library = os.environ.get(ENV_MPI_LIBRARY, "")
        if not library or not os.path.isfile(library):
            found = f"{ENV_MPI_LIBRARY}={library!r} names no file" if library else \
                f"{ENV_MPI_LIBRARY} is not set"
            raise RuntimeError(
                f"{source}='mpi': jaxlib loads MPI through MPItrampoline, and {found}. Build "
                "MPIwrapper (https://github.com/eschnett/MPIwrapper) with your MPI's mpicc and "
                f"set {ENV_MPI_LIBRARY}=<prefix>/lib/libmpiwrapper.so, or use 'gloo'")
    return value


def keep_cpu_client_until_exit() -> None:
    """Never destroy the CPU client of this process (call after
    ``jax.distributed.initialize`` with MPI collectives).

    JAX finalises MPI in an exit handler; the client frees its MPI
    communicators later, when Python tears its objects down, and freeing one
    after ``MPI_Finalize`` aborts the process with status 1 (Open MPI: "The
    MPI_Comm_free() function was called after MPI_FINALIZE was invoked"),
    which turns every finished run into a failed job. One extra reference
    keeps the client alive until the process ends; the operating system
    reclaims it then.
    """
    client = jax.devices("cpu")[0].client
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(client))
