"""MultiNodeStrategy across real processes: 2 processes x 2 fake CPU devices on
127.0.0.1, a free port, gloo collectives, a hard timeout on every run.

One launch (the ``two_process_run`` fixture) trains a toy module with every
built-in callback, resumes a one-process checkpoint, then runs a
PopulationTrainer; the tests read what it left.
What they pin: every process runs the same collectives, only rank 0 writes, the
checkpoints move between one and two processes, a slow rank 0 between
collectives does not time the others out, and a rank 35 s late to the first
collective still trains (that launch runs while the other one does: its 35 s are
a sleep). The failure tests, which start their own
processes, are ``test_multi_node_failures.py`` (a file of their own, so that a
parallel run's two workers take the two halves).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from tests._support._xla import xla_flags

WORKER = str(Path(__file__).with_name("test_multi_node_worker.py"))
HARD_TIMEOUT = 240  # seconds, per multi-process run
STEPS = 20

pytestmark = pytest.mark.timeout(HARD_TIMEOUT + 60)


def env_for(devices_per_process: int = 2, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "JAXTRAINER_"))}
    env["XLA_FLAGS"] = xla_flags(devices_per_process)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(WORKER).parent), str(Path(WORKER).parents[2]),
                                         env.get("PYTHONPATH", "")])
    return {**env, **extra}


def launch_cmd(*args: str, timeout: float = 10) -> list[str]:
    return [sys.executable, "-m", "jaxtrainer.commands._cli", "launch", "--nproc-per-node", "2",
            "--timeout", str(timeout), "--grace", "3", WORKER, *args]


def leftover(marker: str) -> list[str]:
    """Processes whose command line mentions ``marker`` (a test's tmp path)."""
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()[1:]
            if marker in line and " Z" not in line and "ps -eo" not in line]


def tree(root: Path) -> list[str]:
    """Every file and directory under ``root``, relative, sorted."""
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, dirs, files in os.walk(root) for n in dirs + files)


def created_by_rank_1(root: Path) -> list[str]:
    """Paths under ``root`` that rank 1 created: the worker gives rank 1 umask 077
    and rank 0 umask 022, so they lack the group/other read bits."""
    return [f for f in tree(root) if (root / f).stat().st_mode & 0o044 != 0o044]


def one_process_checkpoint(root: Path) -> None:
    """A one-process, one-device run of the worker's Toy module with a checkpoint at STEPS // 2."""
    sys.path.insert(0, str(Path(WORKER).parent))
    from test_multi_node_worker import Toy

    umask = os.umask(0o022)  # its files must look like rank 0's (see created_by_rank_1)
    try:
        jt.Trainer(strategy="single", max_steps=STEPS // 2, log_every_n_steps=5,
                   default_root_dir=root, logger=False, enable_progress_bar=False).fit(Toy())
    finally:
        os.umask(umask)


@pytest.fixture(scope="module")
def late_run(tmp_path_factory):
    """The ``late`` launch, started and left running: rank 1 sleeps 35 s on purpose,
    so the module's other launch and fits run meanwhile (``two_process_run`` starts it
    first); :func:`finished` waits for it."""
    out = tmp_path_factory.mktemp("late")
    with open(out / "stdout.txt", "w") as stdout, open(out / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(launch_cmd("late", str(out), timeout=120), cwd=out,
                                env=env_for(), stdout=stdout, stderr=stderr, text=True)
    yield proc, out
    if proc.poll() is None:  # a failed test left it running
        proc.kill()
        proc.wait()


def finished(proc: subprocess.Popen, out: Path) -> subprocess.CompletedProcess:
    """``proc`` (started by :func:`late_run`) waited for, its output read back."""
    try:
        proc.wait(timeout=HARD_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode,
                                       (out / "stdout.txt").read_text(),
                                       (out / "stderr.txt").read_text())


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, late_run):
    out = tmp_path_factory.mktemp("multi_node")
    one_process_checkpoint(out / "one")  # resumed by the two processes after training
    # rank 0 sleeps 8 s between two intervals, longer than the 5 s heartbeat timeout
    proc = subprocess.run(launch_cmd("all", str(out), str(STEPS), "8", str(out / "one"), timeout=5),
                          cwd=out, env=env_for(), capture_output=True, text=True,
                          timeout=HARD_TIMEOUT)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) if (out / f"rank{r}.json").exists()
             else None for r in (0, 1)]
    assert not leftover(str(out))
    return proc, ranks, out


@pytest.mark.slow
def test_every_process_runs_the_same_collectives_with_every_callback(two_process_run):
    """NaNGuard, EarlyStopping, LR/throughput monitors, Timer, loggers, progress bar,
    checkpoints every 5 steps and evaluation every 10 run on both processes without
    a deadlock, and reduce to the same global values everywhere."""
    proc, ranks, _ = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = ranks
    assert r0["process_count"] == r1["process_count"] == 2
    assert r0["num_devices"] == r1["num_devices"] == 4  # global sizes split over 4 devices
    assert (r0["global_ranks"], r1["global_ranks"]) == ([0, 1], [2, 3])
    assert r0["loss"] == r1["loss"] and r0["eval"] == r1["eval"]
    # rows[i] grows by i per step on whichever device holds it: mean over 8 rows
    assert r0["eval"] == pytest.approx(STEPS * 3.5)
    assert r0["log_dir"] == r1["log_dir"]  # chosen on process 0, broadcast
    assert r0["broadcast"] == r1["broadcast"] == "from rank 0"
    assert all(line.startswith("[rank ") for line in proc.stdout.splitlines() if line)


@pytest.mark.slow
def test_slow_rank_zero_between_collectives_does_not_time_out(two_process_run):
    """Rank 0 alone spends 8 s (more than the 5 s heartbeat timeout) between two
    compiled intervals; rank 1 waits in the next collective and the run completes."""
    proc, ranks, _ = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ranks[1]["loss"] == ranks[0]["loss"]


@pytest.mark.slow
def test_only_rank_zero_writes_logs_and_checkpoints(two_process_run):
    """Rank 1 writes nothing under the run directory: no log file and no checkpoint
    file (no orbax array shard, array metadata or OCDBT store of process 1); the
    logs exist once; every checkpoint is complete (no temporary directory left)."""
    proc, ranks, out = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ranks[1]["writes"] == []  # Python-level opens and mkdirs under runs/ on rank 1
    assert created_by_rank_1(out / "runs") == []  # any file, tensorstore's included
    assert "version_0/metrics.csv" in ranks[0]["writes"]
    # the population run (no logger, no checkpoint) makes no directory (issue 68, 8b)
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["version_0"]
    files = tree(out / "runs")
    # orbax names what a process writes after it (state/ocdbt.process_1, array_metadatas/process_1)
    assert {m for f in files for m in re.findall(r"process_\d+", f)} == {"process_0"}, files
    assert not [f for f in files if "tmp" in f.lower()], files
    checkpoints = out / "runs/version_0/checkpoints"
    assert sorted(int(p.name) for p in checkpoints.iterdir()) == [5, 10, 15, 20]
    for step in (5, 10, 15, 20):
        assert (checkpoints / str(step) / "commit_success.txt").exists()
        assert [p.name for p in (checkpoints / str(step) / "state").glob("ocdbt.process_*")] == \
            ["ocdbt.process_0"]
    logs = [f for f in files if not f.startswith("version_0/checkpoints")]
    assert [f for f in logs if f.endswith("metrics.csv")] == ["version_0/metrics.csv"]
    assert [f for f in logs if f.endswith("hparams.csv")] == ["version_0/hparams.csv"]
    events = [f for f in logs if "tfevents" in f]
    assert len(events) == 1 and events[0].startswith("version_0/tensorboard/"), logs
    assert all("[rank 0]" in line for line in proc.stdout.splitlines() if "env steps" in line)


@pytest.mark.slow
def test_two_process_checkpoint_restores_bit_for_bit_in_one_process(two_process_run, tmp_path):
    """The checkpoint process 0 wrote alone holds the two processes' global state
    exactly (sharded leaves gathered from both), restored on one device."""
    proc, _, out = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    sys.path.insert(0, str(Path(WORKER).parent))
    from test_multi_node_worker import Toy

    t = jt.Trainer(strategy="single", max_steps=STEPS, default_root_dir=tmp_path, logger=False,
                   enable_progress_bar=False)
    t.evaluate(Toy(), ckpt_path=out / f"runs/version_0/checkpoints/{STEPS}")
    want = np.load(out / "state.npz")
    got = {jax.tree_util.keystr(k): np.asarray(v)
           for k, v in jax.tree_util.tree_flatten_with_path(jax.device_get(t.state))[0]}
    assert sorted(got) == sorted(want.files)
    for name in want.files:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(got["['rows']"], STEPS * np.arange(8, dtype=np.float32))


@pytest.mark.slow
def test_one_process_checkpoint_resumes_in_two_processes(two_process_run):
    """ckpt_path='last' (resolved on process 0) in two processes on 4 devices: each
    process reads the one-device checkpoint and places its shards; the run goes on
    in the same run directory, and process 0 alone writes the next checkpoint."""
    proc, _, out = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed, straight = np.load(out / "resumed.npz"), np.load(out / "state.npz")
    np.testing.assert_array_equal(resumed["['rows']"], STEPS * np.arange(8, dtype=np.float32))
    for name in straight.files:  # 1- then 4-device gradient sums vs 4 devices throughout
        np.testing.assert_allclose(resumed[name], straight[name], rtol=1e-5, atol=1e-6, err_msg=name)
    run = out / "one/version_0"
    assert sorted(p.name for p in (out / "one").iterdir()) == ["version_0"]
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir()) == [STEPS // 2, STEPS]
    files = tree(run)
    assert created_by_rank_1(run) == []
    assert {m for f in files for m in re.findall(r"process_\d+", f)} == {"process_0"}, files
    assert not [f for f in files if "tmp" in f.lower()], files


@pytest.mark.slow
def test_two_process_checkpoint_resumes_in_one_process_on_one_device(two_process_run, tmp_path):
    proc, _, out = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    sys.path.insert(0, str(Path(WORKER).parent))
    from test_multi_node_worker import Toy

    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    resumed = jt.Trainer(strategy="single", max_steps=30, log_every_n_steps=5,
                         default_root_dir=tmp_path / "a", **quiet)
    resumed.fit(Toy(), ckpt_path=out / "runs/version_0/checkpoints/10")
    straight = jt.Trainer(strategy="single", max_steps=30, log_every_n_steps=5,
                          default_root_dir=tmp_path / "b", **quiet)
    straight.fit(Toy())
    a, b = jax.device_get(resumed.state), jax.device_get(straight.state)
    np.testing.assert_array_equal(a["rows"], b["rows"])
    np.testing.assert_array_equal(a["rows"], 30 * np.arange(8, dtype=np.float32))
    for x, y in zip(jax.tree.leaves(a["params"]), jax.tree.leaves(b["params"]), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)  # 4- vs 1-device gradient sums


@pytest.mark.slow
def test_population_fitness_bitwise_equal_to_one_process_one_device(two_process_run):
    proc, _, out = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    from tests.population.test_population import Recording, evolve

    one, _ = evolve(Recording(), devices=1, population_size=10)
    want = np.asarray(jax.device_get(one.state["history"]))
    got = np.load(out / "history.npy")
    assert got.shape == want.shape == (6, 10)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_multi_node_outside_a_distributed_run_explains_how_to_start_one(tmp_path):
    code = "import jaxtrainer as jt; jt.Trainer(strategy='multi_node', max_steps=1)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env_for(1),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "jaxtrainer launch" in proc.stderr and "JAX_COORDINATOR_ADDRESS" in proc.stderr


def test_process_helpers_in_one_process():
    from jaxtrainer import distributed as jd

    assert (jd.process_index(), jd.process_count(), jd.is_distributed()) == (0, 1, False)
    assert jd.global_ranks() == [0, 1, 2, 3]
    assert jd.broadcast_from_zero("runs/version_3") == "runs/version_3"
    tree = {"a": np.arange(3)}
    assert jd.broadcast_from_zero(tree) is tree
    jd.barrier("alone")
    with pytest.raises(ValueError, match="non-empty string"):
        jd.barrier("")


@pytest.mark.parametrize("devices", ["cpu", 0, [None]])
def test_multi_node_rejects_device_lists_before_initialising(devices):
    from jaxtrainer.strategies import MultiNodeStrategy

    with pytest.raises(ValueError, match="local devices per process"):
        MultiNodeStrategy(devices)


@pytest.mark.slow
def test_a_rank_35_s_late_to_the_first_collective_still_trains(late_run):
    """Rank 1 reaches the training program 35 s after rank 0 (it compiled slower,
    or a hook was busy). XLA's CPU collectives give up after 30 s whatever
    --timeout says (``Gloo context initialization failed: DEADLINE_EXCEEDED``; gloo's
    own deadline, which neither jax.distributed nor XLA_FLAGS sets); the ranks now
    meet before the program starts, within --timeout."""
    proc = finished(*late_run)
    assert not leftover(str(late_run[1]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(ln for ln in proc.stdout.splitlines() if "done at step" in ln) == [
        "[rank 0] done at step 4", "[rank 1] done at step 4"]
