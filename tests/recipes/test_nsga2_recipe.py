"""``jaxtrainer fit nsga2``: NSGA-II on ZDT1 from the shipped config (Deb et al.
2002's settings), its last line the final population's hypervolume."""

from __future__ import annotations

import csv
import importlib.util
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

from jaxtrainer.commands import _plot, fit
from jaxtrainer.population import NSGA2, non_dominated_ranks
from jaxtrainer.population.front_report import TAG, read_front
from jaxtrainer.recipes import _catalog as catalog
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import POPULATION_RECIPES, build_module

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_config_has_the_papers_settings():
    cfg = config.load(catalog.config_file("nsga2"))
    module = build_module("nsga2", cfg)
    assert isinstance(module, NSGA2) and "nsga2" in POPULATION_RECIPES
    assert (module.task.name, module.task.num_dims) == ("zdt1", 30)
    assert (module.crossover_prob, module.crossover_eta) == (0.9, 20.0)
    assert (module.mutation_prob, module.mutation_eta) == (pytest.approx(1 / 30), 20.0)
    assert module.reference_point == (-1.0, -1.0)
    t = cfg.trainer
    assert (t.population_size, t.max_generations) == (100, 250)


def test_fit_nsga2_prints_the_hypervolume_logs_the_front_and_draws_it(tmp_path, capsys):
    result = fit.run(
        [
            "trainer.max_generations=6",
            "trainer.population_size=20",
            "trainer.log_every_n_generations=3",
            "trainer.enable_progress_bar=false",
            "trainer.compilation_cache=false",
            "env.name=zdt2",
            "env.num_dims=8",
            f"trainer.default_root_dir={tmp_path}",
        ],
        recipe="nsga2",
    )
    last = capsys.readouterr().out.strip().splitlines()[-1]
    run_dir = tmp_path / "version_0"
    assert last == f"eval/hypervolume={result['eval/hypervolume']:.2f} run_dir={run_dir}"
    assert 0 <= result["eval/hypervolume"] < 1 / 3  # ZDT2's true front: 1/3
    assert 1 <= result["eval/front_size"] <= 20
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows if r["moo/hypervolume"]] == ["3", "6"]
    assert float(rows[-1]["eval/hypervolume"]) == pytest.approx(result["eval/hypervolume"])
    trained = [r for r in rows if r["moo/hypervolume"]][-1]  # per objective (maximised -f)
    for j in (0, 1):
        low, high = float(trained[f"fitness/{j}/min"]), float(trained[f"fitness/{j}/max"])
        assert low <= float(trained[f"fitness/{j}/mean"]) <= high <= 0
    # the last population, by front, in front.csv; its figure in the run and in TensorBoard
    front = read_front(run_dir / "front.csv")
    assert len(front) == 20 and {r["generation"] for r in front} == {6.0}
    points = np.array([[r["objective_0"], r["objective_1"]] for r in front])
    np.testing.assert_array_equal(non_dominated_ranks(points), [r["rank"] for r in front])
    assert sum(r["rank"] == 0 for r in front) == result["eval/front_size"]
    drawn = (run_dir / "front.png").read_bytes()
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={IMAGES: 0})
    events.Reload()
    images = events.Images(TAG)
    assert images[-1].step == 6 and images[-1].encoded_image_string == drawn
    assert Image.open(run_dir / "front.png").size == (500, 400)
    # jaxtrainer plot of the run draws the same front
    out = tmp_path / "front_again.png"
    assert _plot.main([str(run_dir), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"wrote {out}: the population of" in said and "(generation 6)" in said
    assert Image.open(out).size == (500, 400)


@pytest.mark.parametrize("task", ["zdt1", "zdt2", "zdt3"])
def test_the_committed_zdt_runs_are_at_or_above_pymoos_nsga2(task, monkeypatch):
    """docs/baselines.md's NSGA-II rows: five seeds a side at Deb et al.'s budget, our mean
    hypervolume at or above pymoo's mean minus its spread, below the true front's."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("published", ROOT / "benchmarks" / "published.py")
    published = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(published)
    beside = yaml.safe_load((ROOT / "benchmarks" / "published.yaml").read_text())["side_by_side"]
    row = next(r for r in beside if r["id"] == f"nsga2-{task}")
    runs = json.loads((ROOT / "docs" / "baselines" / f"nsga2-{task}.json").read_text())
    for side in ("ours", "theirs"):
        assert sorted(r["seed"] for r in runs if r["side"] == side) == [0, 1, 2, 3, 4]
        assert {r["env_steps"] for r in runs if r["side"] == side} == {25_000}
    entry = published.side_by_side(row, runs)
    theirs = entry["their_finals"]
    assert entry["threshold"] == pytest.approx(statistics.mean(theirs) - statistics.stdev(theirs))
    assert entry["passed"] and entry["mean"] >= entry["threshold"]
    true = {"zdt1": 2 / 3, "zdt2": 1 / 3, "zdt3": 1.0444}[task]
    assert max(entry["finals"] + theirs) < true
    line = next(
        x
        for x in published.side_by_side_lines(beside, ROOT / "docs")
        if x.startswith(f"| nsga2 (recipes/configs/nsga2.yaml) {task.upper()} ")
    )
    assert "| 25,000 evaluations |" in line and f"| {entry['mean']:.4f} (5) |" in line


@pytest.mark.default_emitters
def test_the_recipe_on_one_and_four_devices_ends_with_the_same_front(tmp_path):
    """``jaxtrainer fit nsga2`` with ``trainer.devices=1`` and ``=4`` (pmap; 30 members padded
    to 32): the same front.csv, value for value, and the same last line."""
    fronts, finals = [], []
    for devices in (1, 4):
        root = tmp_path / f"d{devices}"
        result = fit.run(
            [
                "trainer.max_generations=12",
                "trainer.population_size=30",
                "trainer.log_every_n_generations=4",
                "trainer.enable_progress_bar=false",
                "trainer.compilation_cache=false",
                "trainer.strategy=pmap",
                f"trainer.devices={devices}",
                "logger.tensorboard=false",
                "env.num_dims=10",
                f"trainer.default_root_dir={root}",
            ],
            recipe="nsga2",
        )
        fronts.append((root / "version_0" / "front.csv").read_text())
        finals.append(result["eval/hypervolume"])
    assert fronts[0] == fronts[1] and finals[0] == finals[1] > 0
