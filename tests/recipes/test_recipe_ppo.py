"""recipes/ppo.py end to end (tiny budget) and its bad-input errors (issue 2, must-show 5)."""

from __future__ import annotations

import csv
import importlib.util
import pathlib

import pytest

import jaxtrainer as jt

RECIPE = pathlib.Path(__file__).parents[2] / "recipes" / "ppo.py"


def recipe():
    spec = importlib.util.spec_from_file_location("ppo_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_tiny_run_leaves_logs_and_a_checkpoint(run_dir, capsys):
    result = recipe().main([
        f"trainer.default_root_dir={run_dir}", "trainer.max_env_steps=1024",
        "trainer.enable_progress_bar=false", "trainer.strategy=single",
        "algorithm.num_steps=32", "algorithm.eval_episodes=4", "trainer.log_every_n_steps=4",
    ])
    run = run_dir / "version_0"
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"eval/episode_return={result['eval/episode_return']:.2f} run_dir={run}"
    assert 8.0 <= result["eval/episode_return"] <= 500.0  # CartPole returns lie in [8, 500]
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert [int(r["step"]) for r in rows if r.get("env_steps")][-1] == 8  # 1024 // (4*32)
    assert int(rows[-1]["env_steps"]) == 1024
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "checkpoints" / "8").is_dir()


@pytest.mark.parametrize("override,match", [
    ("trainer.strategy=ddp", r"unknown strategy 'ddp'; choose one of: .*pmap.*single"),
    ("env.name=CartPole-v9", r"CartPole-v9.*CartPole-v1"),
    ("trainer.max_steps=0", r"max_steps=0: expected a positive int"),
    ("trainer.bogus=1", r"unknown config key 'trainer.bogus': trainer has keys: .*max_env_steps"),
    ("algorithm.lr", r"bad override 'algorithm.lr': expected key=value"),
    ("algorithm.lr=abc", r"^algorithm.lr='abc': expected a non-negative number"),
    ("trainer=5", r"bad override 'trainer=5': trainer is a section"),
])
def test_bad_input_names_the_value_and_the_choices(run_dir, override, match):
    with pytest.raises(ValueError, match=match):
        recipe().main([f"trainer.default_root_dir={run_dir}", override])
    assert not run_dir.exists()  # nothing written


def test_num_envs_not_divisible_by_devices_fails_before_compiling(run_dir, monkeypatch):
    compiled = []
    monkeypatch.setattr(jt.PmapStrategy, "compile_train", lambda *a, **k: compiled.append(1))
    with pytest.raises(ValueError, match=r"num_envs=6.*4 devices"):
        recipe().main([f"trainer.default_root_dir={run_dir}", "trainer.strategy=pmap",
                       "algorithm.num_envs=6", "algorithm.num_minibatches=2"])
    assert not compiled
