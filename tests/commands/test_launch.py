"""``jaxtrainer launch``: environment, rank prefixes, failures, signals, no leftovers.

Ranks here run tiny scripts that use no devices (each still joins the
jax.distributed run on 127.0.0.1 and a free port); every run has a hard timeout.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from jaxtrainer.commands import _launch as launch
from tests._support._xla import xla_flags

HARD_TIMEOUT = 120  # seconds, per launch

pytestmark = pytest.mark.timeout(HARD_TIMEOUT + 60)


def run_launcher(tmp_path, script: str, *args: str, extra: tuple[str, ...] = (), wait=True):
    path = tmp_path / "rank_script.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "JAXTRAINER_"))}
    env["XLA_FLAGS"] = xla_flags(1)
    cmd = [sys.executable, "-m", "jaxtrainer.commands._cli", "launch", "--nproc-per-node", "2",
           "--timeout", "20", "--grace", "2", *extra, str(path), *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=HARD_TIMEOUT)


def leftover(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()[1:]
            if marker in line and " Z" not in line and "ps -eo" not in line]


@pytest.mark.slow
def test_every_rank_gets_its_environment_and_a_prefixed_output(tmp_path):
    script = ("import os, sys, jax\n"
              "from jax.experimental import multihost_utils\n"
              "multihost_utils.sync_global_devices('joined')  # gloo connects its ranks\n"
              "print(os.environ['JAX_PROCESS_ID'], os.environ['JAX_NUM_PROCESSES'],\n"
              "      os.environ['JAX_COORDINATOR_ADDRESS'], jax.process_index(),\n"
              "      jax.process_count(), sys.argv[1:])\n"
              "print('to stderr', file=sys.stderr)\n")
    proc = run_launcher(tmp_path, script, "a", "--flag")
    assert proc.returncode == 0, proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if "['a', '--flag']" in line)
    assert len(lines) == 2
    for rank, line in enumerate(lines):
        prefix, pid, count, address, index, total = line.split()[:7][1:]
        assert (prefix, pid, count, index, total) == (f"{rank}]", str(rank), "2", str(rank), "2")
        assert address.startswith("127.0.0.1:") and int(address.split(":")[1]) > 0
    assert "[rank 0] to stderr" in proc.stderr and "[rank 1] to stderr" in proc.stderr
    assert "[Gloo]" not in proc.stdout + proc.stderr  # issue 68, 8d: every peer connected


@pytest.mark.slow
def test_a_failing_rank_is_named_and_the_others_are_stopped(tmp_path):
    marker = str(tmp_path)
    script = ("import os, subprocess, sys, time\n"
              "if os.environ['JAX_PROCESS_ID'] == '1':\n"
              "    time.sleep(1); print('ValueError: a bad value', file=sys.stderr); sys.exit(3)\n"
              # rank 0 and a child of it would run for 10 minutes
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
              "time.sleep(600)\n")
    start = time.monotonic()
    proc = run_launcher(tmp_path, script, marker)
    assert proc.returncode == 3
    summary = [ln for ln in proc.stderr.splitlines() if ln.startswith("jaxtrainer launch: rank")]
    assert summary[0] == "jaxtrainer launch: rank 1 failed first (exit code 3): ValueError: a bad value"
    assert len(summary) == 2 and re.fullmatch(  # SIGKILL when it outlives the grace period
        r"jaxtrainer launch: rank 0 stopped \(killed by SIG(TERM|KILL)\)", summary[1])
    # rank 0, told to stop, may have said it would checkpoint first: it cannot without rank 1
    assert proc.stderr.splitlines()[-1] == (
        "jaxtrainer launch: no rank could save a checkpoint after that (saving needs every rank): "
        "a jaxtrainer run resumes from its last complete one with trainer.ckpt_path=last")
    assert time.monotonic() - start < 60
    assert not leftover(marker)


@pytest.mark.slow
def test_sigterm_is_forwarded_to_every_rank(tmp_path):
    # Rank 0 hosts the coordination service, whose end takes rank 1 down with it:
    # it stays until rank 1 has run its handler too (at most 30 s), so that a slow
    # machine does not decide the result.
    script = ("import os, signal, sys, time\n"
              "rank, here = os.environ['JAX_PROCESS_ID'], sys.argv[1]\n"
              "def bye(signum, frame):\n"
              "    print('got', signal.Signals(signum).name, flush=True)\n"
              "    open(os.path.join(here, 'got' + rank), 'w').close()\n"
              "    deadline = time.monotonic() + 30\n"
              "    while rank == '0' and not os.path.exists(os.path.join(here, 'got1')) \\\n"
              "            and time.monotonic() < deadline:\n"
              "        time.sleep(0.05)\n"
              "    sys.exit(143)\n"
              "signal.signal(signal.SIGTERM, bye)\n"
              "print('ready', flush=True)\n"
              "for _ in range(6000):\n"  # short sleeps, as a training loop's steps
              "    time.sleep(0.1)\n")
    proc = run_launcher(tmp_path, script, str(tmp_path), wait=False)
    try:
        ready = 0
        for line in proc.stdout:
            ready += "ready" in line
            if ready == 2:
                break
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 128 + signal.SIGTERM
    assert "[rank 0] got SIGTERM" in out and "[rank 1] got SIGTERM" in out, (out, err)
    assert "stopped by SIGTERM" in err
    assert not leftover(str(tmp_path))


@pytest.mark.slow
def test_a_second_signal_is_forwarded_and_ranks_still_running_are_killed_after_a_grace(tmp_path):
    """A rank stops itself on the second signal (its own cleanup); one that does not
    is killed SECOND_SIGNAL_GRACE seconds later, not at once. The first arrives twice
    at once, as ``timeout`` sends it (to the launcher and to its process group): one
    request, forwarded once."""
    script = ("import os, signal, sys, time\n"
              "seen = []\n"
              "def count(signum, frame):\n"
              "    seen.append(signum)\n"
              "    print('signal', len(seen), flush=True)\n"
              "    if len(seen) == 2 and os.environ['JAX_PROCESS_ID'] == '1':\n"
              "        sys.exit(143)\n"
              "signal.signal(signal.SIGTERM, count)\n"
              "print('ready', flush=True)\n"
              "while True: time.sleep(0.05)\n")
    proc = run_launcher(tmp_path, script, str(tmp_path), wait=False)
    try:
        ready = 0
        for line in proc.stdout:
            ready += "ready" in line
            if ready == 2:
                break
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)  # the same request again, at once
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        second = time.monotonic()
        rc = proc.wait(timeout=60)
        elapsed = time.monotonic() - second
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 128 + signal.SIGTERM
    assert "[rank 0] signal 2" in out and "[rank 1] signal 2" in out  # both saw the second
    assert "signal 3" not in out  # and the first once
    assert launch.SECOND_SIGNAL_GRACE - 0.5 <= elapsed < launch.SECOND_SIGNAL_GRACE + 8, elapsed
    assert "rank 0: killed by SIGKILL" in err and "rank 1: exit code 143" in err, err
    assert not leftover(str(tmp_path))


@pytest.mark.parametrize("argv,message", [
    (["--nproc-per-node", "0", "x.py"], "--nproc-per-node=0"),
    (["--nproc-per-node", "2", "--nnodes", "2", "x.py"], "needs --coordinator"),
    (["--nproc-per-node", "2", "--coordinator", "nohost", "x.py"], "expected HOST:PORT"),
    (["--nproc-per-node", "2", "--timeout", "0", "x.py"], "--timeout=0"),
])
def test_bad_arguments_fail_before_starting_anything(argv, message, capsys):
    assert launch.main(argv) == 2
    assert message in capsys.readouterr().err


def test_launch_is_a_jaxtrainer_command():
    from jaxtrainer.commands._cli import COMMANDS

    assert COMMANDS["launch"][0] == "jaxtrainer.commands._launch:main"
    assert 0 < launch.free_port() < 65536


def test_gloos_connection_lines_stay_off_the_runs_stdout():
    """Issue 68, 8d: every rank's stdout carried gloo's ``[Gloo] Rank N is connected
    to ...`` (C++ std::cout, no setting silences it); the launcher leaves out the
    report that every peer connected and sends gloo's other lines to stderr."""
    import io
    import threading

    child = (b"[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer "
             b"ranks is : 1\n"
             b"jaxtrainer: step 2/2\n"
             b"[Gloo] Rank 1 is connected to 0 peer ranks. Expected number of connected peer "
             b"ranks is : 1\n"
             b"[Gloo] Rank 1 is NOT connected to: [0]\n"
             b"eval/episode_return=9.00 run_dir=runs/version_0")
    out, err = io.BytesIO(), io.BytesIO()
    launch._pump(io.BytesIO(child), b"[rank 1] ", out, threading.Lock(), None, err)
    assert out.getvalue() == (b"[rank 1] jaxtrainer: step 2/2\n"
                              b"[rank 1] eval/episode_return=9.00 run_dir=runs/version_0\n")
    assert err.getvalue() == (b"[rank 1] [Gloo] Rank 1 is connected to 0 peer ranks. Expected "
                              b"number of connected peer ranks is : 1\n"
                              b"[rank 1] [Gloo] Rank 1 is NOT connected to: [0]\n")
