"""PPO through the recipe under pmap on 4 devices on the Craftax and EnvPool families:
Craftax's achievements logged, EnvPool's CartPole trained. (Their Env contract:
``test_env_craftax_envpool_kinetix.py``.)"""

from __future__ import annotations

import csv

import pytest

from tests._support.commands import recipe_script
from tests.envs.test_env_craftax_envpool_kinetix import CLASSIC

PMAP_PPO = ["trainer.strategy=pmap", "trainer.devices=4", "trainer.max_steps=2",
            "algorithm.num_envs=4", "algorithm.num_steps=8", "algorithm.num_minibatches=1",
            "algorithm.update_epochs=1", "algorithm.eval_episodes=4", "algorithm.hidden_sizes=[8]",
            "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
            "trainer.compile_evaluation_ahead=false", "trainer.enable_checkpointing=false",
            "logger.tensorboard=false"]
"""Two PPO updates of 4 envs x 8 steps split over 4 devices, a log line per update."""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_recipe_runs_craftax_under_pmap_and_logs_its_achievements(run_dir, capsys):
    pytest.importorskip("craftax")
    result = recipe_script("ppo").main([f"env.name={CLASSIC}", "env.max_timesteps=4",
                                        *PMAP_PPO, f"trainer.default_root_dir={run_dir}"])
    assert result["env_steps"] == 64 and 1.0 <= result["eval/episode_length"] <= 4.0
    (metrics_csv,) = run_dir.glob("*/metrics.csv")
    rows = list(csv.DictReader(metrics_csv.open()))
    logged = [r for r in rows if r.get("train/achievements/collect_wood")]
    assert logged and 0.0 <= float(logged[0]["train/achievements/collect_wood"]) <= 1.0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("eval/episode_return=")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ppo_recipe_runs_envpool_under_pmap_on_four_devices(run_dir, capsys):
    pytest.importorskip("envpool")
    result = recipe_script("ppo").main(["env.name=envpool/CartPole-v1", *PMAP_PPO,
                                        f"trainer.default_root_dir={run_dir}"])
    assert result["env_steps"] == 64 and 8.0 <= result["eval/episode_return"] <= 500.0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("eval/episode_return=")
