"""Host environments (``gymnasium/<id>``): the Env contract through host callbacks inside
compiled programs, reproducible seeding, PPO by env.name under pmap on 4 devices, and the clear error under a vmap of env batches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxtrainer import envs
from tests.commands import recipe_script


def _rollout(env, key, num_envs=4, steps=60):
    def run(key):
        obs, state = env.reset_batch(key, num_envs)

        def one(carry, k):
            state, obs = carry
            action = jax.random.randint(k, (num_envs,), 0, env.num_actions)
            next_obs, state, info = jax.vmap(env.step)(jax.random.split(k, num_envs), state,
                                                       action)
            return (state, next_obs), (obs, next_obs, info)

        return jax.lax.scan(one, (state, obs), jax.random.split(key, steps))[1]

    return jax.jit(run)(key)


@pytest.mark.timeout(60)
def test_cartpole_follows_the_env_contract_and_reruns_reproduce():
    env = envs.make("gymnasium/CartPole-v1")
    assert (env.observation_shape, env.observation_dtype) == ((4,), jnp.float32)
    assert env.discrete and env.num_actions == 2 and env.max_episode_steps == 500
    obs, next_obs, info = _rollout(env, jax.random.key(0))
    done = info.done
    assert int(done.sum()) > 0 and not bool(jnp.any(info.terminated & info.truncated))
    # auto-reset: the reached observation is final_obs, the returned one starts an episode
    assert bool(jnp.all(jnp.where(done[..., None], info.final_obs != next_obs, True)))
    assert bool(jnp.all(jnp.where(~done[..., None], info.final_obs == next_obs, True)))
    assert bool(jnp.all(jnp.abs(jnp.where(done[..., None], next_obs, 0.0)) <= 0.05))
    assert bool(jnp.allclose(info.episode_return, info.episode_length.astype(jnp.float32)))
    again = _rollout(env, jax.random.key(0))
    assert all(bool(jnp.array_equal(a, b)) for a, b in zip(jax.tree.leaves((obs, info)),
                                                             jax.tree.leaves(again[::2]), strict=True))
    other = _rollout(env, jax.random.key(1))[0]
    assert not bool(jnp.array_equal(obs, other))


@pytest.mark.timeout(60)
def test_a_vmap_of_env_batches_fails_before_compiling_naming_the_strategies():
    env = envs.make("gymnasium/CartPole-v1")
    members = jax.random.split(jax.random.key(0), 2)
    with pytest.raises(ValueError, match="host environment.*single, pmap or shard_map"):
        jax.jit(jax.vmap(lambda k: env.reset_batch(k, 4))).lower(members)


def test_an_unknown_gymnasium_id_names_the_closest():
    with pytest.raises(ValueError, match="did you mean 'gymnasium/CartPole-v1'"):
        envs.make("gymnasium/CartPole-v2")


@pytest.mark.timeout(240)
def test_ppo_recipe_runs_gymnasium_under_pmap_on_four_devices(run_dir, capsys):
    """Two PPO updates of 4 envs x 8 steps by ``env.name``, one host pool per device."""
    result = recipe_script("ppo").main([
        "env.name=gymnasium/CartPole-v1", "trainer.strategy=pmap", "trainer.devices=4",
        "trainer.max_steps=2", "algorithm.num_envs=4", "algorithm.num_steps=8",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "algorithm.eval_episodes=4",
        "trainer.enable_progress_bar=false", "trainer.compile_evaluation_ahead=false",
        "trainer.enable_checkpointing=false", "logger.tensorboard=false",
        f"trainer.default_root_dir={run_dir}",
    ])
    assert result["env_steps"] == 64
    assert 8.0 <= result["eval/episode_return"] <= 500.0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("eval/episode_return=")
