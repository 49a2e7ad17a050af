"""A2C: the loss by hand, one full-batch update per step, learning on a tiny
problem, replicas that stay bitwise equal on 4 devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import envs
from jaxtrainer.algorithms.a2c import A2C, A2CConfig
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy
from tests.envs.test_envs import FixedLength


def test_a2c_loss_by_hand():
    a2c = A2C(A2CConfig(hidden_sizes=(4,), vf_coef=0.5, ent_coef=0.1))
    params = a2c.network.init(jax.random.key(0), jnp.zeros((4,)))
    obs = jax.random.normal(jax.random.key(1), (6, 4))
    batch = {"obs": obs, "action": jnp.array([0, 1, 1, 0, 1, 0]),
             "advantage": jnp.arange(6.0) - 2.0, "target": jnp.ones(6)}
    total, aux = a2c.loss(params, batch, a2c.initial_hyperparams())
    dist, value = a2c.network.apply(params, obs)
    logp = np.asarray(dist.log_prob(batch["action"]))
    policy = -np.mean(np.asarray(batch["advantage"]) * logp)
    vloss = 0.5 * np.mean((np.asarray(value) - 1.0) ** 2)
    ent = np.mean(np.asarray(dist.entropy()))
    assert float(aux["policy"]) == pytest.approx(policy, rel=1e-5)
    assert float(aux["value"]) == pytest.approx(vloss, rel=1e-5)
    assert float(total) == pytest.approx(policy + 0.5 * vloss - 0.1 * ent, rel=1e-5)


@pytest.mark.slow
def test_a2c_learns_the_rewarding_action_and_replicas_agree_on_4_devices():
    # Reward = action, episodes of 5 steps: the greedy policy must pick action 1
    # every step (return 5) after a few hundred updates; replicas stay bitwise equal.
    env = envs.GymnaxEnv(FixedLength(length=5, reward_is_action=True), name="FixedLength")
    a2c = A2C(A2CConfig(num_envs=8, num_steps=5, lr=3e-3, optimizer="adam", hidden_sizes=(16,),
                        eval_episodes=4), env=env)
    assert a2c.env_steps_per_step == 40
    strategy = PmapStrategy(devices=4)
    a2c.validate(4)
    state = strategy.init_state(a2c, jax.random.key(0))
    train = strategy.compile_train(a2c, state, jax.random.key(1))
    state, m = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(300))
    for leaf in jax.tree.leaves((state.params, state.opt_state)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
    assert int(state.update_count) == 300
    assert to_host(m)["train/episode_return"] > 3.5          # mean over the 300 updates
    evaluate = strategy.compile_eval(a2c, state, jax.random.key(2))
    assert to_host(evaluate.fn(state, jax.random.key(2)))["eval/episode_return"] == 5.0


def test_a2c_rejects_sizes_that_do_not_split():
    with pytest.raises(ValueError, match=r"A2C: num_envs=6 is not divisible by the 4 devices"):
        A2C(A2CConfig(num_envs=6)).validate(4)
    with pytest.raises(ValueError, match="optimizer='sgd'"):
        A2CConfig(optimizer="sgd")
    A2C(A2CConfig(num_envs=6, eval_episodes=6)).validate(2)


@pytest.mark.slow
def test_a2c_continuous_actions_run_and_stay_finite():
    a2c = A2C(A2CConfig(env="Pendulum-v1", num_envs=2, num_steps=4, hidden_sizes=(8,),
                        eval_episodes=2))
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(a2c, jax.random.key(0))
    train = strategy.compile_train(a2c, state, jax.random.key(1))
    _, m = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(3))
    assert all(np.isfinite(v) for v in to_host(m).values())


@pytest.mark.slow
def test_a2c_recipe_tiny_run_on_4_devices(run_dir, capsys):
    from test_dqn import run_recipe

    result, rows = run_recipe("a2c", run_dir, capsys, "trainer.max_env_steps=2000",
                              "trainer.log_every_n_steps=25", "algorithm.eval_episodes=4")
    assert int(rows[-1]["env_steps"]) == 2000                # 50 updates x 40 env steps
    assert 8.0 <= result["eval/episode_return"] <= 500.0
