"""Recurrent cores (network.core): the update replays the rollout's sequences
exactly, memory learns what a memoryless policy cannot, replicas stay equal
under pmap, resume is exact with the carries in the checkpoint, and a loaded
policy steps with its carry in a plain Python loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment

import jaxtrainer as jt
from jaxtrainer import envs
from jaxtrainer.algorithms import A2C, DQN, IMPALA, PPO, SAC
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import SingleDeviceStrategy
from tests.envs.test_envs import FixedLength

GRU = {"core": "gru", "core_size": 16}


@struct.dataclass
class CueState(environment.EnvState):
    time: jax.Array
    cue: jax.Array


@struct.dataclass
class CueParams(environment.EnvParams):
    max_steps_in_episode: int = 10


class Cue(FixedLength):
    """A cue (+1 or -1) shown at an episode's first step only, then zeros; after
    ``length`` steps the episode ends with reward 1 if the last action names the
    cue (action 1 for +1, 0 for -1), else 0. A memoryless policy sees zeros at
    the last step and scores 0.5 on average; one that remembers scores 1."""

    def __init__(self, length: int = 3):
        super().__init__(length=length)

    @property
    def default_params(self):
        return CueParams()

    def reset_env(self, key, params):
        state = CueState(time=jnp.zeros((), jnp.int32),
                         cue=jax.random.bernoulli(key).astype(jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        state = state.replace(time=state.time + 1)
        last = state.time >= self.length
        reward = jnp.where(last & (action == state.cue), 1.0, 0.0)
        return self.get_obs(state), state, reward, last, {}

    def get_obs(self, state, params=None, key=None):
        signal = jnp.where(state.time == 0, 2.0 * state.cue - 1.0, 0.0)
        return jnp.asarray([signal], jnp.float32)


def cue_env() -> envs.Env:
    return envs.GymnaxEnv(Cue(), name="Cue")


def trainer(run_dir, **kwargs) -> jt.Trainer:
    kwargs.setdefault("callbacks", [jt.ModelCheckpoint(async_save=False)])
    return jt.Trainer(default_root_dir=run_dir, logger=False, enable_progress_bar=False,
                      **kwargs)


@pytest.mark.slow
def test_the_update_replays_the_rollouts_sequences_exactly():
    # Episodes end inside the rollout (CartPole without velocities, random
    # policy: about 20 steps), so carries are reset mid-sequence: the update's
    # pass over whole sequences from the stored carry must give the rollout's
    # own log-probabilities and values, else the first PPO ratio is not 1.
    ppo = PPO(env="CartPole-v1-NoVelocity", num_envs=4, num_steps=48, num_minibatches=2,
              network={"core": "lstm", "core_size": 8}, hidden_sizes=(8,))
    state = jax.jit(ppo.init_state)(jax.random.key(0))
    _, _, carry, start, traj = jax.jit(ppo.recurrent_rollout)(
        state.params, state.env_state, state.obs, state.carry, state.start, jax.random.key(1))
    assert bool(traj.start[0].all()) and int(traj.start[1:].sum()) >= 4
    np.testing.assert_array_equal(start, traj.info.done[-1])
    batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1),
                         {"obs": traj.obs, "start": traj.start, "action": traj.action})
    dist, value, seq = jax.jit(ppo.forward)(state.params, {**batch, "carry": state.carry})
    np.testing.assert_allclose(dist.log_prob(seq["action"]), traj.log_prob, atol=1e-5)
    np.testing.assert_allclose(value, traj.value, atol=1e-5)
    # the carry after the rollout is the last step's
    for after, last in zip(jax.tree.leaves(carry), jax.tree.leaves(traj.carry), strict=True):
        np.testing.assert_array_equal(after, last[-1])


@pytest.mark.slow
@pytest.mark.parametrize("core,expected", [("gru", 0.95), (None, 0.75)])
def test_memory_learns_the_cue_a_memoryless_policy_cannot(core, expected):
    ppo = PPO(env=cue_env(), num_envs=16, num_steps=12, num_minibatches=2, lr=3e-3,
              anneal_lr=False, hidden_sizes=(16,), eval_episodes=64,
              network={"core": core, "core_size": 16})
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(ppo, jax.random.key(0))
    train = strategy.compile_train(ppo, state, jax.random.key(1))
    state, _ = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(150))
    evaluate = strategy.compile_eval(ppo, state, jax.random.key(2))
    ret = to_host(evaluate.fn(state, jax.random.key(2)))["eval/episode_return"]
    if core:
        assert ret >= expected          # remembers the cue over two blank steps
    else:
        assert ret <= expected          # a coin flip at the last step (0.5 expected)


@pytest.mark.slow
def test_recurrent_ppo_on_4_devices_replicas_resume_and_load_policy(run_dir):
    def module():
        return PPO(env="CartPole-v1-NoVelocity", num_envs=8, num_steps=16, num_minibatches=2,
                   hidden_sizes=(16,), eval_episodes=8, network=GRU, anneal_lr=False)

    straight = trainer(run_dir / "straight", strategy="pmap", devices=4, max_steps=4)
    straight.fit(module())
    state = straight.state
    for leaf in jax.tree.leaves((state.params, state.opt_state)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
    carry = np.asarray(state.carry)
    assert carry.shape == (8, 16)
    assert len({row.tobytes() for row in carry}) == 8       # each env its own carry

    trainer(run_dir / "resumed", strategy="pmap", devices=4, max_steps=2).fit(module())
    resumed = trainer(run_dir / "resumed", strategy="pmap", devices=4, max_steps=4,
                      callbacks=[], enable_checkpointing=False)  # its final save is not read
    resumed.fit(module(), ckpt_path="last")
    for a, b in zip(jax.tree.leaves(jax.device_get(state)),
                    jax.tree.leaves(jax.device_get(resumed.state)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    act = jt.load_policy(straight.log_dir)
    assert isinstance(act, jt.RecurrentPolicy)
    assert act.initial_carry().shape == (16,) and act.initial_carry(3).shape == (3, 16)
    env = envs.make("CartPole-v1")                            # the full observation
    key = jax.random.key(5)
    obs, env_state = env.reset(key)
    memory, actions = act.initial_carry(), []
    for _ in range(10):
        action, memory = act(np.asarray(obs)[[0, 2]], memory)  # positions only
        assert action.shape == () and int(action) in (0, 1)
        actions.append(int(action))
        key, step_key = jax.random.split(key)
        obs, env_state, _ = env.step(step_key, env_state, action)
    assert np.abs(np.asarray(memory)).sum() > 0
    with pytest.raises(ValueError, match=r"carry of shape .*expected"):
        act(np.zeros(2), act.initial_carry(2))
    # a batch of one steps the same way
    batch_action, _ = act(np.zeros((1, 2)), act.initial_carry(1))
    single_action, _ = act(np.zeros(2), act.initial_carry())
    assert int(batch_action[0]) == int(single_action)


@pytest.mark.slow
def test_a2c_takes_an_lstm_core_and_evaluates_with_it():
    a2c = A2C(env="CartPole-v1-NoVelocity", num_envs=4, num_steps=8, hidden_sizes=(8,),
              eval_episodes=4, bootstrap_truncation=False, network={"core": "lstm", "core_size": 8})
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(a2c, jax.random.key(0))
    assert [c.shape for c in state.carry] == [(4, 8), (4, 8)]
    train = strategy.compile_train(a2c, state, jax.random.key(1))
    state, metrics = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(3))
    assert all(np.isfinite(v) for v in to_host(metrics).values())
    result = to_host(strategy.compile_eval(a2c, state, jax.random.key(2)).fn(state, jax.random.key(2)))
    assert 1 <= result["eval/episode_return"] <= 500


@pytest.mark.slow
def test_impala_learner_replays_the_behaviours_sequences():
    # policy_lag=0, one epoch of one minibatch: the learner's replay of the
    # rollout's sequences from their first carry gives the behaviour's own
    # log-probabilities, so every importance ratio is 1.
    impala = IMPALA(env="CartPole-v1-NoVelocity", num_envs=4, num_steps=32, num_minibatches=1,
                    update_epochs=1, policy_lag=0, hidden_sizes=(8,), eval_episodes=4, anneal_lr=False,
                    network={"core": "lstm", "core_size": 8})
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(impala, jax.random.key(0))
    train = strategy.compile_train(impala, state, jax.random.key(1))
    state, metrics = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(1))
    metrics = to_host(metrics)
    assert metrics["loss/rho"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["loss/approx_kl"] == pytest.approx(0.0, abs=1e-6)
    state, metrics = train.fn(state, jax.random.key(2), jnp.int32(1), jnp.int32(3))
    assert all(np.isfinite(v) for v in to_host(metrics).values())
    result = to_host(strategy.compile_eval(impala, state, jax.random.key(3)).fn(
        state, jax.random.key(3)))
    assert 1 <= result["eval/episode_return"] <= 500


@pytest.mark.slow
def test_a_sweep_keeps_a_carry_per_member_and_loads_a_members_recurrent_policy(run_dir):
    from jaxtrainer.population import Sweep

    ppo = PPO(env="CartPole-v1-NoVelocity", num_envs=2, num_steps=8, update_epochs=1,
              num_minibatches=1, eval_episodes=2, hidden_sizes=(8,), network=GRU)
    sweep = Sweep(ppo, seeds=2, hyperparams={"lr": [1e-3]})
    t = trainer(run_dir, strategy="single", max_steps=2)
    t.fit(sweep)
    carry = np.asarray(jax.device_get(t.state).members.carry)
    assert carry.shape == (2, 2, 16) and not np.array_equal(carry[0], carry[1])
    act = jt.load_policy(t.log_dir, module=sweep, member=1)
    assert isinstance(act, jt.RecurrentPolicy)
    action, memory = act(np.zeros((3, 2)), act.initial_carry(3))
    assert action.shape == (3,) and memory.shape == (3, 16)


@pytest.mark.parametrize("build,match", [
    (lambda: SAC(env="Pendulum-v1", network={"core": "gru"}), "SAC takes no recurrent core"),
    (lambda: DQN(network={"core": "gru"}), "DQN takes no recurrent core"),
    (lambda: PPO(network={"core": "rnn"}), r"network.core='rnn': choose one of 'gru', 'lstm'"),
    (lambda: PPO(network={"core": "gru", "core_size": 0}), "network.core_size=0"),
    (lambda: PPO(network=GRU, num_envs=6, num_minibatches=4),
     "num_envs=6 is not divisible by num_minibatches=4"),
    (lambda: PPO(network=GRU, num_envs=8, num_minibatches=4).validate(4),
     r"a minibatch's envs, num_envs/num_minibatches = 8/4 = 2, are not divisible by the 4 devices"),
])
def test_bad_core_settings_are_named(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_observation_masks_and_memory_tasks_by_name():
    full, masked = envs.make("CartPole-v1"), envs.make("CartPole-v1-NoVelocity")
    assert masked.observation_shape == (2,) and masked.num_actions == 2
    key = jax.random.key(3)
    obs_full, state_full = full.reset(key)
    obs, state = masked.reset(key)
    np.testing.assert_array_equal(obs, np.asarray(obs_full)[[0, 2]])
    for t in range(30):  # the same dynamics, final observations masked too
        step_key = jax.random.fold_in(key, t)
        obs_full, state_full, info_full = full.step(step_key, state_full, t % 2)
        obs, state, info = masked.step(step_key, state, t % 2)
        np.testing.assert_array_equal(obs, np.asarray(obs_full)[[0, 2]])
        np.testing.assert_array_equal(info.final_obs, np.asarray(info_full.final_obs)[[0, 2]])
        assert float(info.reward) == float(info_full.reward)
    pendulum = envs.make("Pendulum-v1", observation_mask=[2, 0])
    assert pendulum.observation_shape == (2,) and pendulum.name == "Pendulum-v1[2, 0]"
    assert "CartPole-v1-NoVelocity" in envs.available()
    assert envs.make("MemoryChain-bsuite").num_actions == 2           # bsuite's memory task
    with pytest.raises(ValueError, match=r"observation_mask=\[0, 4\]: expected distinct "
                                         r"positions in \[0, 4\) for CartPole-v1"):
        envs.make("CartPole-v1", observation_mask=[0, 4])
    with pytest.raises(ValueError, match="a mask keeps positions of flat observations"):
        envs.make("Breakout-MinAtar", observation_mask=[0])


@pytest.mark.slow
def test_a_video_of_a_recurrent_policy_on_a_masked_env_draws_the_base_env(tmp_path):
    from jaxtrainer.commands import _render as render
    from jaxtrainer.policy import policy_spec

    ppo = PPO(env="CartPole-v1-NoVelocity", num_envs=2, num_steps=8, num_minibatches=1,
              hidden_sizes=(8,), eval_episodes=2, network=GRU)
    state = jax.jit(ppo.init_state)(jax.random.key(0))
    spec = policy_spec(ppo)
    assert spec.initial_carry is not None and ppo.env.unwrapped.name == "CartPole-v1"
    path = tmp_path / "memory.gif"
    frames = render.write_video(ppo.env, spec.greedy, spec.params(state), jax.random.key(1), path,
                                initial_carry=spec.initial_carry)
    assert frames >= 8 and path.stat().st_size > 1000 and path.read_bytes()[:6] == b"GIF89a"
