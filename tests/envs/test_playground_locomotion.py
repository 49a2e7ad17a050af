"""MuJoCo Playground's robotics settings on a locomotion task (Go1JoystickFlatTerrain):
the asymmetric critic (``env.policy_obs_key``/``env.value_obs_key``) and domain
randomisation (``env.randomization``), through ``ppo_playground.yaml``.

Go1's robot assets come from MuJoCo Menagerie, which Playground clones from GitHub;
these tests run offline on the accelerator benchmark's stand-in
(``benchmarks/accelerator/_go1_assets.py``: Playground's own Go1 XML with its five
visual meshes replaced by a small tetrahedron; the dynamics are the real robot's).
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys

import jax
import numpy as np
import pytest

from jaxtrainer import envs
from jaxtrainer.envs import brax_env
from jaxtrainer.recipes import _modules as modules
from jaxtrainer.recipes import config

ROOT = pathlib.Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accelerator"))

import _go1_assets  # noqa: E402

CONFIGS = ROOT / "recipes" / "configs"
GO1 = "Go1JoystickFlatTerrain"
RANDOMISED = ("geom_friction", "body_ipos", "body_mass", "qpos0", "dof_frictionloss",
              "dof_armature")
"""The model fields Playground's Go1 randomisation draws per env (go1/randomize.py)."""

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("mujoco_playground") is None,
                       reason="needs MuJoCo Playground: pip install 'jaxtrainer[playground]'"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:jaxopt"),
]


@pytest.fixture(scope="module")
def menagerie(tmp_path_factory):
    """Playground's ``MENAGERIE_PATH`` pointed at the stand-in Go1 assets."""
    from mujoco_playground._src import mjx_env

    root = _go1_assets.write(tmp_path_factory.mktemp("mujoco_menagerie"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mjx_env, "MENAGERIE_PATH", root)
        yield root


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_model_per_key_the_same_as_playgrounds_training_wrapper(menagerie):
    from mujoco_playground import registry
    from mujoco_playground._src import wrapper

    env = envs.make(f"playground/{GO1}", randomization=True, value_obs_key="privileged_state")
    assert env.observation_shape == (48,) and env.critic_observation_shape == (123,)
    keys = jax.random.split(jax.random.key(7), 3)
    ours = jax.vmap(env._draw_model)(keys)  # what reset_env(key) keeps in the env's state
    # Playground's wrapper, given the keys this env draws each model with
    rngs = jax.vmap(lambda k: jax.random.key_data(jax.random.fold_in(k, brax_env.MODEL_DRAW)))(keys)
    theirs = wrapper.wrap_for_brax_training(
        registry.load(GO1, config_overrides={"impl": "jax"}), episode_length=1000,
        randomization_fn=functools.partial(registry.get_domain_randomizer(GO1), rng=rngs))
    models = theirs._mjx_model_v  # (BraxDomainRandomizationVmapWrapper's, private: a test)
    for i in range(3):
        with env._env_model(jax.tree.map(lambda x, i=i: x[i], ours)):
            model = env.env.unwrapped.mjx_model
            for field in RANDOMISED:
                np.testing.assert_array_equal(getattr(model, field), getattr(models, field)[i],
                                              err_msg=field)
            np.testing.assert_array_equal(model.body_inertia, env._model().body_inertia)
    assert env.env.unwrapped.mjx_model is env._model()  # restored after stepping
    friction = np.asarray(models.geom_friction[:, 0, 0])  # the floor's: U(0.4, 1.0) per env
    assert len(set(friction.tolist())) == 3 and ((friction >= 0.4) & (friction <= 1.0)).all()
    with pytest.raises(ValueError, match=r"registry has no domain randomizer for CartpoleBalance"):
        envs.make("playground/CartpoleBalance", randomization=True)
    with pytest.raises(ValueError, match=r"randomization='yes': expected true"):
        envs.make(f"playground/{GO1}", randomization="yes")


@pytest.mark.slow
@pytest.mark.timeout(900)  # MJX compiles Go1's reset and step for minutes on 2 CPU cores
def test_go1_trains_with_ppo_playground_yaml_privileged_critic_and_randomised_models(menagerie):
    from jaxtrainer import Trainer

    cfg = config.load(CONFIGS / "ppo_playground.yaml", [
        f"env.name=playground/{GO1}", "env.value_obs_key=privileged_state",
        "env.randomization=true", "env.episode_length=4",
        "algorithm.num_envs=2", "algorithm.num_steps=4", "algorithm.unroll_length=4",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "algorithm.hidden_sizes=[8]",
        "algorithm.critic_hidden_sizes=[8]", "algorithm.eval_episodes=2",
    ], defaults=CONFIGS / "ppo.yaml")
    module = modules.build_module("ppo", cfg)
    trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, devices=1)
    trainer.fit(module)
    state = trainer.state
    params = state.params["params"]
    assert params["actor_body"]["Dense_0"]["kernel"].shape == (48, 8)    # "state"
    assert params["critic_body"]["Dense_0"]["kernel"].shape == (123, 8)  # "privileged_state"
    assert state.obs_stats.mean.shape == (48,) and state.critic_obs_stats.mean.shape == (123,)
    assert float(state.obs_stats.count) == float(state.critic_obs_stats.count) == 8.0
    # each env steps its own model, kept in its state (checkpointed with it)
    kept = state.env_state.env_state.model
    assert {leaf.shape[0] for leaf in kept} == {2}
    models = []
    for i in range(2):
        with module.env._env_model(jax.tree.map(lambda x, i=i: x[i], kept)):
            model = module.env.env.unwrapped.mjx_model
            models.append({field: np.asarray(getattr(model, field)) for field in RANDOMISED})
    for field in ("geom_friction", "body_mass"):
        assert not np.array_equal(models[0][field], models[1][field]), field
    assert np.isfinite(float(trainer.callback_metrics["loss/value"]))
