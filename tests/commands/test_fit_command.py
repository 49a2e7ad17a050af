"""``jaxtrainer fit <recipe>``: the recipes run from the installed package, their
configs ship inside it, and ``recipes/*.py`` are thin scripts over the same code."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

import jaxtrainer as jt
from jaxtrainer.commands import _cli as cli
from jaxtrainer.commands import fit
from jaxtrainer.recipes import _catalog as catalog
from jaxtrainer.recipes._modules import BUILDERS

ROOT = Path(__file__).resolve().parents[2]


def test_every_recipe_has_a_builder_a_shipped_config_and_a_script():
    assert list(catalog.RECIPES) and set(catalog.RECIPES) == set(BUILDERS)
    for name in catalog.RECIPES:
        assert catalog.config_file(name).is_file(), name
        assert (ROOT / "recipes" / f"{name}.py").is_file(), name


@pytest.mark.timeout(120)
def test_fit_list_names_every_recipe():
    proc = subprocess.run([sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "--list"],
                          capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines()[1:] if line.startswith("  ")]
    assert listed == list(catalog.RECIPES)
    width = max(map(len, catalog.RECIPES)) + 2        # names in one column
    assert f"  {'ppo':<{width}}PPO on a gymnax environment (CartPole-v1)" in proc.stdout


@pytest.mark.parametrize("recipe", list(catalog.RECIPES))
def test_every_recipe_help_through_fit_exits_0(recipe, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", recipe, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: jaxtrainer fit {recipe} [--config FILE]")
    assert catalog.RECIPES[recipe].summary in out
    assert "trainer.seed=" in out  # every key is listed


@pytest.mark.timeout(120)
def test_an_unknown_recipe_is_one_line_and_status_2():
    proc = subprocess.run([sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo2"],
                          capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 2
    names = ", ".join(sorted(catalog.RECIPES))
    assert names.startswith("a2c, c51, cem_rl, cemrl_openes, cma_es, crossq, ddpg, dqn, erl, erl_eda, ")
    assert proc.stderr.strip().splitlines() == [
        f"jaxtrainer fit: error: unknown recipe 'ppo2'; did you mean 'ppo'? expected one of {names} "
        "(jaxtrainer fit --list)"]


def test_a_recipe_or_command_in_the_wrong_case_is_suggested(capsys):
    """Issue 68, a new user: `jaxtrainer fit PPO` suggested nothing; as an unknown
    strategy is answered, the close name is suggested (ignoring case)."""
    assert cli.main(["fit", "PPO"]) == 2
    names = ", ".join(sorted(catalog.RECIPES))
    assert capsys.readouterr().err.strip().splitlines() == [
        f"jaxtrainer fit: error: unknown recipe 'PPO'; did you mean 'ppo'? expected one of {names} "
        "(jaxtrainer fit --list)"]
    assert cli.main(["fit", "zzz"]) == 2  # nothing close: no suggestion
    assert f"unknown recipe 'zzz': expected one of {names}" in capsys.readouterr().err
    assert cli.main(["FIT", "ppo"]) == 2
    assert capsys.readouterr().err == ("jaxtrainer: unknown command 'FIT'; did you mean 'fit'? "
                                       "choose one of: envs, eval, export, fit, launch, plot\n")
    assert cli.main(["--version"]) == 0  # a new user tried it: it was an unknown command
    assert capsys.readouterr().out == f"jaxtrainer {jt.__version__}\n"


def test_a_config_file_that_is_not_there_says_where_configs_are_looked_up(capsys, monkeypatch,
                                                                          tmp_path):
    """Issue 68, a new user: `jaxtrainer fit ppo --config nope.yaml` printed a bare
    `[Errno 2] No such file or directory`; the line names the file, where it was
    looked for and the recipe's shipped configs (a close shipped name is suggested)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "ppo", "--config", "nope.yaml"])
    assert done.value.code == 2
    shipped = ", ".join(sorted(p.name for p in catalog.CONFIGS.glob("ppo*.yaml")))
    assert shipped.startswith("ppo.yaml, ppo_brax.yaml, ") and "ppo_pendulum.yaml" in shipped
    assert capsys.readouterr().err.strip().splitlines() == [
        f"jaxtrainer fit ppo: error: --config nope.yaml: no such file ({tmp_path / 'nope.yaml'}); "
        f"expected a YAML file: a path (relative to {tmp_path}) or the file name of a config "
        f"shipped with jaxtrainer ({shipped}); jaxtrainer fit ppo --print-config > mine.yaml "
        "writes one to edit"]
    with pytest.raises(SystemExit):
        cli.main(["fit", "ppo", "--config", "ppo_pendlum.yaml"])
    assert "no such file (" in capsys.readouterr().err.split(
        "; did you mean ppo_pendulum.yaml? expected a YAML file: ")[0]


@pytest.mark.timeout(120)
def test_the_resume_advice_is_the_command_with_the_checkpoint_once(monkeypatch, tmp_path):
    """Issue 68, a new user: after a SIGINT of `jaxtrainer fit ppo trainer.ckpt_path=last`
    the advice was that command plus trainer.ckpt_path=last, so it read `... ckpt_path=last
    trainer.ckpt_path=last`; and `last` resumed whichever run was newest under the root by
    then. The advice is the command with the checkpoint just written in place of `last`."""
    from jaxtrainer.recipes import config
    from jaxtrainer.trainer import _fit_setup as fit_setup
    from tests.commands.test_eval_cli import init_only_run

    monkeypatch.chdir(tmp_path)
    init_only_run(tmp_path / "runs" / "ppo", "ppo", config.load(catalog.config_file("ppo")))
    built = {}
    monkeypatch.setattr(config, "fit_and_report", lambda trainer, module, cfg: built.update(
        trainer=trainer) or {})
    fit.run(["trainer.ckpt_path=last"], "ppo")
    advice = fit_setup.resume_hint(built["trainer"], "runs/ppo/version_0/checkpoints/0")
    assert advice == "jaxtrainer fit ppo trainer.ckpt_path=runs/ppo/version_0/checkpoints/0"


def test_print_config_is_a_config_to_start_from(tmp_path, capsys, monkeypatch):
    """``jaxtrainer fit ppo --print-config > mine.yaml`` then ``--config mine.yaml``
    reads it back; a shipped config is found by its file name."""
    with pytest.raises(SystemExit) as done:
        fit.run(["--print-config", "trainer.seed=7"], recipe="ppo")
    assert done.value.code == 0
    mine = tmp_path / "mine.yaml"
    mine.write_text(capsys.readouterr().out)
    assert mine.read_text().startswith("recipe: ppo\n")
    with pytest.raises(SystemExit):
        fit.run(["--config", str(mine), "--print-config"], recipe="ppo")
    assert "  seed: 7\n" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        fit.run(["--config", "ars.yaml", "--print-config"], recipe="openes")
    assert "name: ARS" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)  # no such file here: the shipped one, also as --config=NAME
    with pytest.raises(SystemExit):
        fit.run(["--config=ppo_brax_cpu.yaml", "--print-config"], recipe="ppo")
    assert "  name: brax/inverted_pendulum\n" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_holds_the_recipe_configs(tmp_path):
    """A wheel built from the checkout (a copy: building writes build/ beside the
    sources) holds every shipped config and the entry points."""
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "runs", "build", "*.egg-info", "__pycache__", "site"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "-w", str(tmp_path), str(source)], capture_output=True, text=True,
                          timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wheel = next(tmp_path.glob("jaxtrainer-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for recipe in catalog.RECIPES:
        assert f"jaxtrainer/recipes/configs/{recipe}.yaml" in names, recipe
    assert "jaxtrainer/recipes/configs/ars.yaml" in names
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "jaxtrainer = jaxtrainer.commands._cli:main" in entry_points
    assert "recipes = jaxtrainer.recipes._modules:build_module" in entry_points


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_the_documented_way_to_start_ones_own_config(tmp_path):
    """As the README writes it, through the shell: ``jaxtrainer fit ppo --print-config >
    mine.yaml`` then ``jaxtrainer fit ppo --config mine.yaml`` (here with a tiny
    budget so that the run is short)."""
    jaxtrainer = Path(sys.executable).with_name("jaxtrainer")
    command = (f"{jaxtrainer} fit ppo --print-config > mine.yaml && {jaxtrainer} fit ppo "
               "--config mine.yaml trainer.max_env_steps=2048 trainer.logger=false")
    proc = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "mine.yaml").read_text().startswith("recipe: ppo\n")
    assert proc.stdout.strip().splitlines()[-1].startswith("eval/episode_return=")
    assert "run_dir=runs/ppo/version_0" in proc.stdout.strip().splitlines()[-1]


class _SigintAt(jt.Callback):
    """Send this process SIGINT once, at the first boundary at or past ``step``
    (a user's Ctrl-C during training)."""

    def __init__(self, step):
        self.step, self.sent = step, False

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step >= self.step and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.timeout(400)
def test_a_budget_raised_on_resume_is_the_one_the_next_resume_goes_on_to(monkeypatch, tmp_path,
                                                                         capsys):
    """Issue 68, a new user: after `jaxtrainer fit ppo trainer.ckpt_path=last
    trainer.max_env_steps=200000` trained a finished 100k run on, its config.yaml and
    hparams.csv still said 100000, and a plain `jaxtrainer fit ppo
    trainer.ckpt_path=runs/ppo/version_2` said 'nothing to train ... the budget of 195
    training steps (max_env_steps=100000)'; the same after raising it to 3M, Ctrl-C and a
    plain resume. The run records the budget it was last given (here 4096 -> 8192)."""
    from jaxtrainer.recipes import config
    from jaxtrainer.rundir import _run_kind as run_kind

    monkeypatch.chdir(tmp_path)
    assert cli.main(["fit", "ppo", "trainer.max_env_steps=4096"]) == 0
    assert cli.main(["fit", "ppo", "trainer.ckpt_path=last", "trainer.max_env_steps=8192"]) == 0
    run = tmp_path / "runs" / "ppo" / "version_0"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["trainer"]["max_env_steps"], saved["trainer"]["ckpt_path"]) == (8192, None)
    assert saved["recipe"] == "ppo" and saved["trainer"]["default_root_dir"] == "runs/ppo"
    with open(run / "hparams.csv", newline="") as f:
        hparams = dict(row for row in csv.reader(f))
    assert (hparams["trainer/max_env_steps"], hparams["module/total_updates"]) == ("8192", "16")
    assert run_kind.settings(run)["trainer/max_env_steps"] == "8192"  # what plot's labels say
    capsys.readouterr()
    assert cli.main(["fit", "ppo", "trainer.ckpt_path=runs/ppo/version_0"]) == 0
    assert "jaxtrainer: nothing to train: runs/ppo/version_0/checkpoints/16 is at step 16, and " \
           "the budget of 16 training steps (max_env_steps=8192) is not above it" in \
           capsys.readouterr().err

    make = config.make_trainer

    def interrupted(cfg, **kwargs):  # Ctrl-C once training has run past step 20
        trainer = make(cfg, **kwargs)
        trainer.callbacks.append(_SigintAt(20))
        return trainer

    monkeypatch.setattr(config, "make_trainer", interrupted)
    with pytest.raises(jt.Preempted):
        cli.main(["fit", "ppo", "trainer.ckpt_path=runs/ppo/version_0",
                  "trainer.max_env_steps=3000000"])
    stopped = max(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert stopped >= 20 and yaml.safe_load(
        (run / "config.yaml").read_text())["trainer"]["max_env_steps"] == 3000000
    capsys.readouterr()
    with pytest.raises(jt.Preempted):  # the plain resume goes on to 3M (stopped again)
        cli.main(["fit", "ppo", "trainer.ckpt_path=runs/ppo/version_0"])
    said = capsys.readouterr()
    assert f"resuming from checkpoint runs/ppo/version_0/checkpoints/{stopped} at step {stopped} " \
           f"({stopped * 512} env steps) of 5859\n" in said.out + said.err
    assert f"running training steps {stopped + 1}-" in said.out + said.err
    assert "nothing to train" not in said.out + said.err


def test_a_misspelt_checkpoint_monitor_warns_at_the_end_naming_the_metrics(monkeypatch, tmp_path):
    """A first-hour user's input: the checkpoints guide says a monitored name that never
    appears warns at the end of training; ModelCheckpoint did not (EarlyStopping did), and
    `eval --ckpt best` later said the run records no best checkpoint."""
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning) as record:
        result = fit.run(["callbacks.checkpoint.monitor=train/episode_retrn",
                          "callbacks.checkpoint.mode=max", "callbacks.checkpoint.every_n_steps=50",
                          "trainer.max_env_steps=51200"], "ppo")
    assert result["step"] == 100 and result["env_steps"] == 51200
    said = [str(w.message) for w in record if "never appeared" in str(w.message)]
    assert len(said) == 1 and said[0].startswith(
        "ModelCheckpoint(monitor='train/episode_retrn'): ['train/episode_retrn'] never appeared")
    assert "train/episode_return" in said[0]  # the names there were


def test_a_misspelt_env_name_key_is_suggested():
    """A first-hour user's input: every misspelt key got a did-you-mean but `env.nam`, which
    the env section passes to the env's constructor as a keyword."""
    proc = subprocess.run([sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo",
                           "env.nam=Acrobot-v1"], capture_output=True, text=True, timeout=100,
                          cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxtrainer fit ppo: error: config keys env.nam:")
    assert lines[0].endswith("; did you mean env.name=Acrobot-v1?"), lines
