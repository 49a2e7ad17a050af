"""Multi-agent environments (JaxMARL) and IPPO: the contract, the JaxMARL adapter,
the agents-as-envs view PPO trains on, and IPPO on 4 devices."""

from __future__ import annotations

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import envs
from tests._support import toys

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jaxmarl") is None,
                                reason="needs JaxMARL: pip install 'jaxtrainer[marl]'")

SPREAD = "jaxmarl/MPE_simple_spread_v3"


@pytest.fixture(scope="module")
def spread():
    return envs.make_multi_agent(SPREAD)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_contract_shapes_dtypes_and_global_state(spread):
    assert spread.agents == ("agent_0", "agent_1", "agent_2") and spread.num_agents == 3
    assert spread.observation_shape == (18,) and spread.discrete and spread.num_actions == 5
    assert spread.max_episode_steps == 26 and spread.state_size == 54
    assert spread.teams == {"agent": (0, 1, 2)}
    obs, state = jax.jit(spread.reset)(jax.random.key(0))
    assert obs.shape == (3, 18) and obs.dtype == jnp.float32
    assert state.episode_return.shape == (3,) and state.episode_length.dtype == jnp.int32
    obs, state, info = jax.jit(spread.step)(jax.random.key(1), state, jnp.zeros(3, jnp.int32))
    assert obs.shape == (3, 18) and info.reward.shape == (3,) and info.reward.dtype == jnp.float32
    assert info.terminated.shape == info.truncated.shape == (3,)
    assert info.terminated.dtype == jnp.bool_ and info.final_obs.shape == (3, 18)
    assert info.final_state.shape == (54,) and info.episode_length.shape == ()
    np.testing.assert_array_equal(spread.global_state(state), obs.reshape(-1))
    assert spread.observation_mask.all() and spread.action_mask.shape == (3, 5)


@pytest.mark.timeout(60)
def test_heterogeneous_agents_are_padded_with_masks():
    env = envs.make_multi_agent("jaxmarl/MPE_simple_speaker_listener_v4")
    assert env.observation_sizes == (3, 11) and env.observation_shape == (11,)
    assert env.action_counts == (3, 5) and env.num_actions == 5
    np.testing.assert_array_equal(env.observation_mask.sum(1), [3, 11])
    np.testing.assert_array_equal(env.action_mask.sum(1), [3, 5])
    obs, _ = env.reset(jax.random.key(0))
    assert obs.shape == (2, 11) and not np.asarray(obs[0, 3:]).any()
    with pytest.raises(ValueError, match=r"speaker_0: float32\[3\], listener_0: float32\[11\]"):
        envs.make_multi_agent("jaxmarl/MPE_simple_speaker_listener_v4", flatten=False)


@pytest.mark.timeout(60)
def test_unknown_names_list_the_choices():
    with pytest.raises(ValueError, match="did you mean 'jaxmarl/MPE_simple_spread_v3'"):
        envs.make("jaxmarl/MPE_simple_spred_v3")
    with pytest.raises(ValueError, match="jaxmarl/overcooked"):
        envs.make_multi_agent("jaxmarl/nothing_like_it_at_all_xyz")
    with pytest.raises(ValueError, match="start with one of 'jaxmarl/'"):
        envs.make_multi_agent("CartPole-v1")


@pytest.mark.timeout(60)
def test_auto_reset_truncates_every_agent_at_the_time_limit(spread):
    step = jax.jit(spread.step)
    obs, state = spread.reset(jax.random.key(0))
    total = np.zeros(3, np.float32)
    for t in range(26):
        obs, state, info = step(jax.random.key(t + 1), state, jnp.full(3, t % 5, jnp.int32))
        total += np.asarray(info.reward)
        assert bool(info.episode_done) == (t == 25)
    assert np.asarray(info.truncated).all() and not np.asarray(info.terminated).any()
    assert int(info.episode_length) == 26
    np.testing.assert_allclose(info.episode_return, total, rtol=1e-5)
    assert int(state.episode_length) == 0 and not np.asarray(state.episode_return).any()
    assert not np.array_equal(obs, info.final_obs)  # the next episode's first observations


@pytest.mark.default_emitters
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_agents_as_envs_steps_equal_the_raw_jaxmarl_steps():
    """Game g of an AgentsAsEnvs batch is JaxMARL's env stepped (with its own
    auto-reset) with the key of the game's first agent, across an episode end."""
    import jaxmarl

    games, n = 2, 3
    env, raw = envs.make(SPREAD), jaxmarl.make("MPE_simple_spread_v3")
    assert isinstance(env, envs.AgentsAsEnvs) and env.observation_shape == (18,)
    game_keys = lambda key: jax.random.split(key, games * n)[::n]  # noqa: E731
    key = jax.random.key(7)
    obs, state = jax.jit(env.reset_batch, static_argnums=1)(key, games * n)  # not op by op
    raw_obs, raw_state = jax.jit(jax.vmap(raw.reset))(jax.random.key_data(game_keys(key)))
    step, raw_step = jax.jit(env.step_batch), jax.jit(jax.vmap(raw.step))
    for t in range(30):
        np.testing.assert_array_equal(
            obs.reshape(games, n, -1), np.stack([raw_obs[a] for a in raw.agents], 1))
        actions = jax.random.randint(jax.random.key(100 + t), (games * n,), 0, 5)
        key = jax.random.key(200 + t)
        obs, state, info = step(key, state, actions)
        per_game = actions.reshape(games, n)
        raw_obs, raw_state, reward, done, _ = raw_step(
            jax.random.key_data(game_keys(key)), raw_state,
            {a: per_game[:, i] for i, a in enumerate(raw.agents)})
        np.testing.assert_array_equal(info.reward.reshape(games, n),
                                      np.stack([reward[a] for a in raw.agents], 1))
        np.testing.assert_array_equal(info.done.reshape(games, n),
                                      np.stack([done[a] for a in raw.agents], 1))
    assert int(info.episode_length[0]) == 4  # a second episode started at step 27
    with pytest.raises(ValueError, match="not a multiple of its 3 agents"):
        env.reset_batch(key, 4)


class Rows(jt.Callback):
    """Every log interval's metrics."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_train_steps_end(self, trainer, module, metrics):
        self.rows.append(dict(metrics))


def _ippo(env_name: str, **overrides):
    from jaxtrainer.algorithms import PPO, PPOConfig
    sizes = dict(num_envs=12, num_steps=26, num_minibatches=2, update_epochs=2,
                 hidden_sizes=(16,), eval_episodes=6, lr=3e-3)
    return PPO(PPOConfig(env=env_name, **{**sizes, **overrides}))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ppo_trains_ippo_on_simple_spread(run_dir):
    """num_envs counts agents: 12 envs are 4 games of 3 agents; the logged
    returns are the agents' (each game's team return, averaged over games)."""
    rows = Rows()
    trainer = toys.trainer(run_dir, strategy="single", max_steps=8, log_every_n_steps=4,
                           callbacks=[rows])
    module = _ippo(SPREAD)
    trainer.fit(module)
    assert trainer.global_step == 8 and trainer.env_steps == 8 * 12 * 26
    returns = [row["train/episode_return"] for row in rows.rows]
    assert len(returns) == 2 and all(np.isfinite(returns)) and all(r < 0 for r in returns)
    metrics = trainer.evaluate(module)
    assert np.isfinite(metrics["eval/episode_return"])
    assert metrics["eval/episode_length"] == 26.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ippo_on_ant_4x2_under_pmap_keeps_replicas_equal_and_resumes_exactly(run_dir):
    """4 fake devices, one 4-agent game per device: replicated parameters are
    bitwise equal on every device, and 2 steps straight equal 1 step, a
    checkpoint, a resume and 1 step, bit for bit."""
    def module():
        from jaxtrainer.algorithms import PPO, PPOConfig
        return PPO(PPOConfig(env="jaxmarl/ant_4x2", num_envs=16, num_steps=4, num_minibatches=1,
                             update_epochs=1, hidden_sizes=(4,), eval_episodes=16),
                   env=envs.make("jaxmarl/ant_4x2", episode_length=8))

    def fit(callbacks, ckpt_path=None):
        save = any(isinstance(c, jt.ModelCheckpoint) for c in callbacks)
        trainer = jt.Trainer(strategy="pmap", devices=4, max_steps=2, log_every_n_steps=1,
                             default_root_dir=run_dir, callbacks=callbacks, logger=False,
                             enable_checkpointing=save, enable_progress_bar=False,
                             compile_evaluation_ahead=False)
        trainer.fit(module(), ckpt_path=ckpt_path)
        return trainer

    straight = fit([jt.ModelCheckpoint(every_n_steps=1, save_last=False, async_save=False)])
    for leaf in jax.tree.leaves(straight.state.params):
        buffers = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(buffers) == 4
        for other in buffers[1:]:
            np.testing.assert_array_equal(buffers[0], other)
    resumed = fit([], os.path.join(straight.log_dir, "checkpoints", "1"))
    assert resumed.global_step == 2
    toys.assert_trees_equal(resumed.state, toys.leaves(straight.state))


@pytest.mark.timeout(60)
def test_the_shipped_ippo_config_is_ppo_on_simple_spread(capsys):
    """ippo.yaml merges over ppo.yaml: JaxMARL's IPPO MPE settings, sizes in agents."""
    from jaxtrainer.commands import fit

    with pytest.raises(SystemExit):
        fit.run(["--config=ippo.yaml", "--print-config"], recipe="ppo")
    printed = capsys.readouterr().out
    assert "name: jaxmarl/MPE_simple_spread_v3" in printed
    assert "num_envs: 48" in printed and "eval_episodes: 48" in printed
