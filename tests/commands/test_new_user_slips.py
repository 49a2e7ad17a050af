"""Faults a new user met in their first hour (issue 68): a logger whose package is
not installed, a run directory given as the root of runs, the resume advice of a
config from another recipe, eval of a run still running. Each: one line naming
the value and what was expected, before anything is compiled or written."""

from __future__ import annotations

import sys

import pytest

from jaxtrainer.commands import _cli as cli
from jaxtrainer.commands import fit

WANDB_MISSING = (
    "logger.wandb: WandbLogger needs wandb, which is not installed: pip install 'jaxtrainer[wandb]'"
)


def _uninstall(monkeypatch, package: str) -> None:
    """``package`` as if not installed: ``import package`` fails, ``find_spec`` finds none."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)


def test_a_logger_whose_package_is_missing_is_one_line_before_anything_runs(
    tmp_path, capsys, monkeypatch
):
    """``jaxtrainer fit ppo logger.wandb.mode=offline trainer.max_env_steps=20000`` without
    the ``[wandb]`` extra ended after compiling in a 40-line traceback (status 1); the
    script with ``logger.wandb.tags=[a,b]`` in a traceback through the config check
    (``No module named 'wandb'``, no hint). Both: the one line naming the extra, status 2,
    no run directory."""
    monkeypatch.chdir(tmp_path)
    _uninstall(monkeypatch, "wandb")
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "ppo", "logger.wandb.mode=offline", "trainer.max_env_steps=20000"])
    assert done.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"jaxtrainer fit ppo: error: {WANDB_MISSING}"]
    assert "compiling" not in captured.out
    with pytest.raises(SystemExit) as done:
        fit.script(
            "ppo",
            [
                "callbacks.checkpoint.every_n_steps=100",
                "logger.wandb.mode=offline",
                "logger.wandb.tags=[a,b]",
            ],
            prog="recipes/ppo.py",
        )
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"recipes/ppo.py: error: {WANDB_MISSING}"]
    assert not (tmp_path / "runs").exists()  # no runs/ppo/version_0


def test_a_wandb_logger_made_without_wandb_says_so_when_made(monkeypatch):
    """In Python too: when the logger is made, not when fit starts (compiled by then)."""
    import jaxtrainer as jt

    _uninstall(monkeypatch, "wandb")
    with pytest.raises(
        ModuleNotFoundError,
        match=r"^WandbLogger needs wandb, which is not "
        r"installed: pip install 'jaxtrainer\[wandb\]'$",
    ):
        jt.WandbLogger(mode="offline")


def test_a_video_of_an_env_whose_renderer_is_missing_is_one_line_before_anything_runs(
    tmp_path, capsys, monkeypatch
):
    """The same kind: ``callbacks.video`` of CartPole without the ``[render]`` extra
    (pygame) trained on without videos; from the command line it is one line, status 2."""
    monkeypatch.chdir(tmp_path)
    _uninstall(monkeypatch, "pygame")
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "ppo", "callbacks.video.every_n_steps=200", "trainer.max_env_steps=20000"])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "jaxtrainer fit ppo: error: callbacks.video: drawing CartPole-v1 needs pygame "
        '(Gymnasium\'s classic-control renderer): pip install "jaxtrainer[render]"'
    ]
    assert not (tmp_path / "runs").exists()


def test_eval_of_a_run_still_running_before_its_first_checkpoint_says_it_runs(
    tmp_path, capsys, monkeypatch
):
    """``jaxtrainer eval runs/fresh/version_0`` while ``jaxtrainer fit ppo ...
    trainer.default_root_dir=runs/fresh`` ran said the run "stopped before its first
    checkpoint"; it held its lock: the line says it is still running, and who runs it."""
    import json
    import os
    import socket
    import time

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "fresh" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    started = time.time()
    (run / ".lock").write_text(
        json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "started": started})
    )
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    assert cli.main(["eval", "runs/fresh/version_0", "--episodes", "4"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "jaxtrainer eval: error: no checkpoint in runs/fresh/version_0 yet: the run is still "
        f"running (process {os.getppid()} on {socket.gethostname()} since {since} holds its lock) "
        "and has not saved its first checkpoint"
    ]
    (run / ".lock").unlink()  # it ended without a checkpoint: as before
    assert cli.main(["eval", "runs/fresh/version_0", "--episodes", "4"]) == 2
    assert "(the run stopped before its first checkpoint)" in capsys.readouterr().err


def test_a_config_of_another_recipe_names_the_command_the_user_types(tmp_path, capsys, monkeypatch):
    """``jaxtrainer fit sac --config <a ppo run's config.yaml>`` advised ``run recipes/ppo.py
    --config ...``: the console command's user is told the console command, the script's
    user the script."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "ppo" / "version_0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("recipe: ppo\ntrainer:\n  seed: 0\n")
    config = "runs/ppo/version_0/config.yaml"
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "sac", "--config", config])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jaxtrainer fit sac: error: {config} is a config of the 'ppo' recipe (recipe: ppo), "
        f"not of 'sac': run jaxtrainer fit ppo --config {config}"
    ]
    with pytest.raises(SystemExit):
        fit.script("sac", ["--config", config], prog="recipes/sac.py")
    assert capsys.readouterr().err.splitlines() == [
        f"recipes/sac.py: error: {config} is a config of the 'ppo' recipe (recipe: ppo), "
        f"not of 'sac': run python recipes/ppo.py --config {config}"
    ]


PRIVATE = r"\b[\w.]*\._\w[\w.]*"  # a dotted name with a private part (jaxtrainer.runtime._slurm)


def test_help_names_only_documented_things(capsys):
    """``jaxtrainer fit ppo --help`` named ``jaxtrainer.rundir._run_kind.acceptor_of`` and
    ``jaxtrainer.runtime._slurm``; the preset line named a folder that is not there
    (``recipes/_presets``)."""
    import re
    from pathlib import Path

    import jaxtrainer

    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "ppo", "--help"])
    assert done.value.code == 0
    text = re.sub(r"\n\s+", " ", capsys.readouterr().out)  # wrapped lines joined
    assert "trainer.requeue=" in text and "trainer.ckpt_path=" in text
    assert re.findall(PRIVATE, text) == []
    with pytest.raises(SystemExit):
        cli.main(["fit", "ppo", "env.name=Pendulum-v1", "--help"])
    text = re.sub(r"\n\s+", " ", capsys.readouterr().out)
    (named,) = re.findall(r"then its preset for Pendulum-v1 \((jaxtrainer/[\w/]+\.yaml)\)", text)
    assert (Path(jaxtrainer.__file__).parent.parent / named).is_file()
    assert re.findall(PRIVATE, text) == []


def test_a_run_directory_as_the_root_of_runs_is_refused_before_anything_is_written(
    tmp_path, capsys, monkeypatch
):
    """``jaxtrainer fit ppo trainer.max_env_steps=20000
    trainer.default_root_dir=runs/ppo/version_0`` made runs/ppo/version_0/version_0, a run
    inside a run: one line naming the value, a root of runs and how that run resumes."""
    import jaxtrainer as jt

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "ppo" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("recipe: ppo\n")
    argv = [
        "fit",
        "ppo",
        "trainer.max_env_steps=20000",
        "trainer.default_root_dir=runs/ppo/version_0",
    ]
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "jaxtrainer fit ppo: error: trainer.default_root_dir=runs/ppo/version_0: is a run "
        "directory (it holds config.yaml, checkpoints); expected a root of runs, e.g. runs/ppo, "
        "where each run goes to version_<n>; to resume that run: "
        "trainer.ckpt_path=runs/ppo/version_0"
    ]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml"]
    with pytest.raises(
        ValueError,
        match=r"^default_root_dir='runs/ppo/version_0': is a run "
        r"directory \(it holds config.yaml, checkpoints\); expected a root of runs, "
        r"e\.g\. 'runs/ppo' .*fit\(module, ckpt_path='runs/ppo/version_0'\)$",
    ):
        jt.Trainer(default_root_dir="runs/ppo/version_0")
    jt.Trainer(default_root_dir="runs/ppo")  # the root itself, and a run not yet there: taken
    jt.Trainer(default_root_dir="runs/ppo/version_7")
