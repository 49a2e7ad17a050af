"""Each run reserves its own directory, even when runs start at the same instant;
a resume whose budget is already spent changes nothing and says why."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import jaxtrainer as jt
from jaxtrainer.rundir import runs
from tests._support import toys
from tests._support._xla import xla_flags

_RUN = textwrap.dedent("""
    import os, sys, time
    import jaxtrainer as jt
    from tests._support import toys
    root, ready, go = sys.argv[1:4]
    t = toys.trainer(root, strategy="single", devices=1, max_steps=2, seed=int(sys.argv[4]),
                     callbacks=[jt.CSVLogger()])
    module = toys.Regression()
    open(ready, "w").close()
    while not os.path.exists(go):  # released together, at one instant
        time.sleep(0.001)
    t.fit(module)
    print("LOG_DIR", t.log_dir)
""")


@pytest.mark.slow
def test_three_processes_started_at_one_instant_get_three_run_directories(tmp_path):
    root, go = tmp_path / "runs", tmp_path / "go"
    env = {**os.environ, "XLA_FLAGS": xla_flags(1), "JAX_PLATFORMS": "cpu"}
    cwd = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    procs, ready = [], [tmp_path / f"ready{i}" for i in range(3)]
    for i in range(3):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", _RUN, str(root), str(ready[i]), str(go), str(i)], cwd=cwd,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready):
            assert time.monotonic() < deadline, "the processes did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    dirs = sorted(line.split()[1] for out, _ in outs for line in out.splitlines()
                  if line.startswith("LOG_DIR"))
    assert dirs == [os.fspath(root / f"version_{i}") for i in range(3)]
    for d in dirs:  # each holds exactly one run's rows
        with open(os.path.join(d, "metrics.csv")) as f:
            assert [line.split(",")[0] for line in f.read().splitlines()[1:]] == ["1", "2"]


def test_run_directories_reserved_from_many_threads_are_distinct(run_dir):
    (run_dir / "version_3").mkdir(parents=True)  # numbering continues after the highest
    got, barrier = [], threading.Barrier(8)

    def reserve():
        barrier.wait()
        got.append(runs.new_run_dir(run_dir))

    threads = [threading.Thread(target=reserve) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert sorted(got, key=lambda p: int(p.rsplit("_", 1)[1])) == [
        os.fspath(run_dir / f"version_{i}") for i in range(4, 12)]



@pytest.mark.parametrize("budget", [{"max_steps": 4}, {"max_env_steps": 8 * 8}])
def test_resume_with_the_budget_already_spent_changes_nothing_and_says_why(run_dir, capsys, budget):
    first = toys.trainer(run_dir, max_steps=8, log_every_n_steps=2,
                         callbacks=[jt.CSVLogger(), jt.ModelCheckpoint(every_n_steps=2,
                                                                       async_save=False)])
    first.fit(toys.Regression())
    before = toys.files_snapshot(run_dir)
    capsys.readouterr()
    again = toys.trainer(run_dir, log_every_n_steps=2, **budget,
                         callbacks=[jt.CSVLogger(), jt.ModelCheckpoint(every_n_steps=2)])
    again.fit(toys.Regression(), ckpt_path="last")
    err = capsys.readouterr().err
    steps = budget.get("max_steps", 8)
    assert f"is at step 8, and the budget of {steps} training steps" in err
    assert "nothing was run or written" in err
    assert toys.files_snapshot(run_dir) == before  # no file added, removed or rewritten
    assert again.global_step == 8 and again.log_dir == first.log_dir
    toys.assert_trees_equal(again.state, first.state)  # the checkpoint's state is loaded


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_run_in_use_by_another_process_refuses_a_second_resume_and_writes_nothing(
        tmp_path, monkeypatch):
    """The same run resumed twice at once: the second command says so in one
    line, exit 2, having written nothing; once the owner is gone its lock is
    stale and the resume goes on, removing the lock when it ends."""
    import importlib.util
    import json
    import socket
    from pathlib import Path

    from jaxtrainer.rundir import _run_lock as run_lock
    from tests._support.commands import TINY_PPO

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("ppo_recipe_lock", repo / "recipes" / "ppo.py")
    ppo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ppo)
    monkeypatch.chdir(tmp_path)
    ppo.main([*TINY_PPO, "trainer.max_env_steps=32"])  # 2 updates of 2 envs x 8 steps
    run = tmp_path / "runs" / "ppo" / "version_0"
    assert not (run / run_lock.LOCK_FILE).exists()  # released when fit ended

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (run / run_lock.LOCK_FILE).write_text(json.dumps(
            {"pid": owner.pid, "host": socket.gethostname(), "started": time.time()}))
        before = toys.files_snapshot(tmp_path)
        env = {**os.environ, "XLA_FLAGS": xla_flags(1), "JAX_PLATFORMS": "cpu",
               "PYTHONPATH": str(repo / "src")}
        out = subprocess.run(["jaxtrainer", "fit", "ppo", "trainer.ckpt_path=last",
                              "trainer.max_env_steps=1000000"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        last = out.stderr.strip().splitlines()[-1]
        assert f"runs/ppo/version_0 is in use by process {owner.pid} on " in last, out.stderr
        assert "Traceback" not in out.stderr
        assert toys.files_snapshot(tmp_path) == before
    finally:
        owner.kill()
        owner.wait()
    result = ppo.main(["trainer.ckpt_path=last", "trainer.max_env_steps=48"])  # the owner is gone
    assert result["step"] == 3 and not (run / run_lock.LOCK_FILE).exists()
