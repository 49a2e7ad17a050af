"""``jaxtrainer fit pga_me``: PGA-ME on QDax's walker2d_uni from the shipped
config (QDax's ``examples/pgame.ipynb`` settings), its last line the QD-score."""

from __future__ import annotations

import csv

import pytest

from jaxtrainer.commands import fit
from jaxtrainer.population import PGAME
from jaxtrainer.recipes import _catalog as catalog
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import POPULATION_RECIPES, build_module


@pytest.mark.slow
def test_the_shipped_config_has_qdax_pgame_notebook_settings():
    cfg = config.load(catalog.config_file("pga_me"))
    module = build_module("pga_me", cfg)
    assert isinstance(module, PGAME) and "pga_me" in POPULATION_RECIPES
    # walker2d_uni with a (256, 256) policy: 17*256+256 + 256*256+256 + 256*6+6 parameters
    assert (module.task.name, module.task.num_dims, module.grid_shape) == (
        "walker2d_uni", 71942, (32, 32))
    assert (module.iso_sigma, module.line_sigma, module.qd_offset) == (0.005, 0.05, 353.25)
    assert (module.proportion_mutation_ga, module.num_critic_training_steps,
            module.num_pg_training_steps, module.batch_size, module.policy_delay) == (
        0.5, 300, 100, 256, 2)
    assert (module.critic_learning_rate, module.greedy_learning_rate,
            module.policy_learning_rate, module.soft_tau_update) == (3e-4, 3e-4, 1e-3, 0.005)
    t = cfg.trainer
    assert (t.population_size, t.max_generations, t.seed) == (100, 1000, 42)


@pytest.mark.slow
def test_fit_pga_me_prints_the_qd_score_and_logs_the_critic_loss(tmp_path, capsys):
    result = fit.run(["trainer.max_generations=2", "trainer.population_size=4",
                      "trainer.log_every_n_generations=1", "trainer.enable_progress_bar=false",
                      "trainer.compilation_cache=false", "logger.tensorboard=false",
                      "env.episode_length=5", "env.policy_hidden_sizes=[8]",
                      "algorithm.grid_shape=[4,4]", "algorithm.num_pg_training_steps=2",
                      "algorithm.num_critic_training_steps=2", "algorithm.batch_size=8",
                      "algorithm.replay_buffer_size=400", "algorithm.critic_hidden_layer_size=[16]",
                      f"trainer.default_root_dir={tmp_path}"], recipe="pga_me")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    run_dir = tmp_path / "version_0"
    assert last == f"eval/qd_score={result['eval/qd_score']:.2f} run_dir={run_dir}"
    assert 0 < result["eval/coverage"] <= 100
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    losses = [r["critic/loss"] for r in rows if r.get("critic/loss")]
    assert losses[0] == "nan" and float(losses[-1]) >= 0  # generation 0 trains nothing
    assert float(rows[-1]["eval/qd_score"]) == pytest.approx(result["eval/qd_score"])
