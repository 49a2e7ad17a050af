"""An asymmetric actor-critic (MuJoCo Playground's ``policy_obs_key`` /
``value_obs_key``): an env with dict observations gives PPO's actor one entry
and its critic another, each normalised with statistics of its own; the policy
(evaluation, export) sees its entry only. Domain randomisation: each env steps
its own model, drawn from its key, in every episode."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxtrainer.algorithms import A2C, DDPG, IMPALA, PPO, SAC, TD3, CrossQ
from jaxtrainer.envs import BraxEnv
from jaxtrainer.envs.brax_env import MODEL_DRAW


@struct.dataclass
class PointState:
    obs: Any
    reward: jax.Array
    done: jax.Array
    pos: jax.Array


class Point:
    """brax's API: a point in the plane moved by the action, reward ``-|pos|^2``;
    the policy sees ``{"state": pos}``, the critic ``{"privileged_state":
    [pos, pos^2, 1]}``."""

    action_size = 2

    def _state(self, pos, reward):
        obs = {"state": pos,
               "privileged_state": jnp.concatenate([pos, pos ** 2, jnp.ones(1, jnp.float32)])}
        return PointState(obs, reward, jnp.zeros(()), pos)

    def reset(self, rng):
        return self._state(jax.random.uniform(rng, (2,), minval=-1.0, maxval=1.0), jnp.zeros(()))

    def step(self, state, action):
        pos = state.pos + 0.1 * action
        return self._state(pos, -jnp.sum(pos ** 2))


def _env(**kwargs) -> BraxEnv:
    return BraxEnv(Point(), episode_length=3, name="point", observation_key="state", **kwargs)


def test_the_env_gives_the_critic_its_entry_and_the_final_one_before_a_reset():
    env = _env(value_obs_key="privileged_state")
    assert env.observation_shape == (2,) and env.critic_observation_shape == (5,)
    assert _env().critic_observation_shape is None
    assert _env(value_obs_key="state").critic_observation_shape is None  # the same entry
    obs, state = env.reset_batch(jax.random.key(0), 2)
    np.testing.assert_array_equal(env.critic_observation(state)[:, :2], obs)
    step = jax.jit(env.step_batch)
    for i in range(3):  # the third step reaches the time limit: truncated, reset
        before = obs
        obs, state, info = step(jax.random.key(i + 1), state, jnp.ones((2, 2)))
    assert bool(info.truncated.all())
    np.testing.assert_allclose(info.final_obs, before + 0.1, rtol=1e-6)
    np.testing.assert_allclose(info.final_critic_obs[:, :2], info.final_obs, rtol=1e-6)
    np.testing.assert_allclose(info.final_critic_obs[:, 2:4], info.final_obs ** 2, rtol=1e-6)
    np.testing.assert_array_equal(env.critic_observation(state)[:, :2], obs)  # the new episode
    with pytest.raises(KeyError, match=r"value_obs_key='pixels'.*'privileged_state', 'state'"):
        _env(value_obs_key="pixels")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ppo_actor_and_critic_see_their_entries_each_normalised_on_its_own():
    env = _env(value_obs_key="privileged_state")
    module = PPO(env=env, num_envs=4, num_steps=8, num_minibatches=2, update_epochs=1,
                 hidden_sizes=(8,), normalize_observations=True, anneal_lr=False)
    state = jax.jit(module.init_state)(jax.random.key(0))
    params = state.params["params"]
    assert params["actor_body"]["Dense_0"]["kernel"].shape == (2, 8)   # "state"
    assert params["critic_body"]["Dense_0"]["kernel"].shape == (5, 8)  # "privileged_state"
    state, metrics = jax.jit(module.training_step)(state, jax.random.key(1))
    stats, critic_stats = state.obs_stats, state.critic_obs_stats
    assert float(stats.count) == float(critic_stats.count) == 32.0
    assert stats.mean.shape == (2,) and critic_stats.mean.shape == (5,)
    # the critic's entry holds the policy's, its squares and a constant 1
    np.testing.assert_allclose(critic_stats.mean[:2], stats.mean, rtol=1e-5)
    np.testing.assert_allclose(critic_stats.var[:2], stats.var, rtol=1e-5)
    assert float(critic_stats.mean[4]) == 1.0 and float(critic_stats.var[4]) == 0.0
    assert np.isfinite(float(metrics["loss/value"]))
    # the policy (evaluation, export) takes the policy's entry and its statistics only
    policy_params = module.policy_params(state)
    assert policy_params[1].mean.shape == (2,)
    actions = jax.jit(module.greedy_policy())(policy_params, jnp.zeros((3, 2)), jax.random.key(2))
    assert actions.shape == (3, 2)
    evaluation = jax.jit(module.evaluation_step)(state, jax.random.key(3))
    length = evaluation["eval/episode_length"]
    assert float(length.total / length.count) == 3.0


def test_a_symmetric_env_keeps_one_set_of_statistics():
    module = PPO(env=_env(), num_envs=2, num_steps=4, num_minibatches=1, hidden_sizes=(8,),
                 normalize_observations=True)
    state = jax.jit(module.init_state)(jax.random.key(0))
    assert state.critic_obs_stats is None
    assert state.params["params"]["critic_body"]["Dense_0"]["kernel"].shape == (2, 8)


def test_what_cannot_train_an_asymmetric_env_says_so_before_compiling():
    env = _env(value_obs_key="privileged_state")
    assert A2C(env=env, num_envs=2, num_steps=4).asymmetric
    with pytest.raises(ValueError, match=r"IMPALA has no critic that reads another input"):
        IMPALA(env=env)
    with pytest.raises(ValueError, match=r"'point' \(BraxEnv\) has none: use critic_input='observation'"):
        PPO(env=env, critic_input="global_state")
    with pytest.raises(ValueError, match=r"needs a feedforward network .*network.core='gru'"):
        PPO(env=env, network={"core": "gru"})


@pytest.mark.parametrize("algorithm", [SAC, TD3, DDPG, CrossQ])
def test_off_policy_algorithms_refuse_a_critic_observation_they_would_ignore(algorithm):
    with pytest.raises(ValueError, match=(
            rf"^{algorithm.__name__} on point: the env gives the critic an observation of its own "
            r"\(value_obs_key, shape \(5,\)\), but .* drop env.value_obs_key")):
        algorithm(env=_env(value_obs_key="privileged_state"))
    assert algorithm(env=_env()).env.critic_observation_shape is None  # the same env without it


# ---- domain randomisation: one model per env, kept across its episodes ---------------------
@struct.dataclass
class GainState:
    obs: Any
    reward: jax.Array
    done: jax.Array


class Gain:
    """brax's API on a model ``sys = {"gain", "offset"}``: the reward is ``gain * action``."""

    action_size = 1

    def __init__(self):
        self.sys = {"gain": jnp.ones(()), "offset": jnp.zeros(())}

    @property
    def unwrapped(self):
        return self

    def reset(self, rng):
        return GainState(jnp.full((1,), self.sys["offset"]), jnp.zeros(()), jnp.zeros(()))

    def step(self, state, action):
        return GainState(state.obs + 1.0, self.sys["gain"] * action[0], jnp.zeros(()))


def _randomize(sys, rng):
    """A randomisation function of Playground's form: a gain per key, a shared offset."""
    gains = jax.vmap(lambda k: jax.random.uniform(k, minval=1.0, maxval=2.0))(rng)
    return {"gain": gains, "offset": sys["offset"]}, {"gain": 0, "offset": None}


@pytest.mark.parametrize("reset_mode", ["first_state", "exact"])
def test_each_env_steps_its_own_model_drawn_from_its_key_in_every_episode(reset_mode):
    env = BraxEnv(Gain(), episode_length=2, randomization=_randomize, reset_mode=reset_mode)
    keys = jax.random.split(jax.random.key(0), 3)
    _, state = jax.vmap(env.reset)(keys)
    rngs = jax.vmap(lambda k: jax.random.key_data(jax.random.fold_in(k, MODEL_DRAW)))(keys)
    gains = _randomize(Gain().sys, rngs)[0]["gain"]
    np.testing.assert_array_equal(state.env_state.model[0], gains)
    assert len(set(np.asarray(gains).tolist())) == 3
    step = jax.jit(jax.vmap(env.step))
    for i in range(5):  # episodes of 2 steps: two resets in between
        _, state, info = step(jax.random.split(jax.random.key(i + 1), 3), state, jnp.ones((3, 1)))
        np.testing.assert_allclose(info.reward, gains, rtol=1e-6)
    np.testing.assert_array_equal(state.env_state.model[0], gains)
    assert env.env.sys["gain"].shape == ()  # the env's own model is back after tracing
    with pytest.raises(TypeError, match=r"randomization=3: expected a function"):
        BraxEnv(Gain(), randomization=3)
