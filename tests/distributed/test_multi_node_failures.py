"""MultiNodeStrategy when a process fails: each test starts its own processes (2
processes x 2 fake CPU devices on 127.0.0.1, a free port, gloo collectives, a hard
timeout on every run; the program each rank runs is ``test_multi_node_worker.py``).

What they pin: a killed rank stops the launcher and every process, SIGTERM
checkpoints every rank at the same step, a survivor names the lost process and its
last checkpoint (and the run resumes bit for bit), and an unreachable coordinator or
a rank that never starts fails within the bound, naming the address.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jaxtrainer.commands._launch import free_port
from tests.distributed.test_multi_node import HARD_TIMEOUT, WORKER, env_for, launch_cmd, leftover

pytestmark = pytest.mark.timeout(HARD_TIMEOUT + 60)


@pytest.mark.slow
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
