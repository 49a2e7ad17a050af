"""Callbacks and loggers reused for another run start it fresh; no run's
checkpoints are overwritten or deleted by another run."""

import csv
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from tests._support import toys


class Seeded(jt.Module):
    """Weights drawn from the init key (so they depend on the seed), shrunk by
    0.9 per step; ``val`` is their sum, so runs of seeds 0 and 1 differ."""

    def init_state(self, key):
        return {"w": jax.random.normal(key, (3,))}

    def training_step(self, state, key):
        w = state["w"] * 0.9
        return {"w": w}, {"val": w.sum()}



def _rows(path):
    with open(path) as f:
        return [(int(r["step"]), float(r["val"])) for r in csv.DictReader(f)]


def _restore_w(step_dir):
    t = toys.trainer(os.path.dirname(step_dir), max_steps=1, callbacks=[])
    t.strategy.setup()
    t.restore_checkpoint(Seeded(), Path(step_dir))
    return np.asarray(t.state["w"])


def test_reused_checkpoint_and_csv_logger_write_only_into_the_second_run(run_dir):
    mc = jt.ModelCheckpoint(every_n_steps=2, monitor="val", mode="max", async_save=False)
    logger = jt.CSVLogger()
    first = toys.trainer(run_dir, max_steps=4, seed=0, callbacks=[mc, logger])
    first.fit(Seeded())
    w1 = np.asarray(first.state["w"])
    run1_files = toys.files_snapshot(run_dir / "version_0")
    assert mc.last_model_path == os.path.join(first.log_dir, "checkpoints", "4")

    second = toys.trainer(run_dir, max_steps=4, seed=1, callbacks=[mc, logger])
    second.fit(Seeded())
    w2 = np.asarray(second.state["w"])
    assert not np.array_equal(w1, w2)  # the seeds give other weights

    # run 2 wrote only under version_1, and reports its own checkpoints
    assert second.log_dir == os.fspath(run_dir / "version_1")
    assert mc.dirpath == os.path.join(second.log_dir, "checkpoints")
    assert mc.last_model_path == os.path.join(second.log_dir, "checkpoints", "4")
    vals2 = [v for _, v in _rows(run_dir / "version_1" / "metrics.csv")]
    best_step = 2 * (1 + int(np.argmax(vals2[1::2])))  # saves at steps 2 and 4
    assert mc.best_model_path == os.path.join(second.log_dir, "checkpoints", str(best_step))
    assert mc.best_model_score == pytest.approx(max(vals2[1], vals2[3]))
    assert sorted(os.listdir(run_dir / "version_1" / "checkpoints")) == ["2", "4"]
    np.testing.assert_array_equal(_restore_w(run_dir / "version_1/checkpoints/4"), w2)

    # run 1's files are untouched (bytes and modification times) and still restore run 1
    assert toys.files_snapshot(run_dir / "version_0") == run1_files
    np.testing.assert_array_equal(_restore_w(run_dir / "version_0/checkpoints/4"), w1)
    assert [s for s, _ in _rows(run_dir / "version_0" / "metrics.csv")] == [1, 2, 3, 4]
    assert [s for s, _ in _rows(run_dir / "version_1" / "metrics.csv")] == [1, 2, 3, 4]


def test_reused_checkpoint_resuming_the_first_run_restores_its_state(run_dir):
    mc = jt.ModelCheckpoint(every_n_steps=2, monitor="val", mode="max", async_save=False)
    toys.trainer(run_dir, max_steps=4, seed=0, callbacks=[mc]).fit(Seeded())
    run1 = mc.state_dict()
    toys.trainer(run_dir, max_steps=4, seed=1, callbacks=[mc]).fit(Seeded())
    assert mc.state_dict() != run1
    # resume run 1 from its step-4 checkpoint with the same (reused) callback
    resumed = toys.trainer(run_dir, max_steps=6, seed=0, callbacks=[mc])
    resumed.fit(Seeded(), ckpt_path=run_dir / "version_0/checkpoints/4")
    assert resumed.log_dir == os.fspath(run_dir / "version_0")
    assert mc.last_model_path == os.fspath(run_dir / "version_0/checkpoints/6")
    assert {k: v for k, v in mc.state_dict()["scores"].items() if k in ("2", "4")} == run1["scores"]
    assert sorted(os.listdir(run_dir / "version_0/checkpoints")) == ["2", "4", "6"]
    assert sorted(os.listdir(run_dir / "version_1/checkpoints")) == ["2", "4"]


def test_a_fresh_run_never_writes_into_another_runs_checkpoint_directory(run_dir, tmp_path):
    shared = tmp_path / "ckpts"
    toys.trainer(run_dir, max_steps=2, callbacks=[
        jt.ModelCheckpoint(dirpath=shared, async_save=False)]).fit(Seeded())
    before = toys.files_snapshot(shared)
    later = toys.trainer(run_dir, max_steps=2, seed=1, callbacks=[
        jt.ModelCheckpoint(dirpath=shared, save_top_k=1, async_save=False)])
    with pytest.raises(FileExistsError, match=r"already holds checkpoints of another run \(steps 2\)"):
        later.fit(Seeded())
    assert toys.files_snapshot(shared) == before
    assert sorted(os.listdir(run_dir)) == ["version_0"]  # the refused run left no version_1


def test_a_fit_that_fails_before_its_first_step_leaves_no_run_directory(run_dir):
    """An error while tracing the module (a bug in training_step) left a version_N of
    hparams.csv, module.yaml, an event file and an empty checkpoints/."""

    class Broken(toys.Regression):
        def training_step(self, state, key):
            raise RuntimeError("a bug in training_step")

    toys.trainer(run_dir, max_steps=2).fit(Seeded())
    with pytest.raises(RuntimeError, match="a bug in training_step"):
        toys.trainer(run_dir, max_steps=2, callbacks=[jt.CSVLogger(), jt.TensorBoardLogger()]
                     ).fit(Broken())
    assert sorted(os.listdir(run_dir)) == ["version_0"]


def _stateful_callbacks():
    return {
        "EarlyStopping": lambda: jt.EarlyStopping(monitor="val", mode="max", patience=1),
        "NaNGuard": lambda: jt.NaNGuard(),
        "ModelCheckpoint": lambda: jt.ModelCheckpoint(every_n_steps=1, monitor="val", mode="max",
                                                      save_top_k=2, async_save=False),
    }


@pytest.mark.parametrize("name", sorted(_stateful_callbacks()))
def test_every_stateful_callback_reused_equals_a_fresh_one(tmp_path, name):
    """The second run of a reused callback leaves it in the state a fresh
    callback reaches in the same run (paths compared relative to the run)."""
    make = _stateful_callbacks()[name]

    class Falling(Seeded):  # val falls, so EarlyStopping stops run 1 early
        def training_step(self, state, key):
            state, metrics = super().training_step(state, key)
            return state, {"val": -1.0 / (jnp.abs(metrics["val"]) + 1.0)}

    reused = make()
    toys.trainer(tmp_path / "a", max_steps=6, seed=0, callbacks=[reused]).fit(Falling())
    first = reused.state_dict()
    t_reused = toys.trainer(tmp_path / "a", max_steps=3, seed=1, callbacks=[reused])
    t_reused.fit(Seeded())
    fresh = make()
    t_fresh = toys.trainer(tmp_path / "b", max_steps=3, seed=1, callbacks=[fresh])
    t_fresh.fit(Seeded())

    def relative(d, log_dir):
        return {k: (os.path.relpath(v, log_dir) if isinstance(v, str) else v) for k, v in d.items()}

    got = relative(reused.state_dict(), t_reused.log_dir)
    want = relative(fresh.state_dict(), t_fresh.log_dir)
    assert got == want
    assert t_reused.global_step == t_fresh.global_step  # run 1's stop did not carry over
    if name == "EarlyStopping":
        assert first["stopped_step"] == 2 and first["wait_count"] == 1
        assert got["best_score"] == want["best_score"] != first["best_score"]


def test_reused_timer_counts_only_the_new_runs_time(run_dir):
    timer = jt.Timer(duration=3600)
    toys.trainer(run_dir, max_steps=2, callbacks=[timer]).fit(Seeded())
    timer._previous += 1000.0  # as if run 1 had trained for a long time
    start = time.monotonic()
    toys.trainer(run_dir, max_steps=2, callbacks=[timer]).fit(Seeded())
    assert timer.time_elapsed() <= time.monotonic() - start


def test_reused_loggers_open_new_files_and_a_new_wandb_run(run_dir, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    tb, wb = jt.TensorBoardLogger(), jt.WandbLogger(project="tests")
    toys.trainer(run_dir, max_steps=2, callbacks=[tb, wb]).fit(Seeded())
    first_tb, first_id = tb.log_dir, wb.run_id
    assert first_id
    second = toys.trainer(run_dir, max_steps=2, callbacks=[tb, wb])
    second.fit(Seeded())
    assert tb.log_dir == os.path.join(second.log_dir, "tensorboard") != first_tb
    assert wb.run_id and wb.run_id != first_id
    assert len(os.listdir(first_tb)) == 1  # run 1's event file only


def test_a_resume_keeps_saving_into_the_explicit_dirpath_its_run_wrote(run_dir, tmp_path):
    def callbacks():
        return [jt.ModelCheckpoint(every_n_steps=2, async_save=False),
                jt.ModelCheckpoint(dirpath=tmp_path / "best", monitor="val", mode="max",
                                   every_n_steps=1, save_top_k=1, async_save=False)]

    first = callbacks()
    toys.trainer(run_dir, max_steps=2, callbacks=first).fit(Seeded())
    assert sorted(os.listdir(tmp_path / "best")) == ["2"]  # val rises: the best is the newest
    resumed = callbacks()
    t = toys.trainer(run_dir, max_steps=4, callbacks=resumed)
    t.fit(Seeded(), ckpt_path="last")
    assert t.global_step == 4
    # each checkpoint callback got its own state back (distinct state keys)
    assert resumed[0].state_key != resumed[1].state_key
    assert resumed[0].last_model_path == os.path.join(t.log_dir, "checkpoints", "4")
    assert resumed[1].last_model_path == os.fspath(tmp_path / "best" / "4")
    assert sorted(os.listdir(tmp_path / "best")) == ["4"]  # the best is the newest
    assert set(resumed[1].state_dict()["scores"]) == {"4"}
    assert resumed[1].best_model_path == os.fspath(tmp_path / "best" / "4")


def test_a_reused_throughput_monitor_does_not_report_the_previous_runs_summary(run_dir):
    monitor = jt.ThroughputMonitor()
    toys.trainer(run_dir, max_steps=2, callbacks=[monitor]).fit(Seeded())
    assert monitor.summary["throughput/mean_updates_per_second"] > 0

    class FailAtStart(jt.Callback):
        def on_fit_start(self, trainer, module):
            raise RuntimeError("stop before training")

    with pytest.raises(RuntimeError, match="stop before training"):
        toys.trainer(run_dir, max_steps=2, callbacks=[monitor, FailAtStart()]).fit(Seeded())
    assert monitor.summary == {}  # run 2 never trained: nothing of run 1 is reported
