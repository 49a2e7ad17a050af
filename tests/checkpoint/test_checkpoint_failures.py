"""Checkpoint writes that fail, and checkpoint callbacks that share a run."""

import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt

pytestmark = pytest.mark.timeout(240)

# A run whose step-4 checkpoint cannot be written: a file size limit of one byte
# (RLIMIT_FSIZE, SIGXFSZ ignored, so writes fail with EFBIG) from the moment the
# step-4 save starts; save_top_k=1, a save every 2 steps.
FAILING_SAVE = """
import resource, signal, sys
import jax.numpy as jnp
import jaxtrainer as jt

class Counter(jt.Module):
    def init_state(self, key):
        return {"w": jnp.zeros(()), "big": jnp.zeros(4096)}
    def training_step(self, state, key):
        return {"w": state["w"] + 1.0, "big": state["big"] + 1.0}, {"loss": state["w"]}

class FullDisk(jt.Callback):
    def on_save_checkpoint(self, trainer, module, checkpoint):
        if trainer.global_step == 4:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

trainer = jt.Trainer(strategy="single", max_steps=8, log_every_n_steps=1, logger=False,
                     enable_progress_bar=False, default_root_dir=sys.argv[1],
                     callbacks=[jt.ModelCheckpoint(every_n_steps=2, save_top_k=1), FullDisk()])
try:
    trainer.fit(Counter())
except Exception as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(3)
"""


@pytest.mark.slow
def test_a_failed_save_keeps_the_last_good_checkpoint(tmp_path):
    proc = subprocess.run([sys.executable, "-c", FAILING_SAVE, str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=200)
    assert proc.returncode == 3, proc.stderr[-3000:]
    checkpoints = tmp_path / "version_0" / "checkpoints"
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("CheckpointWriteError: checkpoint of step 4 could not be written to "
                           f"{checkpoints}: ")
    assert "File too large" in line and line.endswith(f"the newest complete checkpoint is "
                                                      f"{checkpoints / '2'}")
    assert sorted(os.listdir(checkpoints)) == ["2"]  # no *-tmp directory, step 2 kept
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]  # orbax's threads' errors: that one line
    resumed = jt.Trainer(strategy="single", max_steps=3, log_every_n_steps=1, logger=False,
                         enable_progress_bar=False, default_root_dir=tmp_path,
                         enable_checkpointing=False)
    metrics = []

    class Seen(jt.Callback):
        def on_train_steps_end(self, trainer, module, m):
            metrics.append(m["loss"])

    resumed.callbacks.append(Seen())
    resumed.fit(_counter(), ckpt_path="last")
    assert resumed.global_step == 3 and metrics == [2.0]  # continued from step 2
    np.testing.assert_array_equal(np.asarray(resumed.state["big"]), np.full(4096, 3.0))


def _counter():
    namespace = {"__name__": "__main__"}  # the class the script's run recorded: __main__.Counter
    exec(FAILING_SAVE.split("class FullDisk")[0], namespace)
    return namespace["Counter"]()


def test_pruning_waits_for_the_replacement(tmp_path):
    """save_top_k=1: the older checkpoint goes only once the newer is complete,
    and at the end only the newest is left."""
    trainer = jt.Trainer(strategy="single", max_steps=6, log_every_n_steps=1, logger=False,
                         enable_progress_bar=False, default_root_dir=tmp_path,
                         callbacks=[jt.ModelCheckpoint(every_n_steps=2, save_top_k=1)])
    trainer.fit(_counter())
    assert sorted(os.listdir(Path(trainer.log_dir) / "checkpoints")) == ["6"]


TWO_CALLBACKS = """
import os, sys
import jax.numpy as jnp
import jaxtrainer as jt

class Peak(jt.Module):
    def init_state(self, key):
        return {"w": jnp.zeros(())}
    def training_step(self, state, key):
        return {"w": state["w"] + 1.0}, {"val": -(state["w"] - 3.0) ** 2}

trainer = jt.Trainer(strategy="single", max_steps=8, log_every_n_steps=1, logger=False,
                     enable_progress_bar=False, default_root_dir=sys.argv[1],
                     callbacks=[jt.ModelCheckpoint(every_n_steps=2),
                                jt.ModelCheckpoint(monitor="val", mode="max", save_top_k=1)])
trainer.fit(Peak())
run = trainer.log_dir
print("DIRS", sorted(os.listdir(os.path.join(run, "checkpoints"))),
      sorted(os.listdir(os.path.join(run, "checkpoints_1"))))
print("BEST", trainer.callbacks[1].best_model_path == os.path.join(run, "checkpoints_1", "8"))
"""


@pytest.mark.slow
def test_two_checkpoint_callbacks_in_one_run_keep_their_own_directories(tmp_path):
    proc = subprocess.run([sys.executable, "-c", TWO_CALLBACKS, str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=200)  # the process exits
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DIRS ['2', '4', '6', '8'] ['8']" in proc.stdout and "BEST True" in proc.stdout
    run = tmp_path / "version_0"
    assert jt.checkpoint.best(run / "checkpoints_1" / "8").path == run / "checkpoints_1" / "8"
    assert jt.checkpoint.find_last(tmp_path) == run / "checkpoints" / "8"


def test_two_checkpoint_callbacks_with_one_dirpath_are_refused_before_writing(tmp_path):
    trainer = jt.Trainer(strategy="single", max_steps=2, logger=False, enable_progress_bar=False,
                         default_root_dir=tmp_path / "runs",
                         callbacks=[jt.ModelCheckpoint(tmp_path / "ck", every_n_steps=1),
                                    jt.ModelCheckpoint(tmp_path / "ck", monitor="loss", mode="min")])
    with pytest.raises(ValueError, match="two ModelCheckpoint callbacks share dirpath="):
        trainer.fit(_counter())
    assert not (tmp_path / "ck").exists()


def test_save_top_k_keeps_the_best_with_asynchronous_saves(tmp_path):
    """A metric that peaks at step 100, saves every 50 steps, save_top_k=2 (async,
    the default): the best two by the metric (100, 150) and the newest stay."""
    class Peak(jt.Module):
        def init_state(self, key):
            return {"t": jnp.zeros(())}

        def training_step(self, state, key):
            t = state["t"] + 1.0
            return {"t": t}, {"score": -jnp.abs(t - 100.0)}

    ck = jt.ModelCheckpoint(monitor="score", mode="max", save_top_k=2, every_n_steps=50)
    trainer = jt.Trainer(strategy="single", max_steps=250, log_every_n_steps=50, logger=False,
                         enable_progress_bar=False, default_root_dir=tmp_path, callbacks=[ck])
    trainer.fit(Peak())
    run = Path(trainer.log_dir)
    assert sorted(os.listdir(run / "checkpoints"), key=int) == ["100", "150", "250"]
    assert ck.best_model_path == str(run / "checkpoints" / "100")
    assert jt.checkpoint.resolve(tmp_path, "best", across_runs=True) == run / "checkpoints" / "100"


class Rising(jt.Module):
    """A metric that improves every step: the best checkpoint is always the newest."""

    def init_state(self, key):
        return {"t": jnp.zeros(())}

    def training_step(self, state, key):
        t = state["t"] + 1.0
        return {"t": t}, {"score": t}


def _rising_run(tmp_path, best_dirpath=None, every=2):
    monitored = jt.ModelCheckpoint(best_dirpath, monitor="score", mode="max", save_top_k=2,
                                   every_n_steps=every)
    trainer = jt.Trainer(strategy="single", max_steps=8, log_every_n_steps=2, logger=False,
                         enable_progress_bar=False, default_root_dir=tmp_path / "runs",
                         callbacks=[jt.ModelCheckpoint(every_n_steps=2), monitored])
    trainer.fit(Rising())
    return Path(trainer.log_dir), monitored


def test_best_with_two_checkpoint_callbacks_is_the_monitored_ones_latest(tmp_path):
    """The unmonitored ModelCheckpoint saves first and records the monitored one's
    best as it stood before that one saved (step 6); "best" is the freshest record,
    step 8 in checkpoints_1, for fit, evaluate and the eval command alike."""
    run, monitored = _rising_run(tmp_path)
    assert monitored.best_model_path == str(run / "checkpoints_1" / "8")
    assert jt.checkpoint.resolve(run, "best") == run / "checkpoints_1" / "8"
    assert jt.checkpoint.resolve(tmp_path / "runs", "best", across_runs=True) == \
        run / "checkpoints_1" / "8"
    assert jt.checkpoint.best(run / "checkpoints").score == 7.5  # the mean of steps 7 and 8


def test_best_kept_in_a_directory_of_its_own_is_found_from_the_run(tmp_path):
    """ModelCheckpoint(dirpath=<elsewhere>, monitor=...) saving only at the end: the
    run's own checkpoints record no best, its metadata names that directory."""
    run, monitored = _rising_run(tmp_path, best_dirpath=tmp_path / "best", every=None)
    assert monitored.best_model_path == str(tmp_path / "best" / "8")
    assert jt.checkpoint.resolve(run, "best") == tmp_path / "best" / "8"
