"""MultiNodeStrategy across real processes: 2 processes x 2 fake CPU devices on
127.0.0.1, a free port, gloo collectives, a hard timeout on every run.

One launch (the ``two_process_run`` fixture) trains a toy module with every
built-in callback, resumes a one-process checkpoint, then runs a
PopulationTrainer; the tests read what it left.
Failure tests start their own processes. What they pin: every process runs the
same collectives, an unreachable coordinator fails fast naming its address, and a
slow rank 0 between collectives does not time the others out.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.commands._launch import free_port
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
def two_process_run(tmp_path_factory):
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


def test_slow_rank_zero_between_collectives_does_not_time_out(two_process_run):
    """Rank 0 alone spends 8 s (more than the 5 s heartbeat timeout) between two
    compiled intervals; rank 1 waits in the next collective and the run completes."""
    proc, ranks, _ = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ranks[1]["loss"] == ranks[0]["loss"]


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


def test_population_fitness_bitwise_equal_to_one_process_one_device(two_process_run):
    proc, _, out = two_process_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    from tests.population.test_population import Recording, evolve

    one, _ = evolve(Recording(), devices=1, population_size=10)
    want = np.asarray(jax.device_get(one.state["history"]))
    got = np.load(out / "history.npy")
    assert got.shape == want.shape == (6, 10)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.slow
def test_a_rank_35_s_late_to_the_first_collective_still_trains(tmp_path):
    """Rank 1 reaches the training program 35 s after rank 0 (it compiled slower,
    or a hook was busy). XLA's CPU collectives give up after 30 s whatever
    --timeout says (``Gloo context initialization failed: DEADLINE_EXCEEDED``);
    the ranks now meet before the program starts, within --timeout."""
    proc = subprocess.run(launch_cmd("late", str(tmp_path), timeout=120), cwd=tmp_path,
                          env=env_for(), capture_output=True, text=True, timeout=HARD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(ln for ln in proc.stdout.splitlines() if "done at step" in ln) == [
        "[rank 0] done at step 4", "[rank 1] done at step 4"]


def test_killing_rank_1_mid_run_stops_the_launcher_and_every_process(tmp_path):
    proc = subprocess.Popen(launch_cmd("forever", str(tmp_path), timeout=5), cwd=tmp_path,
                            env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        pid = None
        deadline = time.monotonic() + HARD_TIMEOUT
        for line in proc.stdout:  # "[rank 1] pid 123 step 50"
            m = re.match(r"\[rank 1\] pid (\d+) step", line)
            if m:
                pid = int(m.group(1))
                break
            assert time.monotonic() < deadline
        assert pid is not None, proc.stderr.read()[-3000:]
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        rc = proc.wait(timeout=60)
        elapsed = time.monotonic() - start
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc != 0
    # The launcher names the killed rank when it is reaped first; under load the
    # survivor (rank 0) can exit on the lost connection before rank 1 is reaped.
    blamed = r"launch: rank (1 failed first \(killed by SIGKILL\)|0 failed first \(exit code)"
    assert re.search(blamed, err), err[-2000:]
    assert elapsed < 3 + 3 + 10  # settle 3 s, --grace 3, plus polling and teardown
    assert not leftover(str(tmp_path))


@pytest.mark.slow
def test_sigterm_to_the_launcher_checkpoints_every_rank_at_the_same_step(tmp_path):
    proc = subprocess.Popen(launch_cmd("forever", str(tmp_path), timeout=10), cwd=tmp_path,
                            env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stdout:
            if re.match(r"\[rank 1\] pid \d+ step", line):
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=HARD_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "rank 0: exit code 143, rank 1: exit code 143" in err
    steps = sorted(int(p.name) for p in (tmp_path / "runs/version_0/checkpoints").iterdir())
    assert len(steps) == 1 and f"stopped by SIGTERM at step {steps[0]}" in err
    assert not leftover(str(tmp_path))


def _kill_rank_1(tmp_path, args, watched, when):
    """Two ranks of the worker's ``forever`` mode with ``args`` (5 s heartbeat, no
    launcher); SIGKILL rank 1 once ``when(line)`` holds for a stdout line of rank
    ``watched``. Returns rank 0's exit status, the seconds it took to exit after
    the kill, its stderr, and that line."""
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = env_for(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
                      JAX_PROCESS_ID=str(rank), JAXTRAINER_HEARTBEAT_TIMEOUT="5",
                      JAXTRAINER_INIT_TIMEOUT="60")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "jaxtrainer.commands._launch", WORKER, "forever", str(tmp_path),
             *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True))
    try:
        seen = next((line for line in procs[watched].stdout if when(line)), "")
        procs[1].kill()
        start = time.monotonic()
        rc = procs[0].wait(timeout=90)
        return rc, time.monotonic() - start, procs[0].stderr.read(), seen
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.slow
def test_survivor_of_a_dead_rank_exits_within_the_heartbeat_bound_and_the_run_resumes(tmp_path):
    """Without the launcher (e.g. under SLURM): rank 1 is SIGKILLed mid-training; rank 0
    notices (gloo connection reset, then the 5 s heartbeat timeout), exits with an error
    naming the lost process and the last complete checkpoint; the same run with
    ``ckpt_path="last"`` then ends bitwise equal to a run never interrupted."""
    def at_step_150(line):  # "pid 123 step 150" from rank 1: a few checkpoints written
        m = re.search(r"step (\d+)", line)
        return m and int(m.group(1)) >= 150

    rc, elapsed, err, _ = _kill_rank_1(tmp_path, ["25"], 1, at_step_150)
    assert rc == 1, err[-3000:]
    assert elapsed < 5 + 20, err[-3000:]
    # one line naming the lost process and what there is to resume from, no traceback
    lost = [ln for ln in err.splitlines() if "lost process 1 of the run while running training" in ln]
    assert len(lost) == 1 and lost[0].startswith("jaxtrainer: process 0 of 2: "), err[-3000:]
    assert "Traceback" not in err
    named = re.search(r"The last complete checkpoint is (\S+);", lost[0])
    assert named, lost[0]
    last = int(Path(named.group(1)).name)
    # saves are written after every callback saw the step, so when rank 1 prints step 150
    # the save of 125 may still be finishing: 100 at least is complete
    assert last >= 100 and last % 25 == 0, lost[0]
    assert not leftover(str(tmp_path))

    # the same run again with ckpt_path="last", and one never interrupted, to the same step
    steps = last + 30
    proc = subprocess.run(launch_cmd("resume", str(tmp_path), str(steps), timeout=30),
                          cwd=tmp_path, env=env_for(), capture_output=True, text=True,
                          timeout=HARD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(rf"resuming from checkpoint \S+ at step {last} ", proc.stdout + proc.stderr), \
        (proc.stdout + proc.stderr)[-3000:]
    a, b = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "whole.npz")
    assert sorted(a.files) == sorted(b.files) and len(a.files) > 2
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert float(a["['rows']"][1]) == steps  # row 1 grows by 1 per step: it ran to the end
    assert not leftover(str(tmp_path))


@pytest.mark.slow
def test_a_survivor_in_no_collective_still_names_the_lost_process_and_its_checkpoint(tmp_path):
    """Rank 0 sits in a hook (in no collective: as when writing a big checkpoint)
    when rank 1 is SIGKILLed: no collective can fail, so before the peer watch
    JAX's coordination service ended rank 0 after the heartbeat timeout with its
    own fatal line (status 134). Now rank 0 prints the same line as a failed
    collective gives, naming process 1 and the last checkpoint written before
    the stall, and exits with 1."""
    stalling = re.compile(r"stalling at step (\d+)").search  # rank 0 is in the hook it never leaves
    rc, elapsed, err, line = _kill_rank_1(tmp_path, ["5", "51"], 0, stalling)
    stalled = stalling(line)
    assert rc == 1, err[-3000:]
    assert "Terminating process" not in err and "Traceback" not in err, err[-3000:]
    assert elapsed < 5 + 10, (elapsed, err[-3000:])  # the 5 s heartbeat timeout, a beat late at most
    lost = [ln for ln in err.splitlines() if "lost process 1 of the run" in ln]
    assert len(lost) == 1 and lost[0].startswith("jaxtrainer: process 0 of 2: "), err[-3000:]
    assert "(no heartbeat for 5 s); stopping." in lost[0], lost[0]
    named = re.search(r"The last complete checkpoint is (\S+);", lost[0])
    assert named, lost[0]  # one written before the stall (checkpoints come after other hooks)
    assert 0 < int(Path(named.group(1)).name) < int(stalled.group(1)), (lost[0], stalled.group(0))
    assert not leftover(str(tmp_path))


def _initialize(tmp_path, **kw):
    code = ("import sys; from jaxtrainer.distributed import initialize; "
            f"initialize(**{kw!r}); print('joined')")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env_for(1),
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


@pytest.mark.slow
def test_unreachable_coordinator_fails_fast_and_names_the_address(tmp_path):
    """An explicit address is used as given; a closed port fails after the
    configured initialization timeout (3 s, plus interpreter start-up)."""
    address = f"127.0.0.1:{free_port()}"
    proc, seconds = _initialize(tmp_path, coordinator_address=address, num_processes=2,
                                process_id=1, initialization_timeout=3)
    assert proc.returncode != 0 and "joined" not in proc.stdout
    assert address in proc.stderr and "initialization_timeout=3 s" in proc.stderr
    assert seconds < 3 + 40


@pytest.mark.slow
def test_a_rank_that_never_starts_fails_the_others_within_the_bound(tmp_path):
    """Process 0 hosts the coordinator; process 1 never comes: process 0 stops
    after the initialization timeout (JAX aborts it; the line before names the
    coordinator and the timeout)."""
    address = f"127.0.0.1:{free_port()}"
    proc, seconds = _initialize(tmp_path, coordinator_address=address, num_processes=2,
                                process_id=0, initialization_timeout=3)
    assert proc.returncode != 0 and "joined" not in proc.stdout
    assert f"process 0 of 2 joining coordinator {address}; waiting up to 3 s" in proc.stderr
    assert seconds < 3 + 40


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
