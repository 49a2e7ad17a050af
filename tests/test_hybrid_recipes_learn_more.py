"""The other two evolution + RL hybrids learn Pendulum-v1 as a user runs them
(a second file, so the two test workers share the four runs; see
``test_hybrid_recipes_learn.py``)."""

from __future__ import annotations

import pytest

from tests.test_hybrid_recipes_learn import PENDULUM, learns


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("recipe", ["erl_eda", "cemrl_openes"])
def test_the_recipe_learns_at_a_fifth_of_its_budget(recipe, tmp_path):
    learns(recipe, PENDULUM, -500.0, tmp_path)
