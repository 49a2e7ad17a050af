"""``make(name, max_episode_steps=5)`` bounds the episodes of every family, in training
steps and in evaluation alike: they end at 5 steps at the latest, truncated (bootstrapped)
where the env did not terminate them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import envs
from jaxtrainer.envs.evaluation import run_episodes

FAMILIES = [  # one cheap env of each family (kinetix: make raises, its jax pin)
    "CartPole-v1",  # gymnax
    "brax/fast",
    "playground/CartpoleBalance",
    "jumanji/Snake-v1",
    "navix/Navix-Empty-5x5-v0",
    "xminigrid/MiniGrid-Empty-5x5",
    # craftax: its own truncation test makes it with max_episode_steps=5
    "jaxmarl/MPE_simple_spread_v3",  # 3 agents a game, each an env
    "gymnasium/CartPole-v1",
    "envpool/CartPole-v1",
]
NUM_ENVS, STEPS, LIMIT = 6, 12, 5
SLOW_TO_COMPILE = ("playground/",)  # their evaluation loop: not compiled here


def _random_policy(env):
    def act(params, obs, key):
        n = jax.tree.leaves(obs)[0].shape[0]
        if env.discrete:
            return jax.random.randint(key, (n,), 0, env.num_actions)
        return jax.random.uniform(key, (n, env.action_size), minval=jnp.asarray(env.action_low),
                                  maxval=jnp.asarray(env.action_high))
    return act


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", FAMILIES)
def test_max_episode_steps_truncates_training_and_evaluation_episodes(name):
    if name.startswith("envpool/"):
        pytest.importorskip("envpool")
    env = envs.make(name, max_episode_steps=LIMIT)
    assert env.max_episode_steps == LIMIT
    act = _random_policy(env)
    evaluate = not name.startswith(SLOW_TO_COMPILE)

    def train(key):
        obs, state = env.reset_batch(key, NUM_ENVS)

        def one(carry, k):
            obs, state = carry
            obs, state, info = env.step_batch(k, state, act(None, obs, k))
            return (obs, state), info

        info = jax.lax.scan(one, (obs, state), jax.random.split(key, STEPS))[1]
        return info.episode_length, info.done, info.truncated, info.terminated

    def run(train_key, eval_key):
        """The training steps, then (in program order: a host env's calls keep it)
        evaluation episodes of the same env: one program, read on the host."""
        trained = train(train_key)
        if not evaluate:
            return trained, None
        episodes = run_episodes(env, act, None, eval_key, NUM_ENVS, max_steps=STEPS)
        return trained, (episodes.finished, episodes.lengths)

    trained, episodes = jax.device_get(jax.jit(run)(jax.random.key(0), jax.random.key(1)))
    length, done, truncated, terminated = trained
    assert int(length.max()) <= LIMIT
    at_limit = length == LIMIT
    assert np.all(done[at_limit])  # every episode ends at the limit
    assert np.all(truncated[at_limit] | terminated[at_limit])
    assert np.any(truncated) and not np.any(truncated & terminated)
    if evaluate:  # evaluation steps the same env: its fresh episodes end by the limit too
        finished, lengths = episodes
        assert np.all(finished) and int(lengths.max()) <= LIMIT


def test_a_bad_max_episode_steps_is_named_before_the_env_is_made():
    with pytest.raises(ValueError, match=r"max_episode_steps=0: expected a positive int"):
        envs.make("CartPole-v1", max_episode_steps=0)
