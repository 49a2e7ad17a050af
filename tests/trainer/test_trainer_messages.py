"""What the Trainer tells a user and what it needs: the resume message, the
preemption message in the form the user launched with, loggers added beside
the defaults, a Trainer without a budget for evaluation, ckpt_path="best"."""

import os
import signal
from pathlib import Path

import pytest

import jaxtrainer as jt
from jaxtrainer import checkpoint as ckpt
from jaxtrainer.recipes import config
from jaxtrainer.trainer._connectors import checkpoint_connector
from tests._support import toys

QUIET = dict(enable_progress_bar=False, compile_evaluation_ahead=False)


def test_resume_names_checkpoint_and_step_or_says_the_budget_is_spent(run_dir, capsys):
    toys.trainer(run_dir, max_steps=4).fit(toys.Regression())
    capsys.readouterr()
    t = toys.trainer(run_dir, max_steps=6)
    t.fit(toys.Regression(), ckpt_path="last")
    out = capsys.readouterr().out
    where = os.path.join(run_dir, "version_0", "checkpoints", "4")
    assert f"jaxtrainer: resuming from checkpoint {where} at step 4 (32 env steps) of 6" in out
    toys.trainer(run_dir, max_steps=6).fit(toys.Regression(), ckpt_path="last")
    err = capsys.readouterr().err
    spent = os.path.join(run_dir, "version_0", "checkpoints", "6")
    assert f"nothing to train: {spent} is at step 6, and the budget of 6 training steps" in err


class SendSignal(jt.Callback):
    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)


def test_preemption_message_uses_the_recipe_form_when_set(run_dir, capsys):
    t = toys.trainer(run_dir, max_steps=6, callbacks=[SendSignal(), jt.CSVLogger()])
    t.resume_hint = config._RESUME_HINT
    with pytest.raises(jt.Preempted):
        t.fit(toys.Regression())
    err = capsys.readouterr().err
    where = os.path.join(run_dir, "version_0", "checkpoints", "2")
    assert f"Resume with the same command plus trainer.ckpt_path={where}." in err
    assert "fit(..." not in err


def test_the_python_preemption_advice_names_the_checkpoint_not_last(run_dir, capsys):
    """A new user interrupted a run, ran another in the same root, then followed the
    advice ``ckpt_path='last'``: it resumed (and wrote into) the other run. The advice
    names the checkpoint the stopped run just wrote."""
    t = toys.trainer(run_dir, max_steps=6, callbacks=[SendSignal(), jt.CSVLogger()])
    with pytest.raises(jt.Preempted):
        t.fit(toys.Regression())
    where = os.path.join(run_dir, "version_0", "checkpoints", "2")
    err = capsys.readouterr().err
    assert f"Resume with fit(..., ckpt_path={where!r})" in err
    assert "'last'" not in err


def test_recipe_trainers_carry_the_command_line_resume_hint():
    cfg = config.load(Path(__file__).parents[2] / "recipes" / "configs" / "ppo.yaml")
    assert config.make_trainer(cfg).resume_hint == config._RESUME_HINT
    assert jt.Trainer(max_steps=1).resume_hint is None  # Python users: fit(..., ckpt_path=<checkpoint>)
    assert "trainer.ckpt_path={checkpoint}" in config._RESUME_HINT


def test_a_logger_given_is_added_beside_the_default_loggers(run_dir):
    wandb = jt.WandbLogger()
    kinds = [type(c) for c in jt.Trainer(max_steps=1, callbacks=[wandb]).callbacks]
    assert {jt.CSVLogger, jt.TensorBoardLogger, jt.WandbLogger} <= set(kinds)
    own_csv = jt.CSVLogger(save_dir="elsewhere")
    with_csv = jt.Trainer(max_steps=1, callbacks=[own_csv]).callbacks
    assert [c for c in with_csv if isinstance(c, jt.CSVLogger)] == [own_csv]  # replaced, not doubled
    assert any(isinstance(c, jt.TensorBoardLogger) for c in with_csv)
    only = jt.Trainer(max_steps=1, logger=False, callbacks=[wandb]).callbacks
    assert [c for c in only if isinstance(c, jt.loggers.Logger)] == [wandb]
    # so metrics.csv, which `jaxtrainer plot` reads, is written next to wandb
    t = jt.Trainer(max_steps=2, default_root_dir=run_dir, callbacks=[jt.WandbLogger()], **QUIET)
    t.fit(toys.Regression())
    with open(os.path.join(t.log_dir, "metrics.csv")) as f:
        assert f.readline().startswith("step,")
    assert os.listdir(os.path.join(t.log_dir, "tensorboard"))


def test_a_trainer_without_budget_evaluates_but_refuses_to_fit(run_dir):
    trained = toys.trainer(run_dir, max_steps=3)
    module = toys.Regression()
    trained.fit(module)
    want = trained.evaluate(module)
    t = jt.Trainer(default_root_dir=run_dir, **QUIET)  # no budget: evaluation only
    got = t.evaluate(toys.Regression(), ckpt_path="last")
    assert got == want and got["step"] == 3
    before = toys.files_snapshot(run_dir)
    fresh = jt.Trainer(default_root_dir=run_dir / "new", **QUIET)
    with pytest.raises(ValueError, match=r"Trainer.fit needs a training budget: .*max_steps=None "
                                         r"and max_env_steps=None; set max_steps or max_env_steps"):
        fresh.fit(toys.Regression())
    assert fresh.compile_seconds == {} and not (run_dir / "new").exists()
    assert toys.files_snapshot(run_dir) == before


def _best_run(run_dir, monitor=True):
    """Checkpoints at steps 2, 4, 6 ranked by eval/mse with mode="max": the
    error falls as the regression learns, so the best is step 2, not the newest."""
    mc = (jt.ModelCheckpoint(every_n_steps=2, monitor="eval/mse", mode="max", async_save=False)
          if monitor else jt.ModelCheckpoint(every_n_steps=2, async_save=False))
    t = toys.trainer(run_dir, max_steps=6, eval_every_n_steps=2, callbacks=[jt.CSVLogger(), mc])
    t.fit(toys.Regression())
    return t, mc


def test_ckpt_path_best_in_evaluate_fit_and_resolve_checkpoint(run_dir, capsys):
    t, mc = _best_run(run_dir)
    steps = ckpt.find_last(run_dir).parent
    assert mc.best_model_path == os.path.join(steps, "2") and sorted(os.listdir(steps)) == ["2", "4", "6"]
    assert checkpoint_connector.resolve_ckpt_path("best", run_dir) == steps / "2"
    assert checkpoint_connector.resolve_ckpt_path("best", t.log_dir) == steps / "2"  # a run directory as root
    assert ckpt.best(steps / "6").path == steps / "2"
    assert checkpoint_connector.resolve_ckpt_path("last", run_dir) == steps / "6"
    at_best = jt.Trainer(default_root_dir=run_dir, **QUIET).evaluate(toys.Regression(), ckpt_path="best")
    assert at_best["step"] == 2
    capsys.readouterr()
    again = toys.trainer(run_dir, max_steps=6, eval_every_n_steps=2)
    again.fit(toys.Regression(), ckpt_path="best")  # resume from step 2 and finish the budget
    out, err = capsys.readouterr()
    assert f"resuming from checkpoint {steps / '2'} at step 2" in out
    assert (f"jaxtrainer: resume: {steps} also holds the later checkpoints 4, 6 of this run: going "
            "on from step 2 replaces them (and the metrics rows after step 2) as the run reaches "
            "their steps or prunes; copy the run directory first to keep them") in err
    assert again.global_step == 6


def test_ckpt_path_best_without_monitor_is_a_clear_error(run_dir):
    _best_run(run_dir, monitor=False)
    with pytest.raises(ValueError, match=r"ckpt_path='best': the checkpoint .*/6 records no best "
                                         r"checkpoint: its ModelCheckpoint had no monitor") as info:
        jt.Trainer(default_root_dir=run_dir, **QUIET).evaluate(toys.Regression(), ckpt_path="best")
    # how to rank them in Python and on a recipe's command line (a new user read only the first)
    assert ("callbacks.checkpoint.monitor=eval/episode_return callbacks.checkpoint.mode=max "
            "trainer.eval_every_n_steps=N") in str(info.value)
    # the way out it names is one ckpt_path takes (a step number alone is not a path)
    suggested = str(info.value).split("pass 'last' or a checkpoint directory, e.g. ")[1].split(" (")[0]
    assert jt.Trainer(default_root_dir=run_dir, **QUIET).evaluate(
        toys.Regression(), ckpt_path=suggested)["step"] == 6
    with pytest.raises(FileNotFoundError, match=r"ckpt_path='best': no checkpoint under"):
        checkpoint_connector.resolve_ckpt_path("best", run_dir / "nothing")


def test_best_recorded_as_a_relative_path_is_found_from_anywhere(tmp_path, monkeypatch):
    """A run trained with a relative default_root_dir records relative paths;
    "best" still finds the checkpoint after a change of directory."""
    monkeypatch.chdir(tmp_path)
    _best_run("runs")
    meta = ckpt.read_meta(ckpt.find_last("runs"))
    recorded = next(s["best_model_path"] for s in meta["callbacks"].values() if s.get("best_model_path"))
    assert recorded == os.path.join("runs", "version_0", "checkpoints", "2")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    found = checkpoint_connector.resolve_ckpt_path("best", tmp_path / "runs")
    assert found == tmp_path / "runs" / "version_0" / "checkpoints" / "2"
