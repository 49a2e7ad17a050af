"""Host environments (``gymnasium/<id>``): the Env contract through host callbacks inside
compiled programs, reproducible seeding, PPO by env.name under pmap on 4 devices, the clear
error under a vmap of env batches, action-space offsets, and a resume in a new process."""

from __future__ import annotations

import dataclasses
import pickle

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import envs
from tests._support import toys
from tests._support.commands import recipe_script


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

    return jax.device_get(jax.jit(run)(key))  # the checks read host arrays (no program each)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_cartpole_follows_the_env_contract_and_reruns_reproduce():
    env = envs.make("gymnasium/CartPole-v1")
    assert (env.observation_shape, env.observation_dtype) == ((4,), jnp.float32)
    assert env.discrete and env.num_actions == 2 and env.max_episode_steps == 500
    obs, next_obs, info = _rollout(env, jax.random.key(0))
    done = np.asarray(info.done)
    assert int(done.sum()) > 0 and not np.any(info.terminated & info.truncated)
    # auto-reset: the reached observation is final_obs, the returned one starts an episode
    assert np.all(np.where(done[..., None], info.final_obs != next_obs, True))
    assert np.all(np.where(~done[..., None], info.final_obs == next_obs, True))
    assert np.all(np.abs(np.where(done[..., None], next_obs, 0.0)) <= 0.05)
    assert np.allclose(info.episode_return, info.episode_length.astype(np.float32))
    again = _rollout(env, jax.random.key(0))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves((obs, info)),
                                                    jax.tree.leaves(again[::2]), strict=True))
    other = _rollout(env, jax.random.key(1))[0]
    assert not np.array_equal(obs, other)


@pytest.mark.timeout(60)
def test_a_vmap_of_env_batches_fails_before_compiling_naming_the_strategies():
    env = envs.make("gymnasium/CartPole-v1")
    members = jax.random.split(jax.random.key(0), 2)
    with pytest.raises(ValueError, match="host environment.*single, pmap or shard_map"):
        jax.jit(jax.vmap(lambda k: env.reset_batch(k, 4))).lower(members)


def test_an_unknown_gymnasium_id_names_the_closest():
    with pytest.raises(ValueError, match="did you mean 'gymnasium/CartPole-v1'"):
        envs.make("gymnasium/CartPole-v2")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ppo_recipe_runs_gymnasium_under_pmap_on_four_devices(run_dir, capsys):
    """Two PPO updates of 4 envs x 8 steps by ``env.name`` (a one-layer network 8 wide),
    one host pool per device."""
    result = recipe_script("ppo").main([
        "env.name=gymnasium/CartPole-v1", "trainer.strategy=pmap", "trainer.devices=4",
        "trainer.max_steps=2", "algorithm.num_envs=4", "algorithm.num_steps=8",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "algorithm.eval_episodes=4",
        "algorithm.hidden_sizes=[8]",
        "trainer.enable_progress_bar=false", "trainer.compile_evaluation_ahead=false",
        "trainer.enable_checkpointing=false", "logger.tensorboard=false",
        f"trainer.default_root_dir={run_dir}",
    ])
    assert result["env_steps"] == 64
    assert 8.0 <= result["eval/episode_return"] <= 500.0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("eval/episode_return=")


class DiscreteEchoEnv(gym.Env):
    """A Gymnasium env with a ``Discrete(3, start=-1)`` action space whose
    observation is the last action it received, as ``float32[1]``."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.array([action], np.float32), 1.0, False, False, {}


@pytest.mark.timeout(60)
def test_a_discrete_space_with_a_start_receives_start_to_start_plus_n():
    if "jaxtrainer-tests/DiscreteEcho-v0" not in gym.registry:
        gym.register("jaxtrainer-tests/DiscreteEcho-v0", entry_point=DiscreteEchoEnv)
    env = envs.make("gymnasium/jaxtrainer-tests/DiscreteEcho-v0")
    assert (env.discrete, env.num_actions, env.action_shape) == (True, 3, ())

    def run(key):
        _, state = env.reset_batch(key, 3)
        return env.step_batch(key, state, jnp.arange(3, dtype=jnp.int32))[0]

    assert jax.jit(run)(jax.random.key(0)).tolist() == [[-1.0], [0.0], [1.0]]


def _host_dqn():
    from jaxtrainer.algorithms import DQN, DQNConfig

    return DQN(DQNConfig(env="gymnasium/CartPole-v1", num_envs=2, buffer_size=16, batch_size=4,
                         learning_starts=0, hidden_sizes=(4,), eval_episodes=2))


RESUME_IN_NEW_PROCESS = """
import pickle, sys
import jaxtrainer as jt
from tests._support import toys
from tests.envs.test_host_envs import _host_dqn

class Record(jt.Callback):
    def on_fit_start(self, trainer, module):
        self.start = (trainer.global_step, trainer.env_steps, toys.leaves(trainer.state))

record = Record()
trainer = toys.trainer(sys.argv[1], max_steps=3, callbacks=[record], logger=False,
                       enable_checkpointing=False)
trainer.fit(_host_dqn(), ckpt_path=sys.argv[2])
with open(sys.argv[3], "wb") as f:
    pickle.dump((record.start, trainer.global_step, trainer.env_steps), f)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_host_env_run_resumed_in_a_new_process_starts_fresh_envs_and_keeps_the_rest(tmp_path):
    """DQN on ``gymnasium/CartPole-v1``: 2 steps and a checkpoint here; a new
    process resumes it to step 3. It starts from the checkpoint's parameters,
    optimizer state, counters and replay buffer, with fresh envs."""
    first = toys.trainer(tmp_path, strategy="single", max_steps=2, logger=False, callbacks=[
        jt.ModelCheckpoint(every_n_steps=2, async_save=False)])
    first.fit(_host_dqn())
    want = toys.leaves(first.state)
    out = tmp_path / "resumed.pkl"
    code = RESUME_IN_NEW_PROCESS.replace("sys.argv[1]", repr(str(tmp_path / "b"))).replace(
        "sys.argv[2]", repr(f"{first.log_dir}/checkpoints/2")).replace("sys.argv[3]", repr(str(out)))
    toys.run_python(code, devices=1, timeout=150)
    with open(out, "rb") as f:
        (step, env_steps, got), final_step, final_env_steps = pickle.load(f)
    assert (step, env_steps, final_step, final_env_steps) == (2, 4, 3, 6)
    fields = [f.name for f in dataclasses.fields(want)]
    assert {"params", "opt_state", "updates", "buffer"} <= set(fields)
    for name in set(fields) - {"env_state", "obs"}:  # all but the envs continue exactly
        toys.assert_trees_equal(getattr(got, name), getattr(want, name))
    # the envs start anew: fresh episodes in pools of this process
    assert got.env_state.episode_length.tolist() == [0, 0]
    assert np.all(np.abs(got.obs) <= 0.05)  # CartPole's first observations
