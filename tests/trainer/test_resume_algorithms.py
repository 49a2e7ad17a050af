"""Exact resume for the shipped algorithms (issue 3, must show 1): 2N steps
straight equal N steps + checkpoint + resume + N steps, for PPO on 1 and 2
devices and for a PopulationTrainer run."""

import csv
import os

import pytest

import jaxtrainer as jt
from tests._support import toys


def _rows(log_dir):
    with open(os.path.join(log_dir, "metrics.csv")) as f:
        return [dict(r) for r in csv.DictReader(f)]


def _ppo():
    from jaxtrainer.algorithms import PPO, PPOConfig

    return PPO(PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8, total_updates=6, update_epochs=1,
                         num_minibatches=2, hidden_sizes=(16,), eval_episodes=4))


@pytest.mark.slow
@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 2)])
def test_ppo_three_plus_three_equals_six(tmp_path, strategy, devices):
    # One straight run of 6 that also checkpoints at step 3; a fresh Trainer then
    # resumes from that checkpoint into the same run directory (dropping the
    # logged rows after step 3) and must reproduce steps 4..6 exactly.
    kw = dict(strategy=strategy, devices=devices, log_every_n_steps=1)
    straight = toys.trainer(tmp_path, max_steps=6, callbacks=[
        jt.CSVLogger(), jt.ModelCheckpoint(every_n_steps=3, async_save=False)], **kw)
    straight.fit(_ppo())
    want_state, want_rows = toys.leaves(straight.state), _rows(straight.log_dir)
    resumed = toys.trainer(tmp_path, max_steps=6, **kw)
    resumed.fit(_ppo(), ckpt_path=os.path.join(straight.log_dir, "checkpoints", "3"))
    assert resumed.log_dir == straight.log_dir
    assert (resumed.global_step, resumed.env_steps) == (6, 192)
    toys.assert_trees_equal(resumed.state, want_state)
    drop = {"steps_per_second", "env_steps_per_second"}  # wall-clock rates differ
    got_rows = _rows(resumed.log_dir)
    assert [r["step"] for r in got_rows] == ["1", "2", "3", "4", "5", "6"]
    assert ([{k: v for k, v in r.items() if k not in drop} for r in got_rows]
            == [{k: v for k, v in r.items() if k not in drop} for r in want_rows])


@pytest.mark.slow
def test_population_trainer_two_plus_two_equals_four(tmp_path):
    from jaxtrainer.algorithms.es import FunctionES, sphere
    from jaxtrainer.population import PopulationTrainer

    def run(root, gens, ckpt_path=None):
        t = PopulationTrainer(population_size=8, strategy="pmap", devices=2, max_generations=gens,
                                 log_every_n_generations=1, default_root_dir=root,
                                 enable_progress_bar=False, callbacks=[jt.CSVLogger()])
        t.fit(FunctionES(sphere, num_dims=3, algorithm="OpenES", init_mean=1.0), ckpt_path=ckpt_path)
        return t

    straight = run(tmp_path / "a", 4)
    run(tmp_path / "b", 2)
    resumed = run(tmp_path / "b", 4, "last")
    assert resumed.global_step == straight.global_step == 4
    toys.assert_trees_equal(resumed.state, straight.state)
    drop = {"steps_per_second", "env_steps_per_second"}
    assert ([{k: v for k, v in r.items() if k not in drop} for r in _rows(resumed.log_dir)]
            == [{k: v for k, v in r.items() if k not in drop} for r in _rows(straight.log_dir)])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pbt", "cem_rl"])
def test_evolutionary_rl_two_plus_two_equals_four(tmp_path, name):
    """PBT (exploit and explore every step, members on 2 devices) and CEM-RL
    (replay buffer, critic, search distribution) resume exactly."""
    def module():
        if name == "pbt":
            from jaxtrainer.population import PBT

            return PBT(_ppo(), {"lr": (1e-4, 1e-2)}, population_size=4, ready_every_n_steps=1)
        from jaxtrainer.algorithms import CEMRL, CEMRLConfig

        return CEMRL(CEMRLConfig(population_size=4, rollout_steps=20, critic_steps=4,
                                 actor_steps=2, actor_hidden_sizes=(8,), critic_hidden_sizes=(8,),
                                 buffer_size=400, batch_size=8, learning_starts=0,
                                 eval_episodes=4))

    kw = dict(strategy="pmap", devices=2, log_every_n_steps=1)
    straight = toys.trainer(tmp_path, max_steps=4, callbacks=[
        jt.CSVLogger(), jt.ModelCheckpoint(every_n_steps=2, async_save=False)], **kw)
    straight.fit(module())
    want = toys.leaves(straight.state)
    resumed = toys.trainer(tmp_path, max_steps=4, **kw)
    resumed.fit(module(), ckpt_path=os.path.join(straight.log_dir, "checkpoints", "2"))
    assert resumed.global_step == 4
    toys.assert_trees_equal(resumed.state, want)
