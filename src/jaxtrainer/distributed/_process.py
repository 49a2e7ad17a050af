"""Process-level helpers for multi-process (multi-controller) runs.

In a ``jax.distributed`` run every process executes the same program; these
helpers answer "who am I" and move small host values between processes. They
are cheap no-ops in a single process, so code written with them runs anywhere.

Every helper that communicates (:func:`barrier`, :func:`broadcast_from_zero`)
is a collective: *every* process must call it, in the same order, or all of
them hang until the distributed runtime's timeout. Never
call them under ``if process_index() == 0``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
import threading
import time
from typing import Any

import jax
import numpy as np

from jaxtrainer.distributed import _cpu_collectives as cpu_collectives_lib
from jaxtrainer.distributed import peer_watch
from jaxtrainer.runtime._slurm import interactive_slurm_shell

# Environment read when the arguments are not given (set by ``jaxtrainer launch``).
ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
ENV_INIT_TIMEOUT = "JAXTRAINER_INIT_TIMEOUT"
ENV_HEARTBEAT_TIMEOUT = "JAXTRAINER_HEARTBEAT_TIMEOUT"

DEFAULT_INIT_TIMEOUT = 300
DEFAULT_HEARTBEAT_TIMEOUT = 60

# Every variable read to find the processes of a run, in the order error messages list them.
LAUNCH_ENV = (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID, ENV_INIT_TIMEOUT,
              ENV_HEARTBEAT_TIMEOUT, "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_STEP_ID",
              "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID",
              "SLURM_STEP_NODELIST", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
              "JOB_COMPLETION_INDEX", "HOSTNAME")

# SLURM's step ids from here up are not job steps that srun started for the
# user's tasks: 0xfffffffa is the interactive step that runs the shell of
# ``salloc`` (``SLURM_STEP_ID=4294967290``), 0xfffffffb the batch script,
# 0xfffffffc the extern step, 0xfffffffd a pending step.
_SLURM_MAX_NORMAL_STEP_ID = 0xFFFFFFF0


def launch_environment() -> str:
    """The launch variables of :data:`LAUNCH_ENV` that are set, as
    ``"NAME=value, ..."`` (for error messages), or a sentence saying none is."""
    found = [f"{name}={os.environ[name]}" for name in LAUNCH_ENV if name in os.environ
             and (name != "HOSTNAME" or indexed_job_pod())]
    if not found:
        return f"none of {', '.join(LAUNCH_ENV[:3])}, SLURM_*, OMPI_* or JOB_COMPLETION_INDEX is set"
    return ", ".join(found)


def _plain_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else None


def srun_tasks() -> int | None:
    """How many tasks the ``srun`` job step this process is a task of has, or
    ``None`` when this process is not a task of such a step. Environment only.

    A task of a job step that ``srun`` started has ``SLURM_JOB_ID``, a
    ``SLURM_PROCID`` below ``SLURM_STEP_NUM_TASKS`` (the step's tasks) and a
    ``SLURM_STEP_ID`` of an ordinary step (below 0xfffffff0). Not such a task:
    the shell of ``salloc`` (no step, or since Slurm 20.11 the interactive step
    ``SLURM_STEP_ID=4294967290`` with one task), an ``sbatch`` script (the batch
    step) and ``srun --pty bash``. ``SLURM_NTASKS`` is the allocation's task
    count in those (``salloc -n 4``: 4), so it is not read here. A job named
    ``bash`` or ``interactive`` (:func:`interactive_slurm_shell`) is never a
    launch, whatever its task layout, as Lightning decides it: to launch
    processes from such a shell, use ``jaxtrainer launch`` or ``srun
    --job-name=NAME ...``.
    """
    if "SLURM_JOB_ID" not in os.environ:
        return None
    step, tasks, rank = (_plain_int("SLURM_STEP_ID"), _plain_int("SLURM_STEP_NUM_TASKS"),
                         _plain_int("SLURM_PROCID"))
    if step is None or step >= _SLURM_MAX_NORMAL_STEP_ID or tasks is None or rank is None \
            or not 0 <= rank < tasks or (tasks > 1 and interactive_slurm_shell()):
        return None
    return tasks


KUBERNETES_COORDINATOR_PORT = 55527
"""The coordinator's port in a Kubernetes pod when ``JAX_COORDINATOR_ADDRESS``
is not set: the port JAX's own Kubernetes detection uses."""


def indexed_job_pod() -> bool:
    """Whether this process runs in a pod of a Kubernetes Job in ``Indexed``
    completion mode (also what a JobSet's jobs are): ``KUBERNETES_SERVICE_HOST``
    and ``JOB_COMPLETION_INDEX`` (set by the Job controller) are set."""
    return "KUBERNETES_SERVICE_HOST" in os.environ and \
        _plain_int("JOB_COMPLETION_INDEX") is not None


def kubernetes_coordinator(hostname: str, index: int, fqdn: str) -> str:
    """``host:port`` of pod 0 of this pod's indexed Job, from this pod's
    ``hostname`` (``<job>-<index>``), its ``index`` and its fully qualified
    name (``<job>-<index>.<subdomain>.<namespace>.svc.<domain>`` when the pod
    template sets ``subdomain`` to a headless service, as a JobSet does).

    >>> kubernetes_coordinator("train-3", 3, "train-3.jaxpods.default.svc.cluster.local")
    'train-0.jaxpods.default.svc.cluster.local:55527'

    Raises:
      RuntimeError: the hostname does not end in ``-<index>``, or the pod has
        no subdomain (pods of a Job reach each other only through a headless
        service); the message names the fix.
    """
    suffix = f"-{index}"
    if not hostname.endswith(suffix):
        raise RuntimeError(
            f"jaxtrainer.distributed.initialize: this Kubernetes pod's hostname {hostname!r} does "
            f"not end in -JOB_COMPLETION_INDEX ({suffix}), so pod 0 cannot be named; set "
            f"{ENV_COORDINATOR}=<pod 0's address>:<port> in the pod template")
    zero = f"{hostname[:-len(suffix)]}-0"
    if not fqdn.startswith(f"{hostname}.") or fqdn.count(".") < 2:
        raise RuntimeError(
            f"jaxtrainer.distributed.initialize: this Kubernetes pod ({hostname}) has no "
            f"subdomain (its full name is {fqdn!r}), so pod 0 ({zero}) has no DNS name: add a "
            "headless Service (clusterIP: None, selecting the Job's pods) and set the pod "
            "template's `subdomain:` to its name, or set "
            f"{ENV_COORDINATOR}=<pod 0's address>:<port> in the pod template")
    return f"{zero}{fqdn[len(hostname):]}:{KUBERNETES_COORDINATOR_PORT}"


def _kubernetes(coordinator_address: str | None, num_processes: int | None,
                process_id: int | None) -> tuple[str | None, int | None, int | None, str | None]:
    """``initialize``'s first three arguments in a pod of an indexed Job
    (:func:`indexed_job_pod`), from the environment alone (no access to the
    Kubernetes API is needed, unlike JAX's own detection): the process id is
    ``JOB_COMPLETION_INDEX``, the count ``JAX_NUM_PROCESSES`` (the Job's
    ``completions``, which the pod template passes on), the coordinator pod 0
    of the Job (:func:`kubernetes_coordinator`) unless ``JAX_COORDINATOR_ADDRESS``
    says otherwise. The fourth item turns JAX's cluster detection off.

    Raises:
      RuntimeError: no process count, or no way to name pod 0.
    """
    if process_id is None:
        process_id = _plain_int("JOB_COMPLETION_INDEX")
    if num_processes is None:
        raise RuntimeError(
            "jaxtrainer.distributed.initialize: this is a pod of an indexed Kubernetes Job "
            f"(JOB_COMPLETION_INDEX={os.environ['JOB_COMPLETION_INDEX']}) but "
            f"{ENV_NUM_PROCESSES} is not set: set it to the Job's `completions` in the pod "
            "template's env (the Job controller does not pass the count to its pods)")
    if coordinator_address is None and num_processes > 1:
        hostname = os.environ.get("HOSTNAME") or socket.gethostname()
        coordinator_address = kubernetes_coordinator(
            hostname, _plain_int("JOB_COMPLETION_INDEX") or 0, socket.getfqdn(hostname))
    return coordinator_address, num_processes, process_id, "deactivate"


def cluster_detected() -> bool:
    """Whether this process was started as one of several by a launcher
    :func:`initialize` can read, judged from the environment only (no JAX
    backend is started): ``JAX_NUM_PROCESSES > 1`` (``jaxtrainer launch``,
    explicit settings, a Kubernetes pod template), one task of an ``srun`` job
    step of several tasks (:func:`srun_tasks`), or Open MPI (``mpirun``) with
    ``OMPI_COMM_WORLD_SIZE > 1``.

    A SLURM allocation alone is not a launch: a shell from ``salloc -n 4``
    (its interactive step, ``SLURM_STEP_ID=4294967290``, one task) or a batch
    script started by ``sbatch -n 4`` is one process although ``SLURM_NTASKS``
    is 4, so ``strategy="auto"`` picks a one-process strategy there."""
    if (_plain_int(ENV_NUM_PROCESSES) or 0) > 1:
        return True
    tasks = srun_tasks()
    if tasks is not None and tasks > 1:
        return True
    return (_plain_int("OMPI_COMM_WORLD_SIZE") or 0) > 1


def join_detected_cluster() -> bool:
    """:func:`initialize` when :func:`cluster_detected`, else nothing; whether it
    joined. Commands call it first, before anything uses JAX (importing gymnax
    does), so ``mpirun -np 2 jaxtrainer fit ...`` or ``srun jaxtrainer fit ...``
    needs no other setting.

    Raises:
      RuntimeError, ValueError: from :func:`initialize`.
    """
    if not cluster_detected():
        return False
    initialize()
    return True


def _fill_from_environment(coordinator_address: str | None, num_processes: int | None,
                           process_id: int | None, cluster_detection_method: str | None,
                           ) -> tuple[int | None, int | None, str | None]:
    """``(num_processes, process_id, cluster_detection_method)`` for
    ``jax.distributed.initialize`` once the ``JAX_*`` variables were read.

    - A launch described in full (address, count and id) is used as given:
      SLURM variables of an enclosing allocation (a ``jaxtrainer launch`` in a
      ``salloc`` shell) must not change it, e.g. JAX's SLURM detection would
      give every rank the device of ``SLURM_LOCALID``. JAX's cluster detection
      is then turned off when SLURM variables are set but this process is
      not a task of an ``srun`` step.
    - A task of an ``srun`` step counts the step's tasks
      (``SLURM_STEP_NUM_TASKS``), not ``SLURM_NTASKS`` (which ``srun
      --preserve-env`` leaves at the allocation's count).
    - A SLURM allocation with ``SLURM_NTASKS > 1`` in a process that no
      ``srun`` step started (the shell of ``salloc``, an ``sbatch`` script), or
      an interactive job (named ``bash`` or ``interactive``) whose shell shows a
      layout of several tasks (``srun -n 4 --pty bash``): JAX would wait for
      processes that never start, so this raises at once.

    Under Open MPI (``OMPI_COMM_WORLD_SIZE`` set) or with an explicit
    ``cluster_detection_method`` JAX's own detection decides, as before.

    Raises:
      RuntimeError: the last case; the message names the variables read.
    """
    if cluster_detection_method is not None or "OMPI_COMM_WORLD_SIZE" in os.environ:
        return num_processes, process_id, cluster_detection_method  # mpirun: JAX reads it
    tasks = srun_tasks()
    if coordinator_address is not None and num_processes is not None and process_id is not None:
        outside_srun = "SLURM_JOB_ID" in os.environ and tasks is None
        return num_processes, process_id, ("deactivate" if outside_srun else None)
    if tasks is not None:
        if num_processes is None:
            num_processes = tasks
        if process_id is None:
            process_id = _plain_int("SLURM_PROCID")
        return num_processes, process_id, None
    allocated = _plain_int("SLURM_NTASKS")
    if "SLURM_JOB_ID" in os.environ and num_processes is None and allocated is not None \
            and allocated > 1:
        raise RuntimeError(
            "jaxtrainer.distributed.initialize: this process was not started by srun as one of "
            f"several tasks, but SLURM_NTASKS={allocated} would make JAX wait for "
            f"{allocated} processes that never start. Read from the environment: "
            f"{launch_environment()}. This looks like the shell of `salloc` (or an sbatch "
            "script): start one process per task with `srun python SCRIPT ...` inside the "
            "allocation, use `jaxtrainer launch --nproc-per-node N SCRIPT ...`, or use a "
            "one-process strategy (strategy='auto', 'single' or 'pmap')")
    layout = max(_plain_int("SLURM_STEP_NUM_TASKS") or 0, allocated or 0)
    if interactive_slurm_shell() and num_processes is None and layout > 1:
        raise RuntimeError(
            "jaxtrainer.distributed.initialize: this is an interactive SLURM shell "
            f"(SLURM_JOB_NAME={os.environ['SLURM_JOB_NAME']}), not a launch of several processes, "
            f"and JAX would wait for {layout} processes that never start. Read from the "
            f"environment: {launch_environment()}. Start the processes with `jaxtrainer launch "
            "--nproc-per-node N SCRIPT ...` or `srun --job-name=NAME -n N python SCRIPT ...`, "
            "or use a one-process strategy (strategy='auto', 'single' or 'pmap')")
    return num_processes, process_id, None


class _Watchdog:
    """Prints ``message`` to stderr after ``seconds`` unless cancelled: JAX ends
    the process (no Python exception) when the other processes do not join in
    time, so this names what was read just before that happens."""

    def __init__(self, seconds: float, message: str) -> None:
        self._timer = threading.Timer(seconds, self._fire, args=(message,))
        self._timer.daemon = True

    @staticmethod
    def _fire(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r}: expected an integer") from None


def _positive_seconds(name: str, value: int | float | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name}={value!r}: expected a positive number of seconds")
    return max(1, int(round(value)))


def _wait_for_coordinator(address: str, timeout: float, process_id: int | None,
                          num_processes: int | None) -> None:
    """Return once a TCP connection to ``address`` succeeds; raise RuntimeError
    naming it after ``timeout`` seconds."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"jaxtrainer.distributed.initialize: process {process_id} of {num_processes} "
                f"could not reach the coordinator at {address} within "
                f"initialization_timeout={timeout:g} s ({last}). Is process 0 running, and is "
                f"that address reachable from this machine? Read from the environment: "
                f"{launch_environment()}")
        time.sleep(0.2)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    initialization_timeout: int | float | None = None,
    heartbeat_timeout: int | float | None = None,
    cluster_detection_method: str | None = None,
    cpu_collectives: str | None = None,
) -> None:
    """Start ``jax.distributed`` (once per process; later calls do nothing).

    Arguments left ``None`` come from ``JAX_COORDINATOR_ADDRESS``,
    ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (set by ``jaxtrainer launch``);
    without those JAX detects the cluster itself (SLURM, Open MPI, Kubernetes,
    Cloud TPU). Under SLURM only the tasks of an ``srun`` step count as
    processes (:func:`srun_tasks`; their number is ``SLURM_STEP_NUM_TASKS``):
    the shell of ``salloc -n 4`` is one process, and ``initialize`` there
    raises at once instead of waiting for 3 more.

    When the other processes do not join within ``initialization_timeout``,
    JAX ends the process; just before, a message on stderr names the
    coordinator, the timeout and the launch variables read
    (:func:`launch_environment`), as do the errors raised here.

    Args:
      coordinator_address: ``"host:port"`` of process 0's coordinator service,
        used exactly as given.
      num_processes: processes in the run.
      process_id: this process's index, ``0 .. num_processes - 1``.
      initialization_timeout: seconds to wait for the coordinator and all
        processes to connect (``JAXTRAINER_INIT_TIMEOUT``, default 300).
      heartbeat_timeout: seconds without a heartbeat after which a process is
        lost: the survivors name it (``JAXTRAINER_HEARTBEAT_TIMEOUT``, default
        60; :mod:`~jaxtrainer.distributed.peer_watch`; JAX's: twice this).
      cluster_detection_method: passed to ``jax.distributed.initialize``.
      cpu_collectives: ``"gloo"`` or ``"mpi"`` (under ``mpirun``; default
        ``$JAX_CPU_COLLECTIVES_IMPLEMENTATION``, else JAX's setting; :mod:`jaxtrainer.distributed._cpu_collectives`).

    Raises:
      RuntimeError: JAX computations ran before this call, the coordinator
        could not be reached in time (the message names the address tried), or
        a SLURM allocation of several tasks without an ``srun`` step (the
        message names the variables read).
      ValueError: malformed arguments or environment.
    """
    if jax.distributed.is_initialized():
        return
    collectives = cpu_collectives_lib.resolve(cpu_collectives)
    coordinator_address, num_processes, process_id, cluster_detection_method = _arguments(
        coordinator_address, num_processes, process_id, cluster_detection_method)
    init_timeout = _seconds("initialization_timeout", initialization_timeout, ENV_INIT_TIMEOUT, DEFAULT_INIT_TIMEOUT)
    beat_timeout = _seconds("heartbeat_timeout", heartbeat_timeout, ENV_HEARTBEAT_TIMEOUT, DEFAULT_HEARTBEAT_TIMEOUT)
    if coordinator_address is not None and process_id not in (None, 0):
        # JAX aborts the whole process (no exception, no address) when the coordinator
        # cannot be reached; check it from Python first so the error names it.
        started = time.monotonic()
        _wait_for_coordinator(coordinator_address, init_timeout, process_id, num_processes)
        init_timeout = max(1, int(round(init_timeout - (time.monotonic() - started))))
    # Must precede backend creation; only affects the CPU client.
    jax.config.update("jax_cpu_collectives_implementation", collectives)
    try:
        with _join_watchdog(coordinator_address, num_processes, process_id, init_timeout):
            jax.distributed.initialize(
                coordinator_address=coordinator_address,
                num_processes=num_processes,
                process_id=process_id,
                cluster_detection_method=cluster_detection_method,
                initialization_timeout=init_timeout,
                heartbeat_timeout_seconds=peer_watch.runtime_heartbeat(beat_timeout),
            )
    except Exception as e:  # XlaRuntimeError (DEADLINE_EXCEEDED, UNAVAILABLE, ...), ValueError
        error = _join_error(e, coordinator_address, num_processes, process_id, init_timeout)
        if error is e:
            raise
        raise error from e
    if collectives == "mpi":  # a finished run must not end by MPI's abort
        cpu_collectives_lib.keep_cpu_client_until_exit()
    _watch_peers(beat_timeout)


def _watch_peers(seconds: float) -> None:
    """Start this process's :class:`~jaxtrainer.distributed.peer_watch.PeerWatch`
    (a lost process is named within ``seconds``); it marks this process done at
    exit, before ``jax.distributed`` shuts down (exit handlers run last first)."""
    from jax._src.distributed import global_state  # the coordination client (as orbax reads it)

    from jaxtrainer.runtime import _lost_process as lost_process

    count, me = jax.process_count(), jax.process_index()
    if count > 1 and global_state.client is not None:
        watch = peer_watch.PeerWatch(global_state.client, me, count, seconds,
                                     lost_process.exit_lost(me, count)).start()
        atexit.register(watch.stop)


def _seconds(name: str, given: int | float | None, env: str, default: int) -> int | float:
    """``given``, else the int in ``$env``, else ``default``; checked positive."""
    return _positive_seconds(name, given if given is not None else _env_int(env), default)


def _arguments(coordinator_address: str | None, num_processes: int | None,
               process_id: int | None, cluster_detection_method: str | None) -> tuple:
    """``initialize``'s arguments, the unset ones from the environment, checked.

    Raises:
      ValueError: a process count below 1, an id outside it, or an address
        without a port.
    """
    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
    if num_processes is None:
        num_processes = _env_int(ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(ENV_PROCESS_ID)
    if indexed_job_pod() and cluster_detection_method is None and srun_tasks() is None \
            and "OMPI_COMM_WORLD_SIZE" not in os.environ:
        coordinator_address, num_processes, process_id, cluster_detection_method = _kubernetes(
            coordinator_address, num_processes, process_id)
    else:
        num_processes, process_id, cluster_detection_method = _fill_from_environment(
            coordinator_address, num_processes, process_id, cluster_detection_method)
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes={num_processes}: expected >= 1")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id}: expected 0..{num_processes - 1}")
    if coordinator_address is not None and ":" not in coordinator_address:
        raise ValueError(f"coordinator_address={coordinator_address!r}: expected 'host:port'")
    return coordinator_address, num_processes, process_id, cluster_detection_method


def _unlaunched(coordinator_address: str | None, num_processes: int | None) -> bool:
    """Whether nothing names a run to join: no coordinator address or process
    count given or set, no ``srun`` step, no Open MPI rank, no indexed
    Kubernetes job (a multi_node run resumed in a plain shell)."""
    return (coordinator_address is None and num_processes is None and srun_tasks() is None
            and "OMPI_COMM_WORLD_SIZE" not in os.environ and not indexed_job_pod())


def _join_watchdog(coordinator_address: str | None, num_processes: int | None,
                   process_id: int | None, init_timeout: int) -> Any:
    """With several processes: print who joins where, and a watchdog that names
    the coordinator and the launch variables shortly before JAX ends a process
    whose peers never joined (JAX names neither). Otherwise (one process, or a
    process no launcher started: nothing to join, :func:`_unlaunched`) a no-op
    context: no line claims a coordinator that nothing names."""
    where = coordinator_address or "found by JAX from the launcher's variables"
    who = ("this process" if process_id is None or num_processes is None
           else f"process {process_id} of {num_processes}")
    if (num_processes is not None and num_processes <= 1) or \
            _unlaunched(coordinator_address, num_processes):
        return contextlib.nullcontext()
    print(f"jaxtrainer: {who} joining coordinator {where}; "
          f"waiting up to {init_timeout} s for every process ({launch_environment()})",
          file=sys.stderr, flush=True)
    warn_after = max(init_timeout - 1.0, 0.75 * init_timeout)
    return _Watchdog(
        warn_after,
        f"jaxtrainer.distributed.initialize: {who}: not every process has joined coordinator "
        f"{where} after {warn_after:g} s; JAX ends this process at initialization_timeout="
        f"{init_timeout} s if they do not. Read from "
        f"the environment: {launch_environment()}. Check that all "
        f"{num_processes if num_processes is not None else 'the'} processes were started (one "
        "per task by srun, or by `jaxtrainer launch`) and that they reach that address.")


def _join_error(e: Exception, coordinator_address: str | None, num_processes: int | None,
                process_id: int | None, init_timeout: int) -> Exception:
    """The error to raise when ``jax.distributed.initialize`` failed with ``e``:
    what went wrong, the address tried and the launch variables read."""
    alone = _unlaunched(coordinator_address, num_processes)
    if (isinstance(e, ValueError) and coordinator_address is None) or \
            (alone and "before any jax" in str(e).lower()):
        return ValueError(
            "jaxtrainer.distributed.initialize: no coordinator address and no cluster "
            "detected. Start the run with `jaxtrainer launch --nproc-per-node N "
            "script.py ...`, under SLURM/Open MPI, or set "
            f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID}"
            f"{'' if 'before any jax' in str(e).lower() else f' ({e})'}; "
            "in one process choose another strategy (trainer.strategy=single or pmap: a "
            f"multi_node run's checkpoint resumes under any). Read from the environment: "
            f"{launch_environment()}")
    if isinstance(e, ValueError):
        return e
    if "before any jax" in str(e).lower():
        return RuntimeError(
            "jaxtrainer.distributed.initialize: jax.distributed must start before any "
            "JAX computation, but JAX was already used in this process (importing "
            "gymnax does). Start the script "
            "with `jaxtrainer launch`, which initialises first, or call "
            "jaxtrainer.distributed.initialize() at the top of the script")
    where = coordinator_address or "found by JAX from the launcher's variables"
    return RuntimeError(
        f"jaxtrainer.distributed.initialize: process {process_id} of {num_processes} "
        f"could not join the run at coordinator {where} within initialization_timeout={init_timeout} s: "
        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}. Read from the "
        f"environment: {launch_environment()}")


def is_distributed() -> bool:
    """True when ``jax.distributed`` is initialised in this process (even with a
    single process). Does not start a JAX backend."""
    return bool(jax.distributed.is_initialized())


def process_index() -> int:
    """This process's index, ``0 .. process_count() - 1`` (0 in a single process)."""
    return int(jax.process_index())


def process_count() -> int:
    """Number of processes in the run (1 without ``jax.distributed``)."""
    return int(jax.process_count())


def global_ranks(devices: list[jax.Device] | None = None) -> list[int]:
    """Global ranks of this process's devices: their positions in ``devices``
    (default ``jax.devices()``, all devices of all processes, in mesh order).

    With 2 processes of 2 devices and the default order, process 0 owns ranks
    ``[0, 1]`` and process 1 owns ``[2, 3]``. A device's global rank is the
    value of ``jax.lax.axis_index`` for it on a 1-D mesh over ``devices``.
    """
    devices = list(jax.devices() if devices is None else devices)
    me = jax.process_index()
    return [i for i, d in enumerate(devices) if d.process_index == me]


def barrier(name: str) -> None:
    """Block until every process has reached the barrier called ``name``.

    A collective: every process must call it with the same ``name`` in the same
    order. A process that never arrives makes the others fail after the
    distributed runtime's heartbeat timeout instead of hanging forever.
    No-op in a single process.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"barrier name={name!r}: expected a non-empty string")
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _broadcast_str(value: str | None) -> str:
    from jax.experimental import multihost_utils

    data = np.frombuffer((value or "").encode(), np.uint8)
    length = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
    buf = np.zeros((max(length, 1),), np.uint8)
    buf[: min(length, data.size)] = data[:length]
    out = np.asarray(multihost_utils.broadcast_one_to_all(buf))
    return bytes(out[:length]).decode()


def rendezvous(name: str, timeout: float | None = None) -> None:
    """Block until every process has reached the rendezvous called ``name``,
    through ``jax.distributed``'s coordination service (no collective runs).

    Call it right before a program's first collective: XLA's CPU collectives
    (gloo) give up after 30 s when one process enters a collective that long
    before another (one compiled faster, one was busy in a hook), whatever the
    launcher's timeout; after a rendezvous the processes enter it together.
    ``name`` must be new to this run and the same on every process.

    Args:
      name: the rendezvous's id.
      timeout: seconds to wait for the other processes
        (default: ``JAXTRAINER_INIT_TIMEOUT``, else 300).

    Raises:
      RuntimeError: (``XlaRuntimeError``, DEADLINE_EXCEEDED) a process did not
        arrive in time. No-op in a single process.
    """
    if jax.process_count() == 1:
        return
    from orbax.checkpoint import multihost  # the coordination-service barrier orbax waits on

    seconds = timeout if timeout is not None else (_env_int(ENV_INIT_TIMEOUT) or DEFAULT_INIT_TIMEOUT)
    multihost.get_barrier_sync_fn()(key=name, timeout_ms=int(seconds * 1000))


def broadcast_from_zero(value: Any) -> Any:
    """Process 0's ``value`` on every process.

    ``value``: a ``str`` (e.g. a run directory chosen on process 0), a Python
    ``int``/``float``/``bool``, or a pytree of arrays with the same shapes and
    dtypes on every process. Returns it as the same kind of object (arrays as
    numpy arrays). A collective (see module docstring); returns ``value``
    unchanged in a single process.

    Raises:
      TypeError: ``str`` on one process must be ``str`` (or ``None``) on all.
    """
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    if value is None or isinstance(value, str):
        return _broadcast_str(value)
    if isinstance(value, (bool, int, float)):
        arr = np.asarray(value, np.float64 if isinstance(value, float) else np.int64)
        out = np.asarray(multihost_utils.broadcast_one_to_all(arr))
        return type(value)(out.item())
    return jax.tree.map(np.asarray, multihost_utils.broadcast_one_to_all(value))
