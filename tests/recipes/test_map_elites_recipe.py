"""``jaxtrainer fit map_elites``: MAP-Elites on QDax's arm from the shipped
config (QDax's ``examples/me_arm_example.py`` settings), its last line the QD-score."""

from __future__ import annotations

import csv

import pytest

from jaxtrainer.commands import fit
from jaxtrainer.population import MAPElites
from jaxtrainer.recipes import _catalog as catalog
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import POPULATION_RECIPES, build_module


def test_the_shipped_config_has_qdax_arm_example_settings():
    cfg = config.load(catalog.config_file("map_elites"))
    module = build_module("map_elites", cfg)
    assert isinstance(module, MAPElites) and "map_elites" in POPULATION_RECIPES
    assert (module.task.name, module.task.num_dims, module.grid_shape) == ("arm", 8, (100, 100))
    assert (module.iso_sigma, module.line_sigma, module.qd_offset) == (0.005, 0.0, 0.0)
    t = cfg.trainer
    assert (t.population_size, t.max_generations, t.seed) == (2048, 1000, 42)


def test_fit_map_elites_prints_the_qd_score_and_logs_qd_metrics(tmp_path, capsys):
    result = fit.run(["trainer.max_generations=6", "trainer.population_size=64",
                      "trainer.log_every_n_generations=3", "trainer.enable_progress_bar=false",
                      "trainer.compilation_cache=false", "logger.tensorboard=false",
                      "algorithm.grid_shape=[10,10]", f"trainer.default_root_dir={tmp_path}"],
                     recipe="map_elites")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    run_dir = tmp_path / "version_0"
    assert last == f"eval/qd_score={result['eval/qd_score']:.2f} run_dir={run_dir}"
    assert 0 < result["eval/coverage"] <= 100 and result["eval/qd_score"] < 0  # arm: fitness <= 0
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows if r["qd/score"]] == ["3", "6"]
    assert float(rows[-1]["eval/qd_score"]) == pytest.approx(result["eval/qd_score"])
    assert float(rows[-1]["eval/coverage"]) == pytest.approx(result["eval/coverage"])
