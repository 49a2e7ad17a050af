"""Which processes count as a multi-process launch, judged from the environment.

Only a task of an ``srun`` job step of several tasks (or ``jaxtrainer launch``,
explicit ``JAX_*`` variables, Open MPI) makes ``strategy="auto"`` pick
``multi_node``. The shell of ``salloc -n 4`` (SLURM_NTASKS=4, one process) is
one process: ``auto`` picks a one-process strategy there, and an explicit
``multi_node`` fails at once naming the variables instead of waiting for 3
processes that never start. Peers that never join fail within the
initialization timeout, with a message naming the variables read.

Every subprocess runs with the cluster variables of this machine removed;
addresses are 127.0.0.1 and a free port only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jaxtrainer.commands._launch import free_port
from jaxtrainer.distributed import _process as process
from jaxtrainer.strategies import _registry as registry
from tests._support._xla import xla_flags
from tests._support.commands import TINY_PPO

pytestmark = pytest.mark.timeout(120)

CLUSTER_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SALLOC_", "SRUN_", "OMPI_", "PMI_", "PMIX_",
                    "JAX_COORDINATOR", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_LOCAL_DEVICE",
                    "JAXTRAINER_", "MEGASCALE_", "TPU_", "KUBERNETES_")

# The shell of `salloc -n 4` on Slurm >= 20.11: the allocation's interactive step
# (step id 0xfffffffa) runs one task; srun --preserve-env keeps SLURM_NTASKS=4.
SALLOC_SHELL = {
    "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_JOB_NAME": "interactive",
    "SLURM_STEP_ID": "4294967290", "SLURM_STEPID": "4294967290", "SLURM_NTASKS": "4",
    "SLURM_NPROCS": "4", "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1",
}
# Older Slurm (or LaunchParameters without use_interactive_step): salloc runs the
# shell itself; there is no step and no task id; the job is named after the shell.
SALLOC_PLAIN_SHELL = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "bash", "SLURM_NTASKS": "4",
                      "SLURM_NPROCS": "4", "SLURM_NNODES": "1"}
# A step id without any task layout (what a shell in a job step can show).
SALLOC_STEP_NO_TASKS = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "bash", "SLURM_STEP_ID": "0",
                        "SLURM_NTASKS": "4"}
# `srun --pty bash` inside the allocation: an ordinary step with one task.
SRUN_PTY_SHELL = {**SALLOC_SHELL, "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_NTASKS": "1",
                  "SLURM_NPROCS": "1"}
# A batch script started by `sbatch -n 4` (the batch step): one process.
SBATCH_SCRIPT = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train.sh", "SLURM_NTASKS": "4",
                 "SLURM_NPROCS": "4", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                 "SLURM_STEP_ID": "4294967291"}
# Task 2 of `srun --job-name=train -n 4 python train.py`: step 0 has 4 tasks. (A job
# named "bash" or "interactive" is never a launch, whatever its layout: see below.)
SRUN_TASK = {**SALLOC_SHELL, "SLURM_JOB_NAME": "train", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
             "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "2",
             "SLURM_STEP_NODELIST": "node001"}
# The shell of `srun -n 4 --pty bash`: the job is named after the shell and the
# shell sees the step's layout of 4 tasks, but it is one process.
SRUN_PTY_BASH_OF_4 = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "bash", "SLURM_STEP_ID": "0",
                      "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}


def clean_env(devices: int = 4, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLUSTER_PREFIXES)}
    env.update(XLA_FLAGS=xla_flags(devices), JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    return {**env, **extra}


def _only(monkeypatch, env):
    for name in list(os.environ):
        if name.startswith(CLUSTER_PREFIXES):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def run(code: str, env: dict[str, str], timeout: float = 90) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    return proc, time.monotonic() - start


QUIET = ("max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, "
         "compile_evaluation_ahead=False")
RESOLVE = f"""
import jax, jaxtrainer as jt
from jaxtrainer.distributed._process import srun_tasks
from jaxtrainer.strategies._registry import auto_name, cluster_detected
print("detected", cluster_detected(), srun_tasks(), auto_name())
every = jt.Trainer({QUIET})
one = jt.Trainer(devices=1, {QUIET})
print("trainers", every.strategy.name, one.strategy.name, every.num_devices, jax.process_count(),
      jax.distributed.is_initialized())
"""


@pytest.mark.parametrize("env,tasks", [(SALLOC_SHELL, None), (SRUN_PTY_SHELL, 1)],
                         ids=["salloc-interactive-step", "srun-pty-shell"])
def test_auto_is_one_process_in_an_allocation_shell(env, tasks):
    """A Trainer in a process of its own: one process, 4 local devices, no distributed
    run. The other shells (salloc's plain shell, a step without tasks, an sbatch
    script) take the same path after ``srun_tasks`` (no tasks: None); their
    ``srun_tasks``, ``cluster_detected`` and ``auto_name`` are
    ``test_srun_tasks_reads_the_step_not_the_allocation``'s."""
    proc, _ = run(RESOLVE, clean_env(4, **env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())
    assert lines["detected"] == f"False {tasks} pmap"
    assert lines["trainers"] == "pmap single 4 1 False"  # 4 local devices; no distributed run


@pytest.mark.slow
def test_auto_is_multi_node_for_a_task_of_an_srun_step():
    """Judged from the environment alone: no JAX backend, no distributed runtime."""
    code = """
import jax
from jaxtrainer.distributed._process import srun_tasks
from jaxtrainer.strategies._registry import auto_name, cluster_detected
print(cluster_detected(), srun_tasks(), auto_name(), jax.distributed.is_initialized())
"""
    proc, _ = run(code, clean_env(4, **SRUN_TASK))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "4", "multi_node", "False"]
    # srun --preserve-env -n 2 in the allocation of 4 (the step's 2 tasks count):
    # test_srun_tasks_reads_the_step_not_the_allocation's "preserve-env" case


@pytest.mark.parametrize("env,expected", [
    ({}, None),
    (SALLOC_SHELL, None),
    (SALLOC_PLAIN_SHELL, None),
    (SALLOC_STEP_NO_TASKS, None),
    (SBATCH_SCRIPT, None),
    (SRUN_PTY_SHELL, 1),
    (SRUN_TASK, 4),
    pytest.param({**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}, 2,
                 id="preserve-env"),  # srun --preserve-env -n 2 in an allocation of 4
    pytest.param(SRUN_PTY_BASH_OF_4, None, id="srun-pty-bash-of-4"),  # a shell, not a launch
    ({**SRUN_TASK, "SLURM_STEP_ID": "4294967292"}, None),   # the extern step
    ({**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "3"}, None),  # inconsistent
    ({**SRUN_TASK, "SLURM_STEP_NUM_TASKS": ""}, None),
    ({k: v for k, v in SRUN_TASK.items() if k != "SLURM_PROCID"}, None),
    ({k: v for k, v in SRUN_TASK.items() if k != "SLURM_JOB_ID"}, None),
])
def test_srun_tasks_reads_the_step_not_the_allocation(monkeypatch, env, expected):
    _only(monkeypatch, env)
    assert process.srun_tasks() == expected
    assert registry.cluster_detected() is (expected is not None and expected > 1)
    # this process runs no distributed runtime: the environment alone decides
    assert registry.auto_name() == ("multi_node" if registry.cluster_detected() else "pmap")


def test_what_initialize_passes_to_jax_under_slurm(monkeypatch):
    fill = process._fill_from_environment
    # a task of srun -n 2 --preserve-env in an allocation of 4: 2 processes, JAX finds the rest
    _only(monkeypatch, {**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"})
    assert fill(None, None, None, None) == (2, 1, None)
    # jaxtrainer launch in the salloc shell: used as given, SLURM detection off
    # (it would give every rank the device of SLURM_LOCALID=0)
    _only(monkeypatch, SALLOC_SHELL)
    assert fill("127.0.0.1:1234", 2, 1, None) == (2, 1, "deactivate")
    assert fill("127.0.0.1:1234", 2, 1, "slurm") == (2, 1, "slurm")  # an explicit choice wins
    # explicit settings in a real srun task: JAX still reads SLURM_LOCALID
    _only(monkeypatch, SRUN_TASK)
    assert fill("127.0.0.1:1234", 4, 2, None) == (4, 2, None)
    # no cluster at all: nothing changes
    _only(monkeypatch, {})
    assert fill(None, None, None, None) == (None, None, None)
    assert fill("127.0.0.1:1234", 2, 0, None) == (2, 0, None)
    # Open MPI (mpirun): JAX's own detection decides
    _only(monkeypatch, {**SALLOC_SHELL, "OMPI_COMM_WORLD_SIZE": "4"})
    assert fill(None, None, None, None) == (None, None, None)
    # salloc -n 1: one task allocated, a one-process run is right
    _only(monkeypatch, {**SALLOC_SHELL, "SLURM_NTASKS": "1"})
    assert fill(None, None, None, None) == (None, None, None)
    # the salloc shell of 4 tasks: refused at once, naming what was read
    _only(monkeypatch, SALLOC_SHELL)
    with pytest.raises(RuntimeError, match=r"not started by srun as one of several tasks, but "
                                           r"SLURM_NTASKS=4 would make JAX wait for 4 processes") as info:
        fill(None, None, None, None)
    for name in ("SLURM_JOB_ID=4242", "SLURM_JOB_NAME=interactive", "SLURM_STEP_ID=4294967290",
                 "SLURM_NTASKS=4", "SLURM_STEP_NUM_TASKS=1", "SLURM_PROCID=0"):
        assert name in str(info.value)


def test_launch_environment_lists_what_is_set(monkeypatch):
    _only(monkeypatch, {})
    assert process.launch_environment() == ("none of JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, "
                                            "JAX_PROCESS_ID, SLURM_*, OMPI_* or JOB_COMPLETION_INDEX is set")
    _only(monkeypatch, {"JAX_NUM_PROCESSES": "2", "SLURM_NTASKS": "4", "JAX_PROCESS_ID": "1"})
    assert process.launch_environment() == "JAX_NUM_PROCESSES=2, JAX_PROCESS_ID=1, SLURM_NTASKS=4"


MULTI_NODE = ("import jaxtrainer as jt; "
              f"jt.Trainer(strategy='multi_node', {QUIET}); print('joined')")


def test_explicit_multi_node_in_the_salloc_shell_fails_at_once_naming_the_variables():
    proc, seconds = run(MULTI_NODE, clean_env(1, **SALLOC_SHELL))
    assert proc.returncode == 1 and "joined" not in proc.stdout
    assert "RuntimeError: jaxtrainer.distributed.initialize: this process was not started by srun" \
        in proc.stderr
    for name in ("SLURM_NTASKS=4", "SLURM_STEP_ID=4294967290", "SLURM_STEP_NUM_TASKS=1",
                 "SLURM_JOB_NAME=interactive", "srun python SCRIPT", "jaxtrainer launch"):
        assert name in proc.stderr
    assert "joining coordinator" not in proc.stderr  # the runtime never started
    assert seconds < 60


@pytest.mark.slow
def test_multi_node_whose_peers_never_start_fails_within_the_timeout_naming_the_variables():
    """Process 0 of 2 hosts the coordinator; process 1 never starts. JAX ends
    process 0 after the initialization timeout (2 s); just before, a message
    names the coordinator and every launch variable read (here also those of the
    salloc shell the run was started from, which JAX is told to ignore)."""
    address = f"127.0.0.1:{free_port()}"
    env = clean_env(1, **SALLOC_SHELL, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2",
                    JAX_PROCESS_ID="0", JAXTRAINER_INIT_TIMEOUT="2")
    proc, seconds = run(MULTI_NODE, env)
    assert proc.returncode != 0 and "joined" not in proc.stdout
    assert f"process 0 of 2: not every process has joined coordinator {address} after 1.5 s; " \
           "JAX ends this process at initialization_timeout=2 s if they do not" in proc.stderr
    for name in (f"JAX_COORDINATOR_ADDRESS={address}", "JAX_NUM_PROCESSES=2", "JAX_PROCESS_ID=0",
                 "JAXTRAINER_INIT_TIMEOUT=2", "SLURM_NTASKS=4", "SLURM_STEP_ID=4294967290"):
        assert name in proc.stderr.split("not every process has joined")[1]
    assert seconds < 2 + 45


@pytest.mark.slow
def test_multi_node_without_its_coordinator_fails_within_the_timeout_naming_the_variables():
    """Process 1 of 2: nothing listens at the coordinator's address."""
    address = f"127.0.0.1:{free_port()}"
    env = clean_env(1, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID="1",
                    JAXTRAINER_INIT_TIMEOUT="2")
    proc, seconds = run(MULTI_NODE, env)
    assert proc.returncode == 1 and "joined" not in proc.stdout
    assert f"RuntimeError: jaxtrainer.distributed.initialize: process 1 of 2 could not reach the " \
           f"coordinator at {address} within initialization_timeout=2 s" in proc.stderr
    assert (f"Read from the environment: JAX_COORDINATOR_ADDRESS={address}, JAX_NUM_PROCESSES=2, "
            "JAX_PROCESS_ID=1, JAXTRAINER_INIT_TIMEOUT=2") in proc.stderr
    assert seconds < 2 + 45


@pytest.mark.slow
def test_an_interactive_srun_shell_is_not_a_launch():
    """`srun -n 4 --pty bash`: auto picks a one-process strategy (as Lightning decides
    it, a job named bash or interactive is not a managed launch), and an explicit
    multi_node fails at once naming the variables instead of waiting for 3 peers
    (what auto picks there: test_srun_tasks_reads_the_step_not_the_allocation's
    "srun-pty-bash-of-4" case, in this process; a one-process shell's Trainer:
    test_auto_is_one_process_in_an_allocation_shell)."""
    proc, seconds = run(MULTI_NODE, clean_env(1, **SRUN_PTY_BASH_OF_4))
    assert proc.returncode == 1 and "joined" not in proc.stdout
    assert "this is an interactive SLURM shell (SLURM_JOB_NAME=bash)" in proc.stderr
    for name in ("SLURM_STEP_NUM_TASKS=4", "SLURM_PROCID=0", "SLURM_STEP_ID=0",
                 "jaxtrainer launch"):
        assert name in proc.stderr
    assert "joining coordinator" not in proc.stderr and seconds < 60


# A pod of an indexed Job (completions: 2) whose template sets `subdomain: jaxpods`.
POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "JOB_COMPLETION_INDEX": "1",
       "HOSTNAME": "train-1", "JAX_NUM_PROCESSES": "2"}


def test_an_indexed_job_pod_finds_its_rank_count_and_pod_zero(monkeypatch):
    _only(monkeypatch, POD)
    monkeypatch.setattr(process.socket, "getfqdn",
                        lambda name="": f"{name}.jaxpods.default.svc.cluster.local")
    assert process.indexed_job_pod() and registry.cluster_detected()
    assert process._arguments(None, None, None, None) == (
        "train-0.jaxpods.default.svc.cluster.local:55527", 2, 1, "deactivate")
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.7:1234")  # the template's wins
    assert process._arguments(None, None, None, None)[0] == "10.0.0.7:1234"
    assert "JOB_COMPLETION_INDEX=1, HOSTNAME=train-1" in process.launch_environment()


def test_an_indexed_job_pod_without_what_it_needs_says_what_to_add(monkeypatch):
    _only(monkeypatch, {k: v for k, v in POD.items() if k != "JAX_NUM_PROCESSES"})
    with pytest.raises(RuntimeError, match="JAX_NUM_PROCESSES is not set: set it to the Job's "
                                           "`completions`"):
        process._arguments(None, None, None, None)
    _only(monkeypatch, POD)
    monkeypatch.setattr(process.socket, "getfqdn", lambda name="": name)  # no subdomain
    with pytest.raises(RuntimeError, match=r"has no subdomain .* headless Service"):
        process._arguments(None, None, None, None)
    with pytest.raises(RuntimeError, match=r"does not end in -JOB_COMPLETION_INDEX \(-1\)"):
        process.kubernetes_coordinator("train", 1, "train.jaxpods.default.svc")


@pytest.mark.slow
def test_two_pods_of_an_indexed_job_train_one_run(tmp_path):
    """Two processes with only what a pod of an indexed Job has (the template
    passes the count and, here, pod 0's address): `jaxtrainer fit` joins them,
    one run directory."""
    port = free_port()
    root = tmp_path / "runs"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo", "trainer.strategy=auto",
         *[a for a in TINY_PPO if not a.startswith("trainer.strategy")], "trainer.max_steps=4",
         f"trainer.default_root_dir={root}"],
        cwd=tmp_path, env=clean_env(1, **{**POD, "JOB_COMPLETION_INDEX": str(i),
                                          "HOSTNAME": f"train-{i}",
                                          "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    outs = [p.communicate(timeout=110) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    for i, (_, err) in enumerate(outs):
        assert f"process {i} of 2 joining coordinator 127.0.0.1:{port}" in err
    assert [p.name for p in root.iterdir()] == ["version_0"]
    assert "eval/episode_return=" in outs[0][0]
