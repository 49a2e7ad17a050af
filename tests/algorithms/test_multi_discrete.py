"""Multi-discrete action spaces (``Env.action_nvec``): the env contract, the factorised
categorical head, PPO/A2C/IMPALA learning the right action vector (under pmap on 4
devices too), Jumanji's Minesweeper by ``env.name``, Gymnasium's ``MultiDiscrete``,
saved policies acting with ``int32[n, len(nvec)]`` vectors, and the one-line refusal
of algorithms that cannot take them."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import envs
from jaxtrainer.algorithms.a2c import A2C, A2CConfig
from jaxtrainer.algorithms.distributions import Categorical, MultiCategorical, categorical
from jaxtrainer.algorithms.dqn import DQN
from jaxtrainer.algorithms.impala import IMPALA, IMPALAConfig
from jaxtrainer.algorithms.neuro_es import NeuroES
from jaxtrainer.algorithms.ppo import PPO, PPOConfig
from jaxtrainer.algorithms.sac import SAC
from jaxtrainer.commands._eval_cli import evaluate_run
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy
from tests._support.commands import recipe_script
from tests._support.multi_discrete_env import LENGTH, NVEC, TARGETS, CueVectorEnv, random_return

QUIET = dict(logger=False, enable_progress_bar=False, compile_evaluation_ahead=False)


@pytest.mark.timeout(30)
def test_the_env_spec_describes_int32_action_vectors():
    env = CueVectorEnv()
    assert env.multi_discrete and env.discrete and env.action_nvec == NVEC
    assert (env.num_actions, env.action_size, env.action_shape) == (7, 2, (2,))
    assert env.action_low is None and env.action_high is None
    assert repr(env) == ("CueVectorEnv('CueVector', obs=(2,), actions=MultiDiscrete([3, 4]), "
                         "max_episode_steps=4)")
    assert not envs.make("CartPole-v1").multi_discrete
    assert envs.make("CartPole-v1").action_space == "Discrete(2)"
    for bad in [(), (3, 0), ((2, 2),), (1.5, 2)]:
        with pytest.raises(ValueError, match=r"action_nvec=.*non-empty 1-d sequence of positive"):
            CueVectorEnv().set_multi_discrete(bad)


@pytest.mark.timeout(30)
def test_factorised_head_log_prob_and_entropy_are_sums_of_its_categoricals():
    # component 0: p = (1/4, 3/4); component 1: uniform over 3
    logits = jnp.array([[0.0, math.log(3.0), 0.0, 0.0, 0.0]])
    dist = categorical(logits, (2, 3))
    assert isinstance(dist, MultiCategorical) and isinstance(categorical(logits), Categorical)
    action = jnp.array([[1, 2]], jnp.int32)
    assert float(dist.log_prob(action)[0]) == pytest.approx(math.log(0.75) + math.log(1 / 3),
                                                            abs=1e-6)
    assert float(dist.log_prob(jnp.array([[0, 1]]))[0]) == pytest.approx(
        math.log(0.25) + math.log(1 / 3), abs=1e-6)
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert float(dist.entropy()[0]) == pytest.approx(h0 + math.log(3.0), abs=1e-6)
    parts = [Categorical(logits[:, :2]), Categorical(logits[:, 2:])]
    assert float(dist.log_prob(action)[0]) == pytest.approx(
        float(parts[0].log_prob(action[:, 0])[0] + parts[1].log_prob(action[:, 1])[0]), abs=1e-7)
    assert dist.mode().tolist() == [[1, 0]] and dist.mode().dtype == jnp.int32
    # each component samples its own categorical: frequencies of 20000 draws
    many = MultiCategorical(jnp.broadcast_to(logits, (20000, 5)), (2, 3))
    sample = many.sample(jax.random.key(0))
    assert sample.shape == (20000, 2) and sample.dtype == jnp.int32
    assert float(jnp.mean(sample[:, 0] == 1)) == pytest.approx(0.75, abs=0.015)
    assert float(jnp.mean(sample[:, 1] == 2)) == pytest.approx(1 / 3, abs=0.015)
    with pytest.raises(ValueError, match=r"nvec=\(2, 2\) needs a last axis of sum\(nvec\)=4"):
        categorical(logits, (2, 2))


def _greedy_accuracy(module, params):
    """The greedy action of each cue, as a list of int lists."""
    obs = jax.nn.one_hot(jnp.arange(2), 2)
    return module.greedy_policy()(params, obs, None).tolist()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_ppo_learns_the_right_action_vector():
    env = CueVectorEnv()
    ppo = PPO(PPOConfig(num_envs=8, num_steps=16, update_epochs=4, num_minibatches=2, lr=1e-2,
                        anneal_lr=False, hidden_sizes=(16,), ent_coef=0.0, eval_episodes=8),
              env=env)
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(ppo, jax.random.key(0))
    assert state.obs.shape == (8, 2)
    host = jax.device_get(state)  # the rollout alone, outside the strategy's program
    traj = jax.jit(lambda s: ppo.rollout(s.params, s.env_state, s.obs, jax.random.key(3))[2])(host)
    assert traj.action.shape == (16, 8, 2) and traj.action.dtype == jnp.int32
    assert bool(jnp.all((traj.action >= 0) & (traj.action < jnp.asarray(NVEC))))
    train = strategy.compile_train(ppo, state, jax.random.key(1))
    state, metrics = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(40))
    evaluate = strategy.compile_eval(ppo, state, jax.random.key(2))
    learned = to_host(evaluate.fn(state, jax.random.key(2)))["eval/episode_return"]
    assert random_return() == pytest.approx(LENGTH * 7 / 24)  # 1.17 of at most 4
    assert learned == LENGTH and learned > 3 * random_return()
    assert to_host(metrics)["train/episode_return"] > 2 * random_return()
    assert _greedy_accuracy(ppo, state.params) == [list(t) for t in TARGETS]


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("algorithm", ["a2c", "impala", "ppo_gru"])
def test_on_policy_algorithms_learn_it_under_pmap_on_4_devices(algorithm):
    sizes = dict(num_envs=8, num_steps=8, hidden_sizes=(16,), eval_episodes=8, lr=1e-2,
                 anneal_lr=False)
    module = {
        "a2c": lambda: A2C(A2CConfig(**sizes), env=CueVectorEnv()),
        "impala": lambda: IMPALA(IMPALAConfig(**sizes, num_minibatches=2), env=CueVectorEnv()),
        "ppo_gru": lambda: PPO(PPOConfig(**sizes, num_minibatches=1, ent_coef=0.0,
                                         network={"core": "gru", "core_size": 16}),
                               env=CueVectorEnv()),
    }[algorithm]()
    strategy = PmapStrategy(devices=4)
    module.validate(4)
    state = strategy.init_state(module, jax.random.key(0))
    train = strategy.compile_train(module, state, jax.random.key(1))
    state, _ = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(60))
    for leaf in jax.tree.leaves(state.params):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
    evaluate = strategy.compile_eval(module, state, jax.random.key(2))
    learned = to_host(evaluate.fn(state, jax.random.key(2)))["eval/episode_return"]
    assert learned >= LENGTH - 0.5 > 3 * random_return()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_saved_policy_acts_with_int32_vectors(run_dir):
    module = PPO(PPOConfig(num_envs=4, num_steps=8, num_minibatches=1, update_epochs=1,
                           hidden_sizes=(8,), eval_episodes=4), env=CueVectorEnv())
    trainer = jt.Trainer(strategy="single", max_steps=2, default_root_dir=run_dir, **QUIET)
    trainer.fit(module)
    act = jt.load_policy(Path(trainer.log_dir), module=module)
    obs = np.eye(2, dtype=np.float32)[[0, 1, 1]]
    batch = act(obs)
    assert batch.shape == (3, 2) and batch.dtype == jnp.int32
    one = act(obs[0])
    assert one.shape == (2,) and one.dtype == jnp.int32 and one.tolist() == batch[0].tolist()
    sampled = act(obs, jax.random.key(0))
    assert sampled.shape == (3, 2) and sampled.dtype == jnp.int32
    assert bool(jnp.all((sampled >= 0) & (sampled < jnp.asarray(NVEC))))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_minesweeper_by_name_trains_evaluates_and_loads(tmp_path, capsys):
    env = envs.make("jumanji/Minesweeper-v0")
    assert (env.action_nvec, env.action_shape, env.observation_shape) == ((10, 10), (2,), (202,))
    assert env.max_episode_steps == 90  # one square revealed a step, 10 of 100 are mines
    assert envs.make("jumanji/Minesweeper-v0", max_episode_steps=7).max_episode_steps == 7
    binpack = envs.make("jumanji/BinPack-v2")
    assert (binpack.action_nvec, binpack.max_episode_steps) == ((40, 20), 20)
    result = recipe_script("ppo").main([
        "env.name=jumanji/Minesweeper-v0", "trainer.max_steps=2", "algorithm.num_envs=4",
        "algorithm.num_steps=8", "algorithm.num_minibatches=1", "algorithm.update_epochs=1",
        "algorithm.hidden_sizes=[16]", "algorithm.eval_episodes=4",
        "trainer.enable_progress_bar=false", "trainer.compile_evaluation_ahead=false",
        "logger.tensorboard=false", "trainer.strategy=single",
        f"trainer.default_root_dir={tmp_path}",
    ])
    assert 0.0 <= result["eval/episode_return"] <= 90.0
    capsys.readouterr()
    run = tmp_path / "version_0"
    act = jt.load_policy(run)
    actions = act(np.zeros((5, 202), np.float32), jax.random.key(1))
    assert actions.shape == (5, 2) and actions.dtype == jnp.int32
    assert bool(jnp.all((actions >= 0) & (actions < 10)))
    evaluated = evaluate_run(run, episodes=4)  # what `jaxtrainer eval RUN` prints
    assert evaluated["completed"] == 4


@pytest.mark.timeout(30)
@pytest.mark.parametrize("algorithm,supported", [(DQN, "Discrete(n)"),
                                                 (SAC, "Box (continuous)")])
def test_off_policy_algorithms_refuse_in_one_line(algorithm, supported):
    with pytest.raises(ValueError) as error:
        algorithm(env=CueVectorEnv())
    assert str(error.value) == (
        f"{algorithm.name} supports {supported} actions only; CueVector has "
        "MultiDiscrete([3, 4]) (int32[2] actions): train it with PPO, A2C or IMPALA")


@pytest.mark.timeout(30)
def test_neuroevolution_acts_with_each_components_argmax():
    es = NeuroES(CueVectorEnv(), "Open_ES", hidden_sizes=(4,), eval_episodes=4, population_size=4)
    params = jax.jit(es.initial_mean)(jax.random.key(0))  # jitted: a program, not one an op
    actions = jax.jit(es.act)(params, jnp.eye(2))
    assert actions.shape == (2, 2) and actions.dtype == jnp.int32
    logits = jax.jit(es.network.apply)(params, jnp.eye(2))
    assert actions.tolist() == jnp.stack([jnp.argmax(logits[:, :3], -1),
                                          jnp.argmax(logits[:, 3:], -1)], -1).tolist()


class EchoEnv(gym.Env):
    """A Gymnasium env with a ``MultiDiscrete([3, 4], start=[1, 0])`` action space
    whose observation is the last action it received, as ``float32[2]``."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 4], start=[1, 0])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.asarray(action, np.float32), 1.0, False, False, {}


@pytest.mark.timeout(60)
def test_gymnasium_multi_discrete_actions_reach_the_host_with_their_start():
    if "jaxtrainer-tests/Echo-v0" not in gym.registry:
        gym.register("jaxtrainer-tests/Echo-v0", entry_point=EchoEnv, max_episode_steps=5)
    env = envs.make("gymnasium/jaxtrainer-tests/Echo-v0")
    assert (env.action_nvec, env.action_shape, env.max_episode_steps) == ((3, 4), (2,), 5)
    action = jnp.array([[0, 3], [2, 1]], jnp.int32)  # in [0, nvec): the host gets + start

    def run(key):
        _, state = env.reset_batch(key, 2)
        return env.step_batch(key, state, action)[0]

    obs = jax.jit(run)(jax.random.key(0))
    assert obs.tolist() == [[1.0, 3.0], [3.0, 1.0]]
