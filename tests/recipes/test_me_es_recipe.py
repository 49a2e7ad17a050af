"""``jaxtrainer fit me_es``: ME-ES on QDax's walker2d_uni from the shipped config
(QDax's ``examples/mees.ipynb`` settings), its last line the QD-score."""

from __future__ import annotations

import csv

import pytest

from jaxtrainer.commands import fit
from jaxtrainer.population import MEES
from jaxtrainer.recipes import _catalog as catalog
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import POPULATION_RECIPES, build_module


@pytest.mark.slow
def test_the_shipped_config_has_qdax_mees_notebook_settings():
    cfg = config.load(catalog.config_file("me_es"))
    module = build_module("me_es", cfg)
    assert isinstance(module, MEES) and "me_es" in POPULATION_RECIPES
    # walker2d_uni with a (64, 64) policy: 17*64+64 + 64*64+64 + 64*6+6 parameters
    assert (module.task.name, module.task.num_dims, module.grid_shape) == (
        "walker2d_uni",
        5702,
        (32, 32),
    )
    assert (
        module.sample_sigma,
        module.num_optimizer_steps,
        module.learning_rate,
        module.l2_coefficient,
        module.novelty_nearest_neighbors,
    ) == (0.02, 10, 0.01, 0.02, 10)
    assert (
        module.last_updated_size,
        module.exploit_num_cell_sample,
        module.explore_num_cell_sample,
        module.novelty_archive_size,
    ) == (5, 2, 5, 100)
    assert module.sample_mirror and module.sample_rank_norm and module.adam_optimizer
    assert module.use_explore and module.use_exploit and module.qd_offset == pytest.approx(141.3)
    t = cfg.trainer
    assert (t.population_size, t.max_generations, t.seed) == (1000, 101, 42)


@pytest.mark.slow
def test_fit_me_es_prints_the_qd_score_and_logs_the_mode(tmp_path, capsys):
    result = fit.run(
        [
            "trainer.max_generations=4",
            "trainer.population_size=8",
            "trainer.log_every_n_generations=1",
            "trainer.enable_progress_bar=false",
            "trainer.compilation_cache=false",
            "logger.tensorboard=false",
            "env.episode_length=5",
            "env.policy_hidden_sizes=[8]",
            "algorithm.grid_shape=[4,4]",
            "algorithm.num_optimizer_steps=2",
            "algorithm.novelty_archive_size=4",
            "algorithm.novelty_nearest_neighbors=2",
            f"trainer.default_root_dir={tmp_path}",
        ],
        recipe="me_es",
    )
    last = capsys.readouterr().out.strip().splitlines()[-1]
    run_dir = tmp_path / "version_0"
    assert last == f"eval/qd_score={result['eval/qd_score']:.2f} run_dir={run_dir}"
    assert 0 < result["eval/coverage"] <= 100
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    modes = [float(r["es/explore"]) for r in rows if r.get("es/explore")]
    assert modes == [0.0, 1.0, 1.0, 0.0]  # generation 0, ES steps 0-1 explore, 2 exploits
    assert float(rows[-1]["eval/qd_score"]) == pytest.approx(result["eval/qd_score"])
