"""The budget as one value: a whole run's or each member's, a search slot's share,
and training steps from env steps (values worked by hand)."""

from fractions import Fraction

import pytest

from jaxtrainer.trainer.budget import Budget


def test_a_whole_runs_budget_is_its_own_total():
    budget = Budget(max_steps=10, max_env_steps=1000)
    assert budget.total(4) is budget and budget.is_set and not Budget().is_set


def test_a_members_env_steps_add_up_and_its_steps_are_shared():
    # a sweep of 4 members, 1000 env steps each: the program runs 4000; 10 steps each = 10 steps
    assert Budget(10, 1000, per_member=True).total(4) == Budget(10, 4000)


def test_a_search_slot_trains_its_share_of_a_members_budget():
    # search.runs=2 over 8 slots: each slot a quarter of a run: 1000 -> 250 env steps, 8 slots
    assert Budget(10, 1000, per_member=True, share=Fraction(1, 4)).total(8) == Budget(2, 2000)
    assert Budget(max_steps=3, per_member=True, share=Fraction(1, 4)).total(8).max_steps == 1  # >= 1


def test_training_steps_from_env_steps_the_smaller_of_both():
    assert Budget(max_env_steps=1000).in_steps(64) == 15           # 15 * 64 = 960 <= 1000
    assert Budget(max_steps=10, max_env_steps=1000).in_steps(64) == 10
    assert Budget(max_steps=20, max_env_steps=1000).in_steps(64) == 15
    assert Budget(max_steps=7).in_steps(0) == 7                    # no env steps: steps only


@pytest.mark.parametrize("budget, espp, message", [
    (Budget(max_env_steps=10), 64, r"^max_env_steps=10 is less than one training step \(64 env steps\)$"),
    (Budget(max_env_steps=100), 0, r"^max_env_steps=100 needs a module with env_steps_per_step > 0; PPO has 0$"),
    (Budget(max_steps=5), -1, r"^PPO.env_steps_per_step=-1: expected >= 0$"),
    (Budget(), 4, r"^no budget: set max_steps or max_env_steps$"),
])
def test_in_steps_refuses_a_budget_it_cannot_count(budget, espp, message):
    with pytest.raises(ValueError, match=message):
        budget.in_steps(espp, "PPO")


@pytest.mark.parametrize("kwargs, message", [
    ({"max_steps": 0}, r"^max_steps=0"), ({"max_env_steps": -5}, r"^max_env_steps=-5"),
    ({"max_steps": 1, "share": 0}, r"^share=0: expected a number in \(0, 1\]$"),
    ({"max_steps": 1, "share": True}, r"^share=True"), ({"max_steps": 1, "share": 1.5}, r"^share=1.5"),
])
def test_a_bad_budget_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Budget(**kwargs)


def test_the_trainer_takes_a_budget_or_its_two_arguments_not_both():
    import jaxtrainer as jt

    trainer = jt.Trainer(budget=Budget(max_env_steps=1000, per_member=True), logger=False,
                         enable_checkpointing=False, enable_progress_bar=False)
    assert trainer.budget == Budget(max_env_steps=1000, per_member=True) and trainer.has_budget
    with pytest.raises(ValueError, match=r"^budget=Budget\(.*given instead of max_steps"):
        jt.Trainer(budget=Budget(max_steps=2), max_steps=3)
    with pytest.raises(ValueError, match=r"^budget=7: expected a jaxtrainer.trainer.budget.Budget"):
        jt.Trainer(budget=7)


def test_a_budget_spent_in_rounds_ends_each_round_on_a_log_boundary():
    # an Optuna search's rounds: 100 steps in 4 rounds of 25; a log interval of 10 becomes 5
    assert Budget(max_steps=100, rounds=4).log_interval(10, 100) == 5
    assert Budget(max_steps=25, rounds=1).log_interval(10, 25) == 5     # the one round: 25 steps
    assert Budget(max_steps=100, rounds=4).log_interval(5, 100) == 5    # 5 divides 25 already
    assert Budget(max_steps=100).log_interval(10, 100) == 10            # no rounds: as given
    assert Budget(max_steps=3, rounds=8).log_interval(10, 3) == 1       # fewer steps than rounds
    assert Budget(10, 1000, per_member=True, share=Fraction(1, 4), rounds=3).total(8) == \
        Budget(2, 2000, rounds=3)
    with pytest.raises(ValueError, match=r"^rounds=0: expected a positive int or None$"):
        Budget(max_steps=1, rounds=0)
