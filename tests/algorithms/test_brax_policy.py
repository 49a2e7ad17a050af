"""policy: brax: Brax's tanh-squashed Gaussian (the same log-probabilities and
entropy as brax.training.distribution), its layout, actions within the bounds,
and PPO's per-minibatch entropy sample."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.algorithms.distributions import TanhNormal
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import SingleDeviceStrategy


def test_tanh_normal_is_braxs_normal_tanh_distribution():
    from brax.training.distribution import NormalTanhDistribution

    brax = NormalTanhDistribution(event_size=3)
    params = jax.random.normal(jax.random.key(0), (5, 6)) * 2.0
    raw = jax.random.normal(jax.random.key(1), (5, 3)) * 3.0
    loc, scale = jnp.split(params, 2, axis=-1)
    ours = TanhNormal(loc, jax.nn.softplus(scale) + 0.001)
    np.testing.assert_allclose(ours.log_prob(raw), brax.log_prob(params, raw), rtol=1e-5, atol=1e-5)
    key = jax.random.key(2)
    np.testing.assert_allclose(ours.entropy(key), brax.entropy(params, jax.random.key_data(key)),
                               rtol=1e-6)
    np.testing.assert_array_equal(TanhNormal.squash(ours.mode()), brax.mode(params))


@pytest.mark.slow
def test_ppo_with_braxs_policy_acts_within_the_bounds_and_trains():
    ppo = PPO(env="Pendulum-v1", num_envs=4, num_steps=16, num_minibatches=2, policy="brax",
              anneal_lr=False, hidden_sizes=(16,), critic_hidden_sizes=(16, 16), activation="silu",
              eval_episodes=4)
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(ppo, jax.random.key(0))
    params = state.params["params"]
    assert "log_std" not in params and params["actor_head"]["kernel"].shape == (16, 2)
    np.testing.assert_array_equal(params["actor_head"]["bias"], 0.0)  # lecun_uniform, zero bias
    # actions: tanh of the pre-tanh sample, scaled from [-1, 1] to Pendulum's [-2, 2]
    act = ppo.policy(state)
    obs = jax.random.normal(jax.random.key(1), (256, 3)) * 5.0
    sampled = np.asarray(act(obs, jax.random.key(2)))
    assert sampled.shape == (256, 1) and np.abs(sampled).max() <= 2.0
    assert np.abs(sampled).max() > 1.0                                 # the whole range is used
    dist, _ = ppo.network.apply(state.params, obs)
    np.testing.assert_allclose(np.asarray(act(obs)), 2.0 * np.tanh(np.asarray(dist.loc)), rtol=1e-5)

    train = strategy.compile_train(ppo, state, jax.random.key(3))
    state, metrics = train.fn(state, jax.random.key(3), jnp.int32(0), jnp.int32(2))
    metrics = to_host(metrics)
    assert all(np.isfinite(v) for v in metrics.values())
    assert -10.0 < metrics["loss/entropy"] < 10.0      # with the log-Jacobian: may be negative


def test_an_unknown_policy_lists_the_choices():
    with pytest.raises(ValueError, match=r"PPOConfig.policy='beta': choose one of 'gaussian', "
                                         r"'brax'"):
        PPOConfig(policy="beta")
