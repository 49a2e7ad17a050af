"""The evolutionary recipes learn, run as a user runs them (``jaxtrainer fit
NAME``) at a fraction of their default budget: the evolution + RL hybrids on
Pendulum-v1, where a random actor scores about -1,200 and the full runs reach
-150 to -190 (see the benchmarks page): ERL-ES at 20,000 env steps (a tenth;
-837 there with seed 0, against >= -500 at 40,000), on one
device as on a CPU machine (the tests' 4 fake devices would have to divide the
populations and RL episodes); PBT-CSO's 8 PPO members on CartPole-v1 at 100 of
its 200 updates, over the 4 fake devices. One learning case per family is checked in
CI; the other hybrids' floors are ``benchmarks/learning_floors.py``'s."""

from __future__ import annotations

import re

import pytest

from jaxtrainer.commands import _cli as cli

PENDULUM = ("trainer.max_env_steps=40000", "trainer.devices=1")
PENDULUM_20K = ("trainer.max_env_steps=20000", "trainer.devices=1")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("recipe, budget, floor", [
    ("erl_es", PENDULUM_20K, -1000.0), ("pbt_cso", ("trainer.max_steps=100",), 450.0)])
def test_the_recipe_learns_at_a_fraction_of_its_budget(recipe, budget, floor, tmp_path, capsys):
    learns(recipe, budget, floor, tmp_path, capsys)


def learns(recipe, budget, floor, tmp_path, capsys):
    """``jaxtrainer fit RECIPE BUDGET ...`` through the command's ``main`` in this
    process (what the console command calls); its last line's return >= ``floor``."""
    status = cli.main(
        [
            "fit",
            recipe,
            *budget,
            "trainer.seed=0",
            f"trainer.default_root_dir={tmp_path}",
            "trainer.enable_progress_bar=false",
            "trainer.enable_checkpointing=false",
            "trainer.logger=false",
        ]
    )
    said = capsys.readouterr()
    assert status == 0, said.err[-2000:]
    last = said.out.strip().splitlines()[-1]
    found = re.fullmatch(r"eval/episode_return=(-?[\d.]+) (.* )?run_dir=\S+", last)
    assert found, last
    assert float(found.group(1)) >= floor, last
