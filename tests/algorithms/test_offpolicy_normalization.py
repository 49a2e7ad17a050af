"""Observation normalisation and reward scaling in SAC, TD3 and CEM-RL (as Brax's
SAC): the running statistics are exactly those of every observation collected,
equal on every device, kept in the state; the updates learn from the raw
replay normalised with them and from scaled rewards, the logged returns stay
raw, and the evaluated policy normalises too."""

from __future__ import annotations

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import envs
from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms.cem_rl import CEMRL, CEMRLConfig
from jaxtrainer.algorithms.exploration import action_scale_bias
from jaxtrainer.algorithms.replay import ReplayBuffer
from jaxtrainer.algorithms.sac import SAC, SACConfig
from jaxtrainer.algorithms.td3 import TD3, TD3Config
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import PmapStrategy
from tests._support import toys

MODULES = {"SAC": (SAC, SACConfig), "TD3": (TD3, TD3Config)}
EPISODE = 4                     # Pendulum cut to 4-step episodes: some complete in the run
TINY = dict(num_envs=4, train_frequency=4, buffer_size=32, batch_size=4, learning_starts=0,
            gradient_steps=1, hidden_sizes=(4,), eval_episodes=4)
STEPS = 2                       # training steps: 2 x 4 x 4 = 32 observations (the buffer)


def short_pendulum() -> envs.Env:
    _, params = gymnax.make("Pendulum-v1")
    return envs.make("Pendulum-v1", params=params.replace(max_steps_in_episode=EPISODE))


def assert_replicated(tree):
    for leaf in jax.tree.leaves(tree):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 2
        for shard in shards[1:]:
            np.testing.assert_array_equal(shard, shards[0])


def stats_match(stats, observations):
    seen = np.asarray(observations, np.float64).reshape(-1, observations.shape[-1])
    assert float(stats.count) == len(seen)
    np.testing.assert_allclose(np.asarray(stats.mean), seen.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(stats.var), seen.var(0), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODULES))
def test_statistics_replicas_raw_returns_normalised_policy_and_scaled_learning(name):
    cls, config = MODULES[name]
    module = cls(config(normalize_observations=True, reward_scaling=3.0, **TINY),
                 env=short_pendulum())
    strategy = PmapStrategy(devices=2)
    state = strategy.init_state(module, jax.random.key(0))
    train = strategy.compile_train(module, state, jax.random.key(1))
    state, metrics = train.fn(state, jax.random.key(1), 0, STEPS)
    metrics = to_host(metrics)

    # the state holds the statistics of the 32 (raw) observations in the buffer,
    # bitwise equal on both devices, as are the networks trained with them
    assert int(ReplayBuffer.size(state.buffer)) == STEPS * TINY["train_frequency"]
    buffer = jax.tree.map(np.asarray, state.buffer.experience)     # [envs, slots, ...]
    stats_match(state.obs_stats, buffer.obs)
    assert np.abs(buffer.obs).max() > 1.0        # raw: angular velocity, not clipped z-scores
    assert_replicated((state.obs_stats, state.actor_params, state.critic_params))
    assert module.hparams()["normalize_observations"] is True

    # reward_scaling=3 is for learning only: the logged return is the mean raw
    # reward sum of the 8 completed 4-step episodes the buffer holds
    returns = buffer.reward.reshape(TINY["num_envs"], -1, EPISODE).sum(-1)
    assert metrics["train/episode_return"] == pytest.approx(returns.mean(), rel=1e-5)
    assert metrics["train/episode_length"] == EPISODE
    assert np.isfinite(metrics["loss/critic"])

    # evaluation: the policy takes (actor, statistics) and acts on normalised observations
    actor, stats = module.policy_params(state)
    toys.assert_trees_equal(stats, state.obs_stats)
    obs = jnp.asarray(buffer.obs[:, -1])                            # [4, 3], raw
    z = np.clip((np.asarray(obs) - np.asarray(stats.mean))
                / np.sqrt(np.asarray(stats.var) + 1e-8), -10, 10)
    got = module.greedy_policy()((actor, stats), obs, jax.random.key(2))
    scale, bias = action_scale_bias(module.env)
    if name == "SAC":
        mean, _ = module.actor.apply(actor, jnp.asarray(z, jnp.float32))
        want = scale * jnp.tanh(mean) + bias
    else:
        want = module.act(actor, jnp.asarray(z, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(got),
                           np.asarray(module.greedy_policy()((actor, normalization.init((3,))),
                                                             obs, jax.random.key(2))))

    # learning: an update on the raw replay with the statistics equals the plain
    # update on a replay holding the normalised observations and the rewards times 3
    # (equal to float rounding: XLA fuses the normalisation differently in the two)
    carry, raw, stats = jax.tree.map(np.asarray, (module.carry_of(state), state.buffer,
                                                  state.obs_stats))
    plain = jax.jit(cls(config(**TINY), env=module.env).update)
    key = jax.random.key(3)
    learned = raw.experience.replace(obs=normalization.normalize(stats, raw.experience.obs),
                                     next_obs=normalization.normalize(stats,
                                                                      raw.experience.next_obs))
    got = jax.jit(module.update)(carry, key, raw, stats)
    want = plain(carry, key, raw.replace(experience=learned.replace(
        reward=learned.reward * np.float32(3.0))))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    unscaled = plain(carry, key, raw.replace(experience=learned))
    assert float(got[1]["critic"]) > 2.0 * float(unscaled[1]["critic"])   # 3x the rewards


@pytest.mark.slow
def test_cem_rl_keeps_and_uses_its_actors_statistics_on_2_devices():
    module = CEMRL(CEMRLConfig(
        population_size=4, rollout_steps=4, critic_steps=2, actor_steps=2,
        actor_hidden_sizes=(4,), critic_hidden_sizes=(4,), buffer_size=32, batch_size=4,
        learning_starts=0, eval_episodes=4, normalize_observations=True, reward_scaling=2.0))
    strategy = PmapStrategy(devices=2)
    state = strategy.init_state(module, jax.random.key(0))
    train = strategy.compile_train(module, state, jax.random.key(1))
    state, metrics = train.fn(state, jax.random.key(1), 0, 2)   # the 2nd generation learns
    assert np.isfinite(to_host(metrics)["loss/critic"])

    # kept: 2 generations x 4 members x 4 steps, every device's, bitwise equal replicas
    obs = np.asarray(state.buffer.experience.obs)                    # [4 members, 8 slots, 3]
    assert int(ReplayBuffer.size(state.buffer)) == 8
    stats_match(state.obs_stats, obs)
    assert_replicated((state.obs_stats, state.mean, state.critic_params))

    # used: evaluation acts with the CEM mean on normalised observations
    mean, stats = module.policy_params(state)
    toys.assert_trees_equal((mean, stats), (state.mean, state.obs_stats))
    raw = jnp.asarray(obs[:, -1])
    got = module.greedy_policy()((mean, stats), raw, jax.random.key(2))
    want = module.act_flat(mean, normalization.normalize(stats, raw))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert not np.allclose(np.asarray(got), np.asarray(module.act_flat(mean, raw)))


def test_bad_values_are_errors_naming_the_field():
    with pytest.raises(ValueError, match=r"SACConfig.reward_scaling=-1.0: expected a non-negative"):
        SACConfig(reward_scaling=-1.0)
    with pytest.raises(ValueError, match=r"TD3Config.normalize_observations='yes': expected True"):
        TD3Config(normalize_observations="yes")
    with pytest.raises(ValueError, match=r"CEMRLConfig.reward_scaling='x': expected a non-negative"):
        CEMRLConfig(reward_scaling="x")
