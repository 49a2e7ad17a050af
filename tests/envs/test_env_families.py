"""Optional environment families by name (navix, XLand-MiniGrid, Jumanji): the Env contract,
their errors, the import boundary, and PPO through the recipe under pmap on 4 devices."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import envs
from tests._support.commands import recipe_script

ROOT = pathlib.Path(__file__).parents[2]

FAMILIES = {  # name -> (flat observation size, number of actions)
    "navix/Navix-Empty-5x5-v0": (75, 7),
    "xminigrid/MiniGrid-Empty-5x5": (98, 6),
}
SNAKE = "jumanji/Snake-v1"  # float32[725] (grid, step count, action mask), 4 actions


def _rollout(env, num_envs, steps, seed=0):
    """Random actions for ``steps`` steps: ``(first obs, per-step obs, infos, done)`` as
    host arrays; one compiled program (the reset too: run op by op it dispatches for
    seconds), the checks read on the host (no program per check)."""

    def one(state, key):
        action = jax.random.randint(key, (num_envs,), 0, env.num_actions)
        obs, state, info = env.step_batch(key, state, action)
        return state, (obs, info)

    @jax.jit
    def run(reset_key, step_key):
        obs0, state = env.reset_batch(reset_key, num_envs)
        _, (obs, infos) = jax.lax.scan(one, state, jax.random.split(step_key, steps))
        return obs0, obs, infos, infos.done

    return jax.device_get(run(jax.random.key(seed), jax.random.key(seed + 1)))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_env_truncates_at_its_limit_resets_and_keeps_statistics(name):
    size, num_actions = FAMILIES[name]
    env = envs.make(name, max_steps=6)
    assert (env.name, env.observation_shape, env.observation_dtype) == (name, (size,), jnp.float32)
    assert env.discrete and env.num_actions == num_actions and env.max_episode_steps == 6
    obs0, obs, info, done = _rollout(env, num_envs=4, steps=13)
    assert obs.shape == (13, 4, size) and obs.dtype == jnp.float32
    assert not np.any(info.terminated & info.truncated)
    assert np.all(done[5]) and np.all(info.episode_length[5] == 6)
    assert np.all(info.truncated[5] | info.terminated[5])
    assert np.all(info.episode_length <= 6)
    # after an end the next step starts a fresh episode (length 1) from a reset observation
    ended = done[:-1]
    assert np.all(np.where(ended, info.episode_length[1:] == 1, True))
    assert np.allclose(obs[5], obs0)  # the Empty rooms start the same way each episode
    # the return of a completed episode is the sum of its rewards
    assert np.allclose(info.episode_return[5], info.reward[:6].sum(0))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_jumanji_snake_flattens_its_structured_observation_and_terminates():
    env = envs.make(SNAKE, time_limit=30)
    assert (env.observation_shape, env.num_actions, env.max_episode_steps) == ((725,), 4, 30)
    _, obs, info, done = _rollout(env, num_envs=4, steps=40)
    assert obs.shape == (40, 4, 725) and np.any(done)
    assert not np.any(info.terminated & info.truncated)
    assert np.all(info.episode_length <= 30)
    ended = done[:-1]
    assert np.all(np.where(ended, info.episode_length[1:] == 1, True))


@pytest.mark.timeout(60)
def test_flatten_false_keeps_the_simulators_grid():
    env = envs.make("xminigrid/MiniGrid-Empty-5x5", flatten=False)
    assert env.observation_shape == (7, 7, 2) and env.observation_dtype == jnp.uint8


@pytest.mark.parametrize("name,close", [
    ("navix/Navix-Empty-5x5", "navix/Navix-Empty-5x5-v0"),
    ("xminigrid/MiniGrid-Emptyy-5x5", "xminigrid/MiniGrid-Empty-5x5"),
    ("jumanji/Snake-v2", SNAKE),
])
def test_an_unknown_name_in_a_family_names_the_closest(name, close):
    with pytest.raises(ValueError, match=f"did you mean '{close}'"):
        envs.make(name)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


MISSING = {"navix": "navix/Navix-Empty-5x5-v0", "xminigrid": "xminigrid/MiniGrid-Empty-5x5",
           "gymnasium": "gymnasium/CartPole-v1", "jumanji": SNAKE}
"""Each family's package, and a name of the family to make without it."""


@pytest.fixture(scope="module")
def imports_in_a_fresh_interpreter():
    """One fresh interpreter for both import tests below: first what ``import jaxtrainer``,
    ``jaxtrainer.envs``, listing the names and making a gymnax env import of the families
    (three lines), then each family's package made unimportable in turn
    (``sys.modules[name] = None``) and one of its names made (a line each). Returns the two
    parts of its output."""
    families = ("{'navix', 'xminigrid', 'gymnasium', 'jumanji', 'craftax', 'envpool', 'kinetix', "
                "'mujoco_playground'}")
    imported = f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {families}))\n"
    done = _python(f"import sys, jaxtrainer\n{imported}import jaxtrainer.envs as E\n{imported}"
                   f"E.available(); E.make('CartPole-v1')\n{imported}"
                   "print('--')\n"
                   f"names = {MISSING!r}\n"
                   "for module, name in names.items():\n"
                   "    sys.modules[module] = None\n"
                   "    try:\n        E.make(name)\n"
                   "    except ImportError as err:\n        print(err)\n")
    assert done.returncode == 0, done.stderr
    first, _, then = done.stdout.partition("--\n")
    return first, then


@pytest.mark.timeout(120)
def test_import_jaxtrainer_imports_no_family(imports_in_a_fresh_interpreter):
    """Neither ``import jaxtrainer`` nor ``jaxtrainer.envs`` imports a family (gymnax,
    imported by ``jaxtrainer.envs``, imports gymnasium's spaces itself), nor do
    listing the names and making a gymnax env (MuJoCo Playground's names are kept
    in jaxtrainer: ``test_playground.py`` checks they match its registry)."""
    assert imports_in_a_fresh_interpreter[0].split() == ["[]", "['gymnasium']", "['gymnasium']"]


@pytest.mark.timeout(120)
def test_a_missing_family_is_one_line_naming_its_extra(imports_in_a_fresh_interpreter):
    """Each family's package made unimportable (``sys.modules[name] = None``) in a
    subprocess: making one of its names raises one line naming the extra (gymnasium
    made unimportable after gymnax imported it, as a user's ``jaxtrainer.envs`` has)."""
    assert imports_in_a_fresh_interpreter[1].strip().splitlines() == [
        f'{m}/... environments need {m}: pip install -e ".[{m}]" (in a checkout; '
        f'pip install "jaxtrainer[{m}]" otherwise)' for m in MISSING]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", [*sorted(FAMILIES), SNAKE])
def test_ppo_recipe_runs_the_family_under_pmap_on_four_devices(name, run_dir, capsys):
    """Two PPO updates of 4 envs x 8 steps by ``env.name`` (a one-layer network 8 wide),
    split over 4 devices."""
    result = recipe_script("ppo").main([
        f"env.name={name}", f"env.{'time_limit' if name == SNAKE else 'max_steps'}=10", "trainer.strategy=pmap", "trainer.devices=4",
        "trainer.max_steps=2", "algorithm.num_envs=4", "algorithm.num_steps=8",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "algorithm.eval_episodes=4",
        "algorithm.hidden_sizes=[8]",
        "trainer.enable_progress_bar=false", "trainer.compile_evaluation_ahead=false",
        "trainer.enable_checkpointing=false", "logger.tensorboard=false",
        f"trainer.default_root_dir={run_dir}",
    ])
    assert 0.0 <= result["eval/episode_return"] <= (10.0 if name == SNAKE else 1.0)
    assert 1.0 <= result["eval/episode_length"] <= 10.0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("eval/episode_return=")
