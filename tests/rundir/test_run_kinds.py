"""Runs of other recipes, environments or kinds are kept apart: ``jaxtrainer plot
ROOT`` draws each group of its own (a sweep against env steps per member), and
``ckpt_path="last"`` resumes the newest run the command can resume, or says in
one line which run it found and why it cannot resume it. Fake run directories
(config.yaml, metrics.csv, a checkpoint's ``meta``) stand for trained runs."""

from __future__ import annotations

import csv
import os
import shlex
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

import jaxtrainer as jt
from jaxtrainer.checkpoint.resolve import NotResumable
from jaxtrainer.commands import _cli as cli
from jaxtrainer.commands import _plot as plot
from jaxtrainer.commands import fit
from jaxtrainer.population import Sweep
from jaxtrainer.population import summary as sweep_summary
from jaxtrainer.recipes import _command as command
from jaxtrainer.recipes import _sweep as recipe_sweep
from jaxtrainer.recipes import config
from jaxtrainer.recipes._catalog import CONFIGS
from jaxtrainer.rundir import _run_kind as run_kind
from jaxtrainer.rundir import storage
from tests._support import toys


def _metrics(run: Path, env_steps_per_row: int, values) -> None:
    """``metrics.csv`` with ``train/episode_return`` (and a sweep's member columns)."""
    with open(run / "metrics.csv", "w") as f:
        f.write("step,env_steps,train/episode_return\n")
        for i, v in enumerate(values, 1):
            f.write(f"{i},{i * env_steps_per_row},{v}\n")


def _recipe_run(root: Path, n: int, *overrides: str, step: int = 4) -> Path:
    """``root/version_<n>``: a ppo run's ``config.yaml`` (as the recipe writes
    it), a checkpoint at ``step`` (its ``meta``) and, for a sweep, ``sweep_members.csv``."""
    run = root / f"version_{n}"
    (run / "checkpoints" / str(step) / "meta").mkdir(parents=True)
    cfg = config.load(CONFIGS / "ppo.yaml", [f"trainer.default_root_dir={root}", *overrides])
    command.write_config(run / "config.yaml", cfg, "ppo")
    if cfg.sweep.seeds:
        members = [{"member": i, "config": 0, "seed": i} for i in range(cfg.sweep.seeds)]
        storage.write_csv(run / sweep_summary.MEMBERS_FILE, members)
    return run


@pytest.fixture
def mixed_root(tmp_path) -> Path:
    """The README's first hour: a CartPole run, an Acrobot run, then a 2-seed sweep."""
    root = tmp_path / "runs" / "ppo"
    cartpole = _recipe_run(root, 0)
    acrobot = _recipe_run(root, 1, "env.name=Acrobot-v1")
    sweep = _recipe_run(root, 2, "sweep.seeds=2")
    _metrics(cartpole, 100, [10, 20, 30])
    _metrics(acrobot, 100, [-500, -400, -300])
    _metrics(sweep, 200, [12, 22, 32])  # 2 members: 200 env steps a row, 100 per member
    return root


@pytest.mark.timeout(60)
def test_plot_root_draws_recipe_env_and_kind_apart(mixed_root, tmp_path, capsys):
    runs = plot.find_runs([str(mixed_root)])
    groups = plot.group_runs(runs)
    assert [(kind.label(), [label for _, label in members]) for kind, members in groups] == [
        ("ppo CartPole-v1", ["version_0"]), ("ppo Acrobot-v1", ["version_1"]),
        ("ppo CartPole-v1, sweep of 2 seeds", ["version_2"])]
    assert groups[2][0] == run_kind.RunKind("ppo", "CartPole-v1", "sweep of 2 seeds", 2)

    out = plot.plot_runs([str(mixed_root)], str(tmp_path / "c.png"))
    assert [(g["label"], list(g["mean"])) for g in out["groups"]] == [
        ("ppo CartPole-v1", [10, 20, 30]), ("ppo Acrobot-v1", [-500, -400, -300]),
        ("ppo CartPole-v1, sweep of 2 seeds", [12, 22, 32])]
    assert list(out["groups"][2]["x"]) == [100, 200, 300]  # env steps per member
    assert out["x_label"] == "env steps per member (sweeps, searches)" and "mean" not in out

    assert cli.main(["plot", str(mixed_root), "-o", str(tmp_path / "c.png")]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].endswith("train/episode_return of 3 groups, each its own mean (runs of another "
                            "recipe, environment or kind are not averaged together):")
    assert said[1:] == [
        "  ppo CartPole-v1: 1 run(s) (version_0), final mean 30 at env_steps=300",
        "  ppo Acrobot-v1: 1 run(s) (version_1), final mean -300 at env_steps=300",
        "  ppo CartPole-v1, sweep of 2 seeds: 1 run(s) (version_2), final mean 32 at "
        "env steps per member=300"]


@pytest.mark.timeout(60)
def test_a_sweep_alone_and_under_a_root_use_env_steps_per_member(mixed_root, tmp_path):
    sweep = mixed_root / "version_2"
    with open(sweep / "metrics.csv", "w") as f:
        f.write("step,env_steps,train/episode_return,member/0/train/episode_return,"
                "member/1/train/episode_return\n")
        for i in (1, 2, 3):
            f.write(f"{i},{i * 200},{10 * i + 1},{10 * i},{10 * i + 2}\n")
    alone = plot.plot_sweep(str(sweep), str(tmp_path / "a.png"), reps=20)  # as plot RUN_DIR
    under = plot.plot_runs([str(mixed_root)], str(tmp_path / "b.png"))
    assert list(alone["x"]) == list(under["groups"][2]["x"]) == [100, 200, 300]
    said = plot.report(alone, "a.png", "train/episode_return", "env_steps")
    assert said.endswith("of 1 configuration(s) (train/episode_return (2 seeds)), against env "
                         "steps per member")


def _load(root: Path, *overrides: str):
    return config.load(CONFIGS / "ppo.yaml", [f"trainer.default_root_dir={root}", *overrides])


@pytest.mark.timeout(60)
def test_last_resumes_the_newest_run_of_this_env_and_kind(mixed_root, capsys):
    acrobot = _load(mixed_root, "env.name=Acrobot-v1", "trainer.ckpt_path=last")
    assert Path(acrobot.trainer.ckpt_path) == mixed_root / "version_1" / "checkpoints" / "4"
    err = capsys.readouterr().err
    assert "resuming " + str(mixed_root / "version_1") in err
    assert "version_2: it trained env.name=CartPole-v1, this command env.name=Acrobot-v1" in err
    single = _load(mixed_root, "trainer.ckpt_path=last")  # CartPole, one agent: not the sweep
    assert Path(single.trainer.ckpt_path) == mixed_root / "version_0" / "checkpoints" / "4"
    assert "version_2: it is a sweep of 2 seeds, this command trains a single run" in \
        capsys.readouterr().err
    sweep = _load(mixed_root, "sweep.seeds=2", "trainer.ckpt_path=last")
    assert Path(sweep.trainer.ckpt_path) == mixed_root / "version_2" / "checkpoints" / "4"


@pytest.mark.timeout(60)
def test_last_with_only_runs_it_cannot_resume_is_one_line(tmp_path, capsys):
    root = tmp_path / "runs"
    _recipe_run(root, 0, "sweep.seeds=2")
    with pytest.raises(SystemExit) as exit_:
        config.cli(lambda argv: fit.run(argv, "ppo"),
                   [f"trainer.default_root_dir={root}", "trainer.ckpt_path=last"], prog="ppo")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"ppo: error: ckpt_path='last': the newest run with a checkpoint under "
                          f"{root} is {root / 'version_0'}, and this command cannot resume it: it "
                          "is a sweep of 2 seeds, this command trains a single run; name a run")
    with pytest.raises(NotResumable, match="it trained env.name=CartPole-v1"):
        _load(root, "sweep.seeds=2", "env.name=Acrobot-v1", "trainer.ckpt_path=last")


@pytest.mark.timeout(120)
def test_trainer_last_passes_over_a_newer_sweep(run_dir, capsys):
    first = toys.trainer(run_dir, max_steps=2, callbacks=[
        jt.CSVLogger(), jt.ModelCheckpoint(async_save=False)])
    first.fit(toys.Regression())
    newer = Path(run_dir) / "version_1"
    (newer / "checkpoints" / "2" / "meta").mkdir(parents=True)
    storage.write_csv(newer / sweep_summary.MEMBERS_FILE,
                            [{"member": i, "config": 0, "seed": i} for i in range(4)])
    again = toys.trainer(run_dir, max_steps=3, callbacks=[
        jt.CSVLogger(), jt.ModelCheckpoint(async_save=False)])
    again.fit(toys.Regression(), ckpt_path="last")
    assert again.log_dir == first.log_dir and again.global_step == 3
    assert "version_1: it is a sweep of 4 seeds, this fit trains a single run" in \
        capsys.readouterr().err
    accept = run_kind.module_acceptor("tests._support.toys.Regression", None)
    assert accept(Path(first.log_dir)) is None


@pytest.mark.timeout(60)
def test_the_member_alone_hint_repeats_every_setting(tmp_path, capsys):
    cfg = _load(tmp_path, "trainer.max_env_steps=2048", "sweep.seeds=2",
                "sweep.hyperparams.lr=[1e-3,3e-3]", "algorithm.hidden_sizes=[8]",
                "algorithm.lr=5e-4", "env.name=Acrobot-v1")
    changed = recipe_sweep.changed_settings(cfg, "ppo")
    assert changed == ["trainer.max_env_steps=2048", f"trainer.default_root_dir={tmp_path}",
                       "env.name=Acrobot-v1", "algorithm.lr=0.0005", "algorithm.hidden_sizes=[8]"]
    module = Sweep(toys.Regression(), seeds=[0, 1], hyperparams={"lr": [1e-3, 3e-3]})
    hint = recipe_sweep.MemberHint("ppo")
    trainer = jt.Trainer(max_steps=1, logger=False, enable_progress_bar=False,
                         callbacks=[command.RunRecord(cfg, "ppo"), hint])
    hint.setup(trainer, module, "fit")
    line = capsys.readouterr().out.strip()
    command_line = line.split("e.g. the last: ", 1)[1]
    assert shlex.split(command_line) == [
        "jaxtrainer", "fit", "ppo", "trainer.max_env_steps=2048",
        f"trainer.default_root_dir={tmp_path}", "env.name=Acrobot-v1", "algorithm.hidden_sizes=[8]",
        "trainer.seed=1", "algorithm.lr=0.003", "trainer.devices=1"]
    assert "'algorithm.hidden_sizes=[8]'" in command_line  # pasted into a shell as it is


@pytest.mark.timeout(60)
def test_summary_writes_integer_seeds_and_hyperparameters_as_integers(tmp_path):
    members = Sweep(toys.Regression(), seeds=4, hyperparams={"batch": [2, 4]}).members()
    assert members[5]["batch"] == 4 and isinstance(members[5]["batch"], int)
    scores = {m["member"]: float(m["member"]) for m in members}
    rows = sweep_summary.summarize(members, scores, ["batch"], reps=20)
    storage.write_csv(tmp_path / "s.csv", rows)
    written = list(csv.DictReader(open(tmp_path / "s.csv")))
    assert [(r["config"], r["batch"], r["seeds"]) for r in written] == [("0", "2", "4"),
                                                                       ("1", "4", "4")]
    floats = Sweep(toys.Regression(), seeds=2, hyperparams={"lr": [1e-3, 0.5]}).members()
    assert [m["lr"] for m in floats] == [1e-3, 1e-3, 0.5, 0.5]


@pytest.mark.timeout(60)
def test_a_sweep_says_what_its_mean_averages():
    assert Sweep(toys.Regression(), seeds=4).averaged() == "mean over 4 members (seeds 0-3)"
    assert Sweep(toys.Regression(), seeds=[-1, 0]).averaged() == \
        "mean over 2 members (seeds -1 to 0)"  # not "-1-0"
    grid = Sweep(toys.Regression(), seeds=[3, 7], hyperparams={"lr": [1e-3, 3e-3]})
    assert grid.averaged() == "mean of 2 configurations x 2 seeds (4 members)"
    assert recipe_sweep.final_note(grid) == " (mean of 2 configurations x 2 seeds (4 members))"
    assert recipe_sweep.final_note(toys.Regression()) == ""


def test_a_sweeps_last_line_keeps_the_readmes_shape():
    """Issue 68, 8a: ``eval/episode_return=483.13 (mean over 4 members (seeds 0-3))
    run_dir=...`` broke the README's ``eval/episode_return=<v> run_dir=<dir>``;
    what the value averages is the line before."""
    sweep = Sweep(toys.Regression(), seeds=4)
    assert config.last_lines(483.131, sweep, "runs/ppo/version_2") == [
        "jaxtrainer: eval/episode_return on the next line (mean over 4 members (seeds 0-3))",
        "eval/episode_return=483.13 run_dir=runs/ppo/version_2"]
    assert config.last_lines(500.0, toys.Regression(), "r") == ["eval/episode_return=500.00 run_dir=r"]


@pytest.mark.timeout(60)
def test_run_identity_from_module_yaml_and_unrecorded_runs(tmp_path):
    run = tmp_path / "version_0"
    run.mkdir()
    assert run_kind.of_run(run) == run_kind.RunKind(None, None, "single run", 1)
    (run / "module.yaml").write_text(yaml.safe_dump(
        {"class_path": "examples.actor_critic.ActorCritic", "init_args": {"env": "Pendulum-v1"}}))
    assert run_kind.of_run(run).label() == "ActorCritic Pendulum-v1"
    cfg = OmegaConf.to_container(_load(tmp_path, "sweep.hyperparams.lr=[1e-3,3e-3]"))
    assert run_kind.of_config(cfg).kind == "sweep of 2 configurations x 1 seed"
    assert os.fspath(run_kind.MEMBERS_FILE) == sweep_summary.MEMBERS_FILE


@pytest.mark.timeout(60)
def test_every_run_refused_names_the_newest_then_the_others(mixed_root):
    from jaxtrainer.checkpoint.resolve import _newest_resumable, resolve

    found, refused = _newest_resumable(mixed_root, lambda run: f"not {run.name}")
    assert found is None and [r.name for r, _ in refused] == ["version_2", "version_1", "version_0"]
    with pytest.raises(NotResumable) as error:
        resolve(mixed_root, "last", across_runs=True, prefix="ckpt_path='last': ",
                accept=lambda run: f"not {run.name}")
    assert str(error.value) == (
        f"ckpt_path='last': the newest run with a checkpoint under {mixed_root} is "
        f"{mixed_root / 'version_2'}, and this command cannot resume it: not version_2 (and 2 "
        "older run(s): version_1: not version_1; version_0: not version_0); name a run directory "
        "to resume it with its saved config, or leave the checkpoint path out to start a new run")
    assert resolve(mixed_root, "last", across_runs=True) == mixed_root / "version_2" / "checkpoints" / "4"


@pytest.mark.timeout(60)
def test_another_recipes_config_is_refused_and_a_newer_key_is_not(tmp_path):
    ppo = OmegaConf.to_container(_load(tmp_path))
    a2c = OmegaConf.to_container(config.load(CONFIGS / "a2c.yaml"))
    pbt = OmegaConf.to_container(config.load(CONFIGS / "pbt_ppo.yaml"))
    assert run_kind.config_refusal({**a2c, "recipe": "a2c"}, ppo).startswith(
        "it is a run of the 'a2c' recipe (algorithm keys this command does not have: ")
    assert run_kind.config_refusal({**pbt, "recipe": "pbt_ppo"}, ppo) == \
        "it is a run of the 'pbt_ppo' recipe (sections algorithm, env, network, pbt)"
    older = {**ppo, "recipe": "ppo", "algorithm": dict(ppo["algorithm"])}
    del older["algorithm"]["unroll_length"]  # a run from before the key existed
    assert run_kind.config_refusal(older, ppo) is None


def test_the_headline_of_a_module_that_is_not_rl_is_its_loss():
    """A run's columns name what it is judged by: the return, an ES's mean fitness, a
    population's best, else a loss (the guide's Regression logs ``loss``), else a
    fitness; None where none is logged."""
    assert run_kind.headline_metric(["step", "loss", "env_steps"]) == "loss"
    assert run_kind.headline_metric(["step", "critic_loss", "train/loss", "x"]) == "train/loss"
    assert run_kind.headline_metric(["step", "q/td_loss", "member_fitness"]) == "q/td_loss"
    assert run_kind.headline_metric(["step", "best_fitness"]) == "best_fitness"
    assert run_kind.headline_metric(["step", "train/loss", "train/episode_return"]) == \
        "train/episode_return"
    assert run_kind.headline_metric(["step", "env_steps", "grad_norm"]) is None


def test_settings_leave_out_how_a_run_is_logged_evaluated_and_run(tmp_path):
    """What sets runs apart is what they train: not the evaluation or logging
    cadence, the checkpoints, the strategy or devices, nor the evaluation's size."""
    (tmp_path / "config.yaml").write_text(
        "recipe: ppo\ntrainer:\n  max_env_steps: 500000\n  eval_every_n_steps: 100\n"
        "  log_every_n_steps: 5\n  strategy: pmap\n  devices: 2\n  seed: 3\n"
        "algorithm:\n  lr: 0.001\n  eval_episodes: 8\nlogger:\n  csv: true\n"
        "callbacks:\n  checkpoint:\n    every_n_steps: 5\n  early_stopping: false\n")
    assert run_kind.settings(tmp_path) == {
        "recipe": "ppo", "trainer.max_env_steps": "500000", "algorithm.lr": "0.001",
        "callbacks.early_stopping": "False"}
    (tmp_path / "hparams.csv").write_text(
        "name,value\ntrainer/max_steps,10\ntrainer/eval_every_n_steps,5\ntrainer/seed,0\n"
        "trainer/num_devices,2\nmodule/class,PPO\nmodule/eval_episodes,8\nmodule/lr,0.001\n")
    assert run_kind.settings(tmp_path) == {"trainer/max_steps": "10", "module/class": "PPO",
                                           "module/lr": "0.001"}
