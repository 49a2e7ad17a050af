"""Paths given to the project expand ``~`` and environment variables, as a shell
would: ``default_root_dir="~/runs"`` never makes a directory named ``~``."""

from __future__ import annotations

import os
from pathlib import Path

import jax.numpy as jnp
import pytest

import jaxtrainer as jt
from jaxtrainer.commands import _plot as plot


class Counter(jt.Module):
    def init_state(self, key):
        return {"t": jnp.zeros(())}

    def training_step(self, state, key):
        return {"t": state["t"] + 1.0}, {"score": state["t"]}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RUNS", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _trainer(root, **kwargs):
    kwargs = {"max_steps": 4, **kwargs}
    return jt.Trainer(strategy="single", log_every_n_steps=2, enable_progress_bar=False,
                      default_root_dir=root, **kwargs)


def test_root_dir_loggers_and_checkpoints_expand_home_and_variables(home):
    trainer = _trainer("~/runs", logger=False,
                       callbacks=[jt.CSVLogger(save_dir="$RUNS/csv"),
                                  jt.ModelCheckpoint(every_n_steps=2),
                                  jt.ModelCheckpoint("${RUNS}/best", monitor="score", mode="max",
                                                     every_n_steps=2)])
    trainer.fit(Counter())
    assert Path(trainer.log_dir) == home / "home" / "runs" / "version_0"
    assert (home / "home" / "runs" / "version_0" / "checkpoints" / "4").is_dir()
    assert (home / "elsewhere" / "best" / "4").is_dir()
    assert list((home / "elsewhere" / "csv").rglob("metrics.csv"))
    assert not (home / "~").exists() and not (home / "$RUNS").exists()

    # ckpt_path, resolve, load of a saved run: the same expansion
    again = _trainer("~/runs", max_steps=6, logger=False)
    again.fit(Counter(), ckpt_path="~/runs/version_0/checkpoints/4")
    assert again.global_step == 6
    assert jt.checkpoint.resolve("~/runs/version_0") == home / "home" / "runs" / "version_0" / \
        "checkpoints" / "6"  # the resumed run's newest
    assert jt.checkpoint.resolve("$RUNS/best", "last") == home / "elsewhere" / "best" / "4"


def test_plot_output_expands_home(home):
    trainer = _trainer("~/runs")
    trainer.fit(Counter())
    assert plot.main(["~/runs/version_0", "--metric", "score", "--x", "step",
                      "-o", "~/curves.png"]) == 0
    assert (home / "home" / "curves.png").is_file()
    assert not (home / "~").exists()
    assert os.environ["HOME"] == str(home / "home")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_path_through_dotdot_reads_and_resumes_a_healthy_checkpoint(tmp_path, monkeypatch, capsys):
    """A new user's inputs, from another folder: ``jaxtrainer eval ../jaxtrainer/runs/...``
    and a resume with ``trainer.default_root_dir=../rr``. TensorStore refuses a path
    that holds ``..``; the checkpoint was reported damaged."""
    import importlib.util
    import shutil

    from jaxtrainer.commands import _eval_cli as eval_cli

    fixtures = Path(__file__).parents[1] / "_support" / "fixtures"
    spec = importlib.util.spec_from_file_location("make_release_runs", fixtures / "make_release_runs.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    shutil.copytree(fixtures / "release_runs" / "ppo_recipe", tmp_path / "jaxtrainer" / "runs")
    shutil.copytree(fixtures / "release_runs" / "ppo_python", tmp_path / "rr")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert eval_cli.main(["../jaxtrainer/runs/version_0", "--episodes", "2"]) == 0
    assert "damaged" not in capsys.readouterr().err
    trainer = make.python_fit(make.python_modules()["ppo_python"], Path("../rr"), 3, "last")
    assert trainer.global_step == 3
    assert jt.load_policy("../rr/version_0").global_step == 3
