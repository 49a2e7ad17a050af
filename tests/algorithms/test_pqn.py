"""PQN (Gallici et al. 2024): the Q(lambda) returns against a hand-written
recursion, truncation that bootstraps, exact resume on 4 devices with the
replicas equal, a wrong action space named in one line, and learning CartPole."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms import PQN, PQNConfig
from jaxtrainer.algorithms.pqn import q_lambda_returns
from tests._support import toys


def _reference(reward, terminated, done, next_q, gamma, lam):
    """The recursion written out step by step (float64)."""
    steps, n = reward.shape
    out = np.zeros((steps, n))
    for j in range(n):
        later = 0.0
        for t in reversed(range(steps)):
            ends = done[t, j] or t == steps - 1
            blend = next_q[t, j] if ends else lam * later + (1 - lam) * next_q[t, j]
            later = reward[t, j] + gamma * (1.0 - terminated[t, j]) * blend
            out[t, j] = later
    return out


def test_q_lambda_returns_match_the_recursion_with_termination_and_truncation():
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(6, 3)).astype(np.float32)
    next_q = rng.normal(size=(6, 3)).astype(np.float32)
    terminated = np.zeros((6, 3), bool)
    done = np.zeros((6, 3), bool)
    terminated[2, 0] = done[2, 0] = True  # env 0 terminates at step 2: no bootstrap
    done[3, 1] = True                     # env 1 truncated at step 3: bootstraps from next_q
    got = q_lambda_returns(jnp.asarray(reward), jnp.asarray(terminated), jnp.asarray(done),
                           jnp.asarray(next_q), jnp.float32(0.9), jnp.float32(0.65))
    want = _reference(reward, terminated, done, next_q, 0.9, 0.65)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    assert got[2, 0] == pytest.approx(reward[2, 0])
    assert got[3, 1] == pytest.approx(reward[3, 1] + 0.9 * next_q[3, 1])
    # lambda 0: one-step targets everywhere; lambda 1 within an episode: discounted sums
    one_step = q_lambda_returns(jnp.asarray(reward), jnp.asarray(terminated),
                                jnp.asarray(done), jnp.asarray(next_q), 0.9, 0.0)
    np.testing.assert_allclose(np.asarray(one_step),
                               reward + 0.9 * (1 - terminated) * next_q, rtol=1e-5, atol=1e-6)


def test_a_continuous_or_multi_discrete_env_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^PQN needs discrete actions; Pendulum-v1 has a Box"):
        PQN(env="Pendulum-v1")


TINY = dict(num_envs=4, num_steps=8, num_minibatches=2, update_epochs=2, hidden_sizes=(8,),
            total_updates=4,  # the schedules (lr, epsilon) span 4 updates in both runs
            eval_episodes=4)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_plus_two_steps_equal_four_on_four_devices_with_the_replicas_equal(tmp_path):
    straight = toys.two_plus_two_on_four_devices(tmp_path, lambda: PQN(PQNConfig(**TINY)))
    toys.replicas_equal(straight.state.params)
    envs = [np.asarray(s.data) for s in straight.state.obs.addressable_shards]
    assert not np.array_equal(envs[0], envs[1])  # each device steps its own envs


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pqn_learns_cartpole(tmp_path):
    """The recipe's settings (purejaxql's) with 64-64 units at a fifth of the
    budget: the greedy policy is far above a random one's ~20 (seed 0: 135.5)."""
    trainer = jt.Trainer(strategy="single", max_env_steps=102_400, log_every_n_steps=10,
                         default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    module = PQN(num_envs=32, num_steps=64, num_minibatches=16, hidden_sizes=(64, 64), lr=1e-4,
                 reward_scaling=0.1, q_lambda=0.95, epsilon_end=0.2, exploration_fraction=0.2)
    trainer.fit(module)
    assert trainer.evaluate(module)["eval/episode_return"] >= 100
