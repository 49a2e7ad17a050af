"""MuJoCo Playground environments (``make("playground/<name>")``) and the brax-API
adapter they share with brax (action repeat, dict observations, zero-size state).

The MJX tests compile MuJoCo's pipeline on CPU (tens of seconds per program on 2
cores), so they share one module-scoped env and run as few programs as possible.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from omegaconf import OmegaConf

from jaxtrainer import envs
from jaxtrainer.envs import brax_env, playground_env
from jaxtrainer.recipes import config

ROOT = pathlib.Path(__file__).parents[2]
CONFIGS = ROOT / "recipes" / "configs"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("mujoco_playground") is None,
                       reason="needs MuJoCo Playground: pip install 'jaxtrainer[playground]'"),
    # brax (which Playground imports) warns at import that jaxopt is unmaintained
    pytest.mark.filterwarnings("ignore::DeprecationWarning:jaxopt"),
]


@pytest.fixture(scope="module")
def cartpole():
    return envs.make("playground/CartpoleBalance", episode_length=3)


# ---- the adapter on a tiny env with brax's API (no MJX: fast) ------------------------
@struct.dataclass
class CountState:
    obs: Any
    reward: jax.Array
    done: jax.Array
    t: jax.Array
    act: jax.Array  # zero-size, as MJX Data's act for a model without activations


class Counter:
    """brax's API. Simulator step t (1, 2, ...) has reward t and observation
    ``{"state": [t], "privileged_state": [t, -t]}``; ``done`` at ``t == terminate_at``."""

    action_size = 1

    def __init__(self, terminate_at: int = 0):
        self.terminate_at = terminate_at

    def _state(self, t, reward, done):
        obs = {"state": jnp.asarray([t], jnp.float32),
               "privileged_state": jnp.asarray([t, -t], jnp.float32)}
        return CountState(obs, reward, done, t, jnp.zeros((0,), jnp.float32))

    def reset(self, rng):
        return self._state(jnp.zeros((), jnp.int32), jnp.zeros(()), jnp.zeros(()))

    def step(self, state, action):
        t = state.t + 1
        return self._state(t, t.astype(jnp.float32), (t == self.terminate_at).astype(jnp.float32))


def _steps(env, n: int):
    obs, state = env.reset(jax.random.key(0))
    rows = []
    for i in range(n):
        obs, state, info = env.step(jax.random.key(i + 1), state, jnp.zeros(1))
        rows.append((float(obs[0]), float(info.final_obs[0]), float(info.reward),
                     bool(info.terminated), bool(info.truncated), int(info.episode_length),
                     float(info.episode_return)))
    return rows, state


def test_action_repeat_sums_rewards_and_truncates_at_ceil_of_episode_length():
    env = brax_env.BraxEnv(Counter(), episode_length=5, name="counter", action_repeat=2,
                           observation_key="state")
    assert env.max_episode_steps == 3 and env.observation_shape == (1,)
    rows, state = _steps(env, 4)
    # obs, final_obs, reward (t-1)+t, terminated, truncated, episode length, return
    assert rows == [(2.0, 2.0, 3.0, False, False, 1, 3.0),
                    (4.0, 4.0, 7.0, False, False, 2, 10.0),
                    (0.0, 6.0, 11.0, False, True, 3, 21.0),  # 6 >= 5 simulator steps
                    (2.0, 2.0, 3.0, False, False, 1, 3.0)]
    # the zero-size array is held as its shape and dtype (orbax cannot save it)
    assert all(x.size for x in jax.tree.leaves(state))
    assert brax_env._unpack(state.env_state.state).act.shape == (0,)


def test_termination_inside_an_action_repeat_ends_the_step():
    env = brax_env.BraxEnv(Counter(terminate_at=3), episode_length=100, action_repeat=2,
                           observation_key="privileged_state")
    assert env.observation_shape == (2,)
    rows, _ = _steps(env, 3)
    assert [r[1:5] for r in rows] == [
        (2.0, 3.0, False, False),
        (3.0, 3.0, True, False),  # simulator steps 3 (done) and 4: the 4th is not counted
        (2.0, 3.0, False, False)]
    with pytest.raises(TypeError, match=r"dict observations .*'privileged_state', 'state'"):
        brax_env.BraxEnv(Counter())
    with pytest.raises(KeyError, match=r"observation_key='pixels'.*'privileged_state', 'state'"):
        brax_env.BraxEnv(Counter(), observation_key="pixels")
    with pytest.raises(ValueError, match=r"action_repeat=0: expected a positive int"):
        brax_env.BraxEnv(Counter(), action_repeat=0, observation_key="state")


# ---- names, lazy import, arguments, assets ---------------------------------------------
@pytest.mark.slow
def test_names_match_the_installed_registry():
    """(That listing them and making a gymnax env import no Playground:
    ``test_env_families.py::test_import_jaxtrainer_imports_no_family``.)"""
    from mujoco_playground._src import dm_control_suite

    assert playground_env.PLAYGROUND_ENV_NAMES == playground_env.registered_names()
    assert playground_env._PLAYGROUND_SUITE_NAMES == dm_control_suite.ALL_ENVS
    names = envs.available()
    assert {"playground/CartpoleBalance", "playground/Go1JoystickFlatTerrain",
            "brax/ant", "CartPole-v1"} <= set(names)
    with pytest.raises(ValueError, match=r"'playground/CartpoleBalanc'; closest: "
                       r"playground/CartpoleBalance, .*`jaxtrainer envs` lists all"):
        envs.make("playground/CartpoleBalanc")


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(episode_length=0), ValueError, r"episode_length=0: expected a positive int"),
    (dict(action_repeat=1.5), ValueError, r"action_repeat=1.5: expected a positive int"),
    (dict(config_overrides={"episode_lenght": 5}), ValueError,
     r"'episode_lenght' is not a config key of playground/CartpoleBalance; its keys: "
     r".*episode_length.*impl"),
    (dict(config_overrides={"impl": "cuda"}), ValueError,
     r"config_overrides\['impl'\]='cuda': choose one of 'jax', 'warp'"),
    (dict(config_overrides={"episode_length": "long"}), ValueError,
     r"playground/CartpoleBalance: config_overrides=.*'episode_length': 'long'"),
    (dict(config_overrides="impl=jax"), ValueError, r"expected a dict of env config entries"),
    (dict(episode_lenght=5), TypeError, r"episode_lenght"),
])
def test_bad_arguments_fail_before_loading(monkeypatch, kwargs, error, match):
    from mujoco_playground._src import registry

    monkeypatch.setattr(registry, "load", lambda *a, **k: pytest.fail("env loaded"))
    with pytest.raises(error, match=match):
        envs.make("playground/CartpoleBalance", **kwargs)


@pytest.mark.parametrize("name", ["Go1JoystickFlatTerrain", "PandaPickCube"])
def test_env_with_downloaded_assets_fails_clearly_before_any_download(monkeypatch, tmp_path, name):
    """Playground clones MuJoCo Menagerie with git on first use; make() says so instead
    (this machine has no network: the clone would hang or fail)."""
    from mujoco_playground._src import mjx_env

    absent = tmp_path / "mujoco_menagerie"
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", absent)

    def no_download(*args, **kwargs):
        pytest.fail(f"download attempted: {args}")

    monkeypatch.setattr(mjx_env, "ensure_menagerie_exists", no_download)
    monkeypatch.setattr(mjx_env, "_clone_with_progress", no_download)
    monkeypatch.setattr(mjx_env.subprocess, "Popen", no_download)
    monkeypatch.setattr(mjx_env.subprocess, "run", no_download)
    with pytest.raises(FileNotFoundError) as err:
        envs.make(f"playground/{name}")
    msg = str(err.value)
    assert msg.startswith(f"playground/{name}: MuJoCo Playground downloads this environment's "
                          "robot assets at run time")
    assert f"git clone https://github.com/google-deepmind/mujoco_menagerie.git {absent}" in msg
    assert mjx_env.MENAGERIE_COMMIT_SHA in msg and "playground/CartpoleBalance" in msg
    assert not absent.exists()


@pytest.mark.slow
def test_time_limit_and_action_repeat_default_to_the_env_config():
    default = envs.make("playground/CartpoleBalance")
    assert isinstance(default, envs.PlaygroundEnv) and isinstance(default, envs.BraxEnv)
    assert (default.max_episode_steps, default.action_repeat) == (1000, 1)
    assert default.env.mjx_model.impl.value == "jax"  # not Playground's own default, warp
    overridden = envs.make("playground/CartpoleBalance",
                           config_overrides={"episode_length": 50, "action_repeat": 2})
    assert (overridden.max_episode_steps, overridden.action_repeat) == (25, 2)
    # episode_length= wins over the config's; nested overrides are flattened
    explicit = envs.make("playground/CartpoleBalance", episode_length=7,
                         config_overrides={"vision_config": {"nworld": 2}})
    assert explicit.max_episode_steps == 7 and explicit.env._config.vision_config.nworld == 2


# ---- MJX: the real env ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)  # MJX compiles slowly on 2 CPU cores (~1 minute here)
def test_cartpole_shapes_truncation_final_obs_auto_reset_and_statistics(cartpole):
    env = cartpole
    assert env.name == "playground/CartpoleBalance"
    assert env.observation_shape == (5,) and env.observation_dtype == jnp.float32
    assert not env.discrete and env.action_size == 1 and env.max_episode_steps == 3
    np.testing.assert_array_equal(env.action_low, [-1.0])
    np.testing.assert_array_equal(env.action_high, [1.0])

    @jax.jit
    def run(key):
        obs0, state = env.reset_batch(key, 2)

        def body(state, key):
            obs, state, info = env.step_batch(key, state, jnp.zeros((2, 1)))
            return state, (obs, info)

        state, (obs, info) = jax.lax.scan(body, state, jax.random.split(key, 5))
        return obs0, obs, info, state

    obs0, obs, info, state = run(jax.random.key(0))
    assert obs0.shape == (2, 5) and obs0.dtype == jnp.float32
    assert obs.shape == info.final_obs.shape == (5, 2, 5)
    assert info.reward.dtype == jnp.float32 and info.episode_length.dtype == jnp.int32
    assert info.terminated.dtype == info.truncated.dtype == jnp.bool_
    # the time limit (3 steps) truncates; nothing terminates (CartpoleBalance ends on NaN only)
    np.testing.assert_array_equal(np.asarray(info.truncated), [[0, 0], [0, 0], [1, 1],
                                                               [0, 0], [0, 0]])
    assert not bool(info.terminated.any())
    np.testing.assert_array_equal(np.asarray(info.episode_length[:, 0]), [1, 2, 3, 1, 2])
    reward = np.asarray(info.reward)
    assert ((reward > 0.9) & (reward <= 1.0)).all()  # upright, centred, still: about 1 per step
    np.testing.assert_allclose(np.asarray(info.episode_return),
                               np.concatenate([np.cumsum(reward[:3], 0), np.cumsum(reward[3:], 0)]),
                               rtol=1e-6)
    final, obs = np.asarray(info.final_obs), np.asarray(obs)
    # not done: final_obs is obs; at the time limit obs is a new episode's first observation
    np.testing.assert_array_equal(final[[0, 1, 3, 4]], obs[[0, 1, 3, 4]])
    assert np.abs(final[2, :, 0] - final[1, :, 0]).max() < 0.01  # the cart moved on a little
    assert np.abs(obs[2, :, 0] - final[2, :, 0]).min() > 1e-4  # then a fresh random start
    assert np.all(np.abs(obs[2, :, 0]) <= 0.1) and np.all(obs[2, :, 1] > 0.999)  # balance reset
    assert not np.allclose(obs[:, 0], obs[:, 1])  # each env its own random start
    # MJX Data's zero-size arrays are kept out of the state's leaves (checkpointable)
    assert all(x.size for x in jax.tree.leaves(state))


# ---- the recipe: PPO with Playground's published settings -------------------------------
def test_ppo_playground_config_is_a_valid_config_file_of_the_ppo_recipe():
    merged = config.load(CONFIGS / "ppo_playground.yaml", [], defaults=CONFIGS / "ppo.yaml")
    raw = OmegaConf.merge(OmegaConf.load(CONFIGS / "ppo.yaml"),
                          OmegaConf.load(CONFIGS / "ppo_playground.yaml"))
    for section in raw:   # (load adds the recipes' own sections, e.g. sweep:)
        assert merged[section] == raw[section], section
    algo = merged.algorithm
    assert merged.env.name == "playground/CartpoleBalance" and merged.env.episode_length == 1000
    assert (algo.num_envs, algo.num_steps, algo.num_minibatches, algo.update_epochs) == (
        2048, 480, 32, 16)
    assert algo.normalize_observations is True and algo.reward_scaling == 10.0
    assert (algo.gamma, algo.lr, algo.ent_coef, algo.clip_eps) == (0.995, 1e-3, 0.01, 0.3)


def _recipe():
    spec = importlib.util.spec_from_file_location("ppo_recipe", ROOT / "recipes" / "ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(600)  # MJX compiles slowly on 2 CPU cores (2-3 minutes here)
def test_ppo_recipe_runs_on_playground_under_shard_map_on_two_devices(run_dir, capsys):
    """The recipe's tiny check (2 updates of 4 envs x 5 steps, 2 eval episodes) under
    a 2-device shard_map, checkpoints included; the time limit shortened to 10 steps
    so that evaluation is quick."""
    result = _recipe().main([
        "--config", str(CONFIGS / "ppo_playground.yaml"),
        "trainer.max_steps=2", "algorithm.num_envs=4", "algorithm.num_steps=5",
        "algorithm.unroll_length=5", "algorithm.num_minibatches=2", "algorithm.eval_episodes=2",
        "trainer.strategy=shard_map", "trainer.devices=2", "env.episode_length=10",
        "trainer.enable_progress_bar=false", "trainer.compile_evaluation_ahead=false",
        f"trainer.default_root_dir={run_dir}",
    ])
    run = run_dir / "version_0"
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"eval/episode_return={result['eval/episode_return']:.2f} run_dir={run}")
    assert 0.0 < result["eval/episode_return"] <= 10.0  # rewards lie in [0, 1]
    assert result["eval/episode_length"] == 10.0
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    train = [r for r in rows if r.get("loss/total")]
    assert [int(r["step"]) for r in train] == [1, 2] and int(train[-1]["env_steps"]) == 40
    for key in ("loss/total", "loss/value", "loss/policy", "loss/entropy"):
        assert all(math.isfinite(float(r[key])) for r in train), key
    assert (run / "checkpoints" / "2").is_dir()
