"""Preemption: SIGTERM/SIGINT during fit -> checkpoint at the next step boundary,
loggers closed, clear message, exit; ckpt_path="last" completes the budget exactly."""

import csv
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import checkpoint as ckpt
from tests._support import toys
from tests._support._xla import xla_flags


class SendSignal(jt.Callback):
    def __init__(self, signum, at_step):
        self.signum, self.at_step = signum, at_step

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == self.at_step:
            os.kill(os.getpid(), self.signum)


def _rows(log_dir):
    with open(os.path.join(log_dir, "metrics.csv")) as f:
        return [(r["step"], r["env_steps"], r["loss"]) for r in csv.DictReader(f)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_checkpoints_at_boundary_and_resume_completes_budget_exactly(run_dir, signum, capsys):
    before = signal.getsignal(signum)
    tb = jt.TensorBoardLogger()
    t = toys.trainer(run_dir / "cut", strategy="pmap", devices=2, max_steps=8,
                     callbacks=[SendSignal(signum, 3), jt.CSVLogger(), tb])
    with pytest.raises(jt.Preempted) as info:
        t.fit(toys.Regression())
    assert info.value.code == 128 + signum and info.value.step == 3
    assert signal.getsignal(signum) is before  # handlers restored after fit
    assert tb.writer is None and not tb._active  # loggers flushed and closed
    err = capsys.readouterr().err
    assert f"received {signal.Signals(signum).name}" in err
    last = ckpt.find_last(run_dir / "cut")
    assert "stopped by" in err and "at step 3" in err and f"ckpt_path={str(last)!r}" in err
    assert last.name == "3" and ckpt.read_meta(last)["global_step"] == 3

    resumed = toys.trainer(run_dir / "cut", strategy="pmap", devices=2, max_steps=8)
    resumed.fit(toys.Regression(), ckpt_path="last")
    straight = toys.trainer(run_dir / "straight", strategy="pmap", devices=2, max_steps=8)
    straight.fit(toys.Regression())
    assert (resumed.global_step, resumed.env_steps) == (8, 64)
    toys.assert_trees_equal(resumed.state, straight.state)
    assert _rows(resumed.log_dir) == _rows(straight.log_dir)


def test_preemption_without_model_checkpoint_still_saves(run_dir):
    t = toys.trainer(run_dir, max_steps=6, enable_checkpointing=False,
                     callbacks=[SendSignal(signal.SIGTERM, 2)])
    with pytest.raises(jt.Preempted):
        t.fit(toys.Regression())
    assert ckpt.find_last(run_dir).name == "2"


def test_preemption_after_nan_keeps_last_good_checkpoint(run_dir):
    t = toys.trainer(run_dir, max_steps=20, callbacks=[
        jt.NaNGuard(), jt.ModelCheckpoint(every_n_steps=2, async_save=False),
        SendSignal(signal.SIGTERM, 6)])
    with pytest.raises(jt.Preempted, match="not finite"):
        t.fit(toys.Regression(nan_from_step=5))
    assert ckpt.find_last(run_dir).name == "4"


_CHILD = """
import sys, time, numpy as np, jax, jaxtrainer as jt
from tests._support import toys

class Slow(jt.Callback):
    def on_train_steps_end(self, trainer, module, metrics):
        print("step", trainer.global_step, flush=True)
        time.sleep(0.2)

t = toys.trainer({root!r}, strategy="single", max_steps=12, callbacks=[Slow(), jt.CSVLogger()])
t.fit(toys.Regression(), ckpt_path={ckpt!r})
np.savez({out!r}, *[np.asarray(x) for x in jax.tree.leaves(toys.leaves(t.state))])
print("done", t.global_step, t.env_steps, flush=True)
"""


@pytest.mark.slow
def test_external_sigterm_exits_143_and_rerun_with_last_finishes(tmp_path):
    root, out = str(tmp_path / "runs"), str(tmp_path / "final.npz")
    env = dict(os.environ, XLA_FLAGS=xla_flags(1), JAX_PLATFORMS="cpu")
    cwd = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_CHILD.format(root=root, ckpt=None, out=out))],
                            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("step 3"):
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "received SIGTERM" in err and "Resume with" in err
    step = int(ckpt.find_last(root).name)
    assert 3 <= step < 12
    rerun = toys.run_python(textwrap.dedent(_CHILD.format(root=root, ckpt="last", out=out)), devices=1)
    assert "done 12 96" in rerun.stdout
    straight = toys.trainer(tmp_path / "straight", strategy="single", max_steps=12)
    straight.fit(toys.Regression())
    got = np.load(out)
    for i, want in enumerate(__import__("jax").tree.leaves(toys.leaves(straight.state))):
        np.testing.assert_array_equal(got[f"arr_{i}"], want)
    with open(os.path.join(root, "version_0", "metrics.csv")) as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == list(range(1, 13))
