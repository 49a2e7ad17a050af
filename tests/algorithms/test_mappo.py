"""MAPPO: PPO with ``critic_input="global_state"`` on a multi-agent env seen
through AgentsAsEnvs. The critic reads each agent's game's global state and its
one-hot id, the actor the agent's own observation; it trains, and under pmap
its replicas stay bitwise equal."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import envs
from tests._support import toys
from tests.envs.test_multi_agent import SPREAD, Rows, _ippo

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jaxmarl") is None,
                                reason="needs JaxMARL: pip install 'jaxtrainer[marl]'")


def _game_states(obs: jax.Array, games: int) -> np.ndarray:
    """Each env's game's global state for MPE (every agent's observation,
    concatenated), from observations ``[games * 3, 18]``."""
    return np.repeat(np.asarray(obs).reshape(games, -1), 3, axis=0)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_the_critic_reads_each_games_global_state_and_the_agent_id():
    env = envs.make(SPREAD)
    ids = np.tile(np.eye(3, dtype=np.float32), (2, 1))
    obs, state = jax.jit(env.reset_batch, static_argnums=1)(jax.random.key(0), 6)
    inputs = jax.jit(env.critic_inputs)(state)
    assert env.critic_input_size == 57 and inputs.shape == (6, 57) and inputs.dtype == jnp.float32
    np.testing.assert_array_equal(inputs, np.concatenate([_game_states(obs, 2), ids], 1))
    _, _, info = jax.jit(env.step_batch)(jax.random.key(1), state, jnp.zeros(6, jnp.int32))
    np.testing.assert_array_equal(jax.jit(env.final_critic_inputs)(info),
                                  np.concatenate([_game_states(info.final_obs, 2), ids], 1))

    module = _ippo(SPREAD, num_envs=6, num_steps=4, critic_input="global_state")
    state = jax.jit(module.init_state)(jax.random.key(0))
    params = state.params["params"]
    assert params["critic_body"]["Dense_0"]["kernel"].shape == (57, 16)
    assert params["actor_body"]["Dense_0"]["kernel"].shape == (18, 16)
    _, _, traj = jax.jit(module.rollout)(state.params, state.env_state, state.obs,
                                         jax.random.key(2))
    assert traj.obs.shape == (4, 6, 18) and traj.critic_obs.shape == (4, 6, 57)
    np.testing.assert_array_equal(traj.critic_obs[0], jax.jit(env.critic_inputs)(state.env_state))
    np.testing.assert_array_equal(traj.critic_obs[1, :, :54], _game_states(traj.obs[1], 2))
    values = jax.jit(lambda p, x: module.network.apply(p, x, method=module.network.value))(
        state.params, traj.critic_obs)  # one program, not one an op
    np.testing.assert_allclose(traj.value, values, rtol=1e-6)


@pytest.mark.timeout(30)
def test_a_global_critic_needs_an_env_with_a_global_state_and_a_plain_network():
    from jaxtrainer.algorithms import PPO, PPOConfig

    with pytest.raises(ValueError, match="'CartPole-v1' .* has none: use critic_input='observation'"):
        PPO(PPOConfig(critic_input="global_state"))
    with pytest.raises(ValueError, match="critic_input='global': choose one of 'observation', "
                                         "'global_state'"):
        PPOConfig(critic_input="global")
    with pytest.raises(ValueError, match="network.core='gru'"):
        PPOConfig(critic_input="global_state", network={"core": "gru"})
    with pytest.raises(ValueError, match="normalize_observations=True"):
        PPOConfig(critic_input="global_state", normalize_observations=True)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_mappo_trains_on_simple_spread(run_dir):
    """Truncations bootstrapped (the default): every episode is cut at 26 steps,
    so the critic also values the final global states."""
    rows = Rows()
    trainer = toys.trainer(run_dir, strategy="single", max_steps=4, log_every_n_steps=2,
                           callbacks=[rows])
    module = _ippo(SPREAD, critic_input="global_state")
    trainer.fit(module)
    assert trainer.global_step == 4 and len(rows.rows) == 2
    for row in rows.rows:
        assert np.isfinite(row["train/episode_return"]) and row["train/episode_return"] < 0
        assert all(np.isfinite(row[f"loss/{name}"]) for name in ("total", "value", "policy"))


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_mappo_under_pmap_keeps_replicas_bitwise_equal(run_dir):
    """4 fake devices, one 3-agent game each, terminal-only GAE (the critic
    values the global states after the rollout)."""
    module = _ippo(SPREAD, num_envs=12, num_steps=8, num_minibatches=1, update_epochs=1,
                   hidden_sizes=(8,), eval_episodes=12, critic_input="global_state",
                   bootstrap_truncation=False)
    trainer = jt.Trainer(strategy="pmap", devices=4, max_steps=2, log_every_n_steps=1,
                         default_root_dir=run_dir, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, compile_evaluation_ahead=False)
    trainer.fit(module)
    assert trainer.global_step == 2
    for leaf in jax.tree.leaves(trainer.state.params):
        buffers = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(buffers) == 4 and np.isfinite(buffers[0]).all()
        for other in buffers[1:]:
            np.testing.assert_array_equal(buffers[0], other)
