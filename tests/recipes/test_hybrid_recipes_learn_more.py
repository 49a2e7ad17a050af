"""The other two evolution + RL hybrids learn Pendulum-v1 as a user runs them
(ERL-EDA at a tenth of its budget, CEMRL-OpenES at a fifth)
(a second file, so the two test workers share the four runs; see
``test_hybrid_recipes_learn.py``)."""

from __future__ import annotations

import pytest

from tests.recipes.test_hybrid_recipes_learn import PENDULUM, learns


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("recipe, budget", [
    ("erl_eda", ("trainer.max_env_steps=20000", "trainer.devices=1")),  # -169 at 20k, seed 0
    pytest.param("cemrl_openes", PENDULUM, marks=pytest.mark.default_emitters)])
def test_the_recipe_learns_at_a_fraction_of_its_budget(recipe, budget, tmp_path):
    learns(recipe, budget, -500.0, tmp_path)
