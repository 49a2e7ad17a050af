"""jaxtrainer.envs: make, auto-reset, terminated vs truncated, episode statistics,
fresh-episode evaluation."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxtrainer import envs
from jaxtrainer.metrics import Mean, to_host


@struct.dataclass
class CounterState(environment.EnvState):
    time: jax.Array


@struct.dataclass
class CounterParams(environment.EnvParams):
    max_steps_in_episode: int = 10


class FixedLength(environment.Environment):
    """Episodes of exactly ``length`` steps, reward 1 per step (or the action, with
    ``reward_is_action``); the observation is ``[time]``. The episode ends by the
    time limit (truncation) or, with ``terminate=True``, by a terminal state at
    ``terminate_at``."""

    def __init__(self, length: int = 10, terminate: bool = False, terminate_at: int | None = None,
                 reward_is_action: bool = False):
        super().__init__()
        self.length, self.terminate = length, terminate
        self.terminate_at = length if terminate_at is None else terminate_at
        self.reward_is_action = reward_is_action

    @property
    def default_params(self):
        return CounterParams(max_steps_in_episode=self.length)

    def step_env(self, key, state, action, params):
        state = CounterState(time=state.time + 1)
        terminated = jnp.logical_and(self.terminate, state.time >= self.terminate_at)
        reward = jnp.asarray(action, jnp.float32) if self.reward_is_action else 1.0
        return self.get_obs(state), state, jnp.asarray(reward, jnp.float32), terminated, {}

    def reset_env(self, key, params):
        state = CounterState(time=jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.asarray([state.time], jnp.float32)

    @property
    def num_actions(self):
        return 2

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1e6, (1,), jnp.float32)


def fixed_env(**kwargs) -> envs.GymnaxEnv:
    return envs.GymnaxEnv(FixedLength(**kwargs), name="FixedLength")


def rollout(env, num_envs: int, num_steps: int, action: int = 1, seed: int = 0):
    """``num_steps`` batched steps with a constant action; StepInfo stacked ``[T, n]``.
    The reset and the steps are one compiled program (a reset run op by op compiles a
    program per operation)."""

    @jax.jit
    def run(reset_key, step_key):
        obs, state = env.reset_batch(reset_key, num_envs)

        def body(state, key):
            _, state, info = env.step_batch(key, state, jnp.full((num_envs,), action, jnp.int32))
            return state, info
        return jax.lax.scan(body, state, jax.random.split(step_key, num_steps))

    return run(jax.random.key(seed), jax.random.key(seed + 1))[1]


# ---- make --------------------------------------------------------------------
def test_make_unknown_name_lists_gymnax_and_brax_names():
    with pytest.raises(ValueError) as err:
        envs.make("NoSuchEnv-v0")
    msg = str(err.value)
    assert "'NoSuchEnv-v0'" in msg and "`jaxtrainer envs` lists all" in msg
    with pytest.raises(ValueError, match=r"'brax/no_such_env'; closest: brax/\w+, brax/"):
        envs.make("brax/no_such_env")  # the closest among the names of its prefix
    assert "brax/ant" in envs.available() and "Breakout-MinAtar" in envs.available()
    with pytest.raises(ValueError) as err:
        envs.make("CartPole-v2")
    msg = str(err.value)  # one short line: the closest five, how to list all 97+ names
    assert msg.startswith("unknown environment 'CartPole-v2'; closest: CartPole-v1, ")
    assert msg.count(",") < 20 and len(msg) < 400
    assert f"`jaxtrainer envs` lists all {len(envs.available())} (and the families" in msg


def test_jaxtrainer_envs_lists_every_name_and_filters_by_prefix(capsys, monkeypatch):
    from jaxtrainer.commands import _cli as cli

    assert cli.main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == envs.available() and lines[-1].endswith("navix/<name>, xminigrid/<name>, "
                                                                  "gymnasium/<name>, jumanji/<name>, "
                                                                  "jaxmarl/<name>, craftax/<name>, "
                                                                  "envpool/<name>, kinetix/<name>")
    assert cli.main(["envs", "brax/"]) == 0
    printed = capsys.readouterr()
    out = printed.out.splitlines()
    assert "brax/ant" in out and all(n.startswith("brax/") for n in out)
    assert printed.err == ""  # brax is installed here
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "brax" else 0)
    assert cli.main(["envs", "brax/"]) == 0  # a new user without brax: the names, and what they need
    assert capsys.readouterr().err == ("jaxtrainer envs: the brax/<name> envs need brax, which is not "
                                       'installed: pip install "jaxtrainer[brax]"\n')
    assert cli.main(["envs", "nosuch"]) == 2
    assert capsys.readouterr().err == "jaxtrainer envs: no name starts with 'nosuch'\n"


def test_make_gymnax_does_not_import_brax():
    code = ("import sys, jaxtrainer.envs as E; E.make('CartPole-v1'); "
            "assert 'brax' not in sys.modules, 'brax imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_cartpole_spec_and_batch_shapes():
    env = envs.make("CartPole-v1")
    assert env.name == "CartPole-v1"
    assert env.discrete and env.num_actions == 2 and env.action_shape == ()
    assert env.observation_shape == (4,) and env.observation_size == 4
    assert env.max_episode_steps == 500
    obs, state = env.reset_batch(jax.random.key(0), 3)
    assert obs.shape == (3, 4) and state.episode_return.shape == (3,)
    obs, state, info = env.step_batch(jax.random.key(1), state, jnp.array([0, 1, 0]))
    assert obs.shape == (3, 4) and info.final_obs.shape == (3, 4)
    np.testing.assert_array_equal(info.reward, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(info.episode_length, [1, 1, 1])
    assert info.reward.dtype == jnp.float32 and info.terminated.dtype == jnp.bool_


def test_pendulum_is_continuous_with_bounds():
    env = envs.make("Pendulum-v1")
    assert not env.discrete and env.action_size == 1 and env.action_shape == (1,)
    np.testing.assert_array_equal(env.action_low, [-2.0])
    np.testing.assert_array_equal(env.action_high, [2.0])
    obs, state = env.reset(jax.random.key(0))
    obs, state, info = jax.jit(env.step)(jax.random.key(1), state, jnp.array([0.5]))
    assert obs.shape == (3,) and info.reward.shape == () and bool(jnp.isfinite(info.reward))


def test_make_passes_params_to_gymnax():
    import gymnax

    _, params = gymnax.make("CartPole-v1")
    env = envs.make("CartPole-v1", params=params.replace(max_steps_in_episode=3))
    assert env.max_episode_steps == 3
    info = rollout(env, num_envs=1, num_steps=3)
    # The pole cannot fall within 3 steps from a near-upright start: the time limit ends it.
    assert bool(info.truncated[-1, 0]) and not bool(info.terminated[-1, 0])


# ---- truncation is not termination ---------------------------------------------
def test_truncation_reports_final_obs_and_resets():
    env = fixed_env(length=10)
    info = rollout(env, num_envs=2, num_steps=12)
    done_steps = np.nonzero(np.asarray(info.done[:, 0]))[0]
    np.testing.assert_array_equal(done_steps, [9])            # the 10th step
    assert bool(info.truncated[9, 0]) and not bool(info.terminated[9, 0])
    # final_obs is the observation the episode reached (time 10), not the reset one.
    np.testing.assert_array_equal(info.final_obs[9, :, 0], [10.0, 10.0])
    np.testing.assert_array_equal(info.final_obs[:9, 0, 0], np.arange(1, 10))
    # and the next step continues from a fresh episode: time 1 again.
    np.testing.assert_array_equal(info.final_obs[10, :, 0], [1.0, 1.0])


def test_termination_is_not_truncation():
    env = envs.GymnaxEnv(FixedLength(length=100, terminate=True, terminate_at=4), name="T")
    info = rollout(env, num_envs=1, num_steps=8)
    np.testing.assert_array_equal(np.asarray(info.terminated[:, 0]),
                                  [0, 0, 0, 1, 0, 0, 0, 1])
    assert not bool(info.truncated.any())


def test_termination_at_the_time_limit_counts_as_termination():
    env = envs.GymnaxEnv(FixedLength(length=5, terminate=True, terminate_at=5), name="T")
    info = rollout(env, num_envs=1, num_steps=5)
    assert bool(info.terminated[4, 0]) and not bool(info.truncated[4, 0])


# ---- completed episodes only --------------------------------------------------------
@pytest.mark.parametrize("terminate", [False, True])
def test_episode_statistics_count_completed_episodes_only(terminate):
    env = fixed_env(length=10, terminate=terminate)

    def stats(num_steps):
        info = rollout(env, num_envs=4, num_steps=num_steps)
        return {"return": Mean.of(info.episode_return, mask=info.done),
                "length": Mean.of(info.episode_length, mask=info.done)}

    assert to_host(stats(5)) == {}                                 # nothing, not 0.0
    m = stats(25)
    assert float(m["return"].count) == 8.0                         # 4 envs x 2 episodes
    assert to_host(m) == {"return": 10.0, "length": 10.0}


# ---- evaluation on fresh episodes ---------------------------------------------------
def test_evaluate_policy_counts_first_completed_episode_per_env():
    env = envs.GymnaxEnv(FixedLength(length=10, reward_is_action=True), name="A")

    def always(action):
        return lambda params, obs, key: jnp.full((obs.shape[0],), action, jnp.int32)

    res = envs.evaluate_policy(env, always(1), None, jax.random.key(0), num_episodes=3,
                               max_steps=25)
    assert float(res["episode_return"].count) == 3.0               # one per env, not 2
    assert to_host(res) == {"episode_return": 10.0, "episode_length": 10.0}
    res = envs.evaluate_policy(env, always(0), None, jax.random.key(0), num_episodes=3)
    assert to_host(res) == {"episode_return": 0.0, "episode_length": 10.0}
    # An unfinished episode is not counted: nothing to report.
    res = envs.evaluate_policy(env, always(1), None, jax.random.key(0), num_episodes=3,
                               max_steps=9)
    assert to_host(res) == {}


def test_evaluate_policy_passes_params_and_is_jittable():
    env = envs.GymnaxEnv(FixedLength(length=4, reward_is_action=True), name="A")

    def policy(params, obs, key):
        return jnp.full((obs.shape[0],), params, jnp.int32)

    run = jax.jit(lambda p, k: envs.evaluate_policy(env, policy, p, k, num_episodes=2))
    assert to_host(run(jnp.int32(1), jax.random.key(3)))["episode_return"] == 4.0
    assert to_host(run(jnp.int32(0), jax.random.key(3)))["episode_return"] == 0.0


def test_an_evaluation_episode_depends_on_the_key_and_its_number_alone():
    """Episodes 2 and 3 of 4, run as a batch of their own (a second device's
    share), equal episodes 2 and 3 of the whole batch: start states, the
    policy's keys (a random policy here) and the env's keys come from
    episode_key(key, e)."""
    from jaxtrainer.envs.evaluation import run_episodes

    env = envs.make("CartPole-v1")

    def random_policy(params, obs, key):
        return jax.random.randint(key, (obs.shape[0],), 0, 2)

    run = jax.jit(lambda n, first: run_episodes(env, random_policy, None, jax.random.key(4), n,
                                                max_steps=60, first_episode=first),
                  static_argnums=0)
    whole, share = run(4, 0), run(2, 2)
    for field in ("returns", "lengths", "finished"):
        np.testing.assert_array_equal(np.asarray(getattr(whole, field))[2:],
                                      np.asarray(getattr(share, field)))
    assert whole.obs_moments is None and share.obs_moments is None  # not asked for
    assert len(set(np.asarray(whole.lengths).tolist())) > 1  # different episodes


# ---- brax -----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)  # brax compiles slowly on CPU (~30-50 s)
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("reset_mode", ["first_state", "exact"])
def test_brax_inverted_pendulum_smoke(reset_mode):
    env = envs.make("brax/inverted_pendulum", episode_length=3, reset_mode=reset_mode)
    assert not env.discrete and env.action_size == 1 and env.observation_shape == (4,)
    np.testing.assert_array_equal(env.action_low, [-1.0])
    # jitted: brax's reset run op by op takes ~10 s longer on 2 CPU cores
    obs, state = jax.jit(env.reset_batch, static_argnums=1)(jax.random.key(0), 2)
    assert (state.env_state.first is None) == (reset_mode == "exact")  # exact: layout as before

    @jax.jit
    def run(state):
        def body(state, key):
            next_obs, state, info = env.step_batch(key, state, jnp.zeros((2, 1)))
            return state, (next_obs, info)
        return jax.lax.scan(body, state, jax.random.split(jax.random.key(1), 5))[1]

    next_obs, info = run(state)
    # after the truncation at step 3 the next episode starts: from each slot's
    # first state (brax's training wrapper), or from a fresh random reset
    restarted = np.asarray(next_obs[2])
    assert not np.array_equal(np.asarray(obs[0]), np.asarray(obs[1]))  # slots start apart
    if reset_mode == "first_state":
        np.testing.assert_array_equal(restarted, np.asarray(obs))
    else:
        assert not np.allclose(restarted, np.asarray(obs))
    assert not np.array_equal(np.asarray(info.final_obs[2]), restarted)
    # Zero torque keeps the pole up for 3 steps: truncated by the time limit at step 3.
    np.testing.assert_array_equal(np.asarray(info.truncated[:, 0]), [0, 0, 1, 0, 0])
    assert not bool(info.terminated.any())
    np.testing.assert_array_equal(np.asarray(info.episode_length[:, 1]), [1, 2, 3, 1, 2])
    np.testing.assert_array_equal(np.asarray(info.episode_return[:, 1]), [1, 2, 3, 1, 2])
    assert info.final_obs.shape == (5, 2, 4) and bool(jnp.isfinite(info.final_obs).all())


def test_an_unknown_brax_reset_mode_lists_the_choices():
    with pytest.raises(ValueError, match=r"^reset_mode='once': choose one of 'first_state', "
                                         r"'exact'$"):
        envs.make("brax/inverted_pendulum", reset_mode="once")
