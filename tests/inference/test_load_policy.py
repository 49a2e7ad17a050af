"""``jaxtrainer.load_policy``: a saved run's policy, acting outside training."""

from __future__ import annotations

from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

import jaxtrainer as jt
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import build_module

RECIPES = Path(__file__).parents[2] / "recipes"
QUIET = dict(logger=False, enable_progress_bar=False, compile_evaluation_ahead=False)


@pytest.fixture(scope="module")
def pmap_run(tmp_path_factory):
    """4 PPO updates with normalised observations, saved under pmap on 2 devices."""
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", [
        "algorithm.num_steps=32", "algorithm.update_epochs=1", "algorithm.num_minibatches=2",
        "algorithm.hidden_sizes=[16]", "algorithm.normalize_observations=true"])
    module = build_module("ppo", cfg)
    trainer = jt.Trainer(strategy="pmap", devices=2, max_steps=4,
                         default_root_dir=tmp_path_factory.mktemp("runs"), **QUIET)
    trainer.fit(module)
    run = Path(trainer.log_dir)
    OmegaConf.save(OmegaConf.create({"recipe": "ppo", **OmegaConf.to_container(cfg)}),
                   run / "config.yaml")
    return run, module, trainer


def observations(n: int) -> jax.Array:
    """CartPole-like observations: float32[n, 4]."""
    return jax.random.uniform(jax.random.key(3), (n, 4), jnp.float32, -0.2, 0.2) * \
        jnp.array([10.0, 5.0, 1.0, 5.0])


@pytest.mark.slow
def test_policy_saved_under_pmap_acts_on_one_device_as_the_trained_module(pmap_run):
    run, module, trainer = pmap_run
    act = jt.load_policy(run)
    assert act.checkpoint == str(run / "checkpoints" / "4") and act.global_step == 4
    assert [d.platform for d in jax.tree.leaves(act.params)[0].devices()] == ["cpu"]
    params, stats = act.params  # normalize_observations: (params, obs_stats) from the checkpoint
    assert float(stats.count) > 0

    obs = observations(64)
    expected = jax.jit(lambda p, o: module.greedy_policy()(p, o, None))(
        module.policy_params(trainer.state), obs)
    batch = act(obs)
    assert batch.shape == (64,) and batch.dtype == jnp.int32
    np.testing.assert_array_equal(batch, expected)
    one = act(np.asarray(obs[5]))  # unbatched numpy in, an int32[] out
    assert one.shape == () and one.dtype == jnp.int32 and int(one) == int(expected[5])
    with pytest.raises(ValueError, match=r"observation of shape \(3,\): expected \(4,\)"):
        act(jnp.zeros(3))


def test_key_samples_the_stochastic_policy(pmap_run):
    run, _, _ = pmap_run
    act = jt.load_policy(run / "checkpoints", ckpt=4)
    assert act.stochastic
    obs = jnp.zeros(4)
    sampled = {int(act(obs, jax.random.key(i))) for i in range(32)}
    assert sampled == {0, 1}  # a barely trained policy is far from deterministic
    assert int(act(obs, jax.random.key(0))) == int(act(obs, jax.random.key(0)))
    assert act(observations(8), jax.random.key(1)).shape == (8,)


def test_acts_in_a_plain_python_loop_over_gymnax(pmap_run):
    run, _, _ = pmap_run
    act = jt.load_policy(run)
    env, params = gymnax.make("CartPole-v1")
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    key, returns = jax.random.key(0), []
    for _ in range(3):
        key, k = jax.random.split(key)
        obs, state = reset(k, params)
        total, done = 0.0, False
        while not done:
            key, k = jax.random.split(key)
            obs, state, reward, terminated, truncated, _ = step(k, state, act(obs), params)
            total, done = total + float(reward), bool(terminated) or bool(truncated)
        returns.append(total)
    assert all(1.0 <= r <= 500.0 for r in returns)  # CartPole: one per step, at most 500


def test_a_run_started_from_python_loads_with_its_module(pmap_run, tmp_path):
    run, module, trainer = pmap_run
    act = jt.load_policy(run / "checkpoints" / "4", module=module)  # config.yaml not read
    np.testing.assert_array_equal(act(observations(16)), jt.load_policy(run)(observations(16)))
    # greedy unless given a key: the repr said "stochastic=True", read as "samples"
    assert repr(act).endswith("step=4, greedy; samples given a key)"), repr(act)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint in .*: expected a run directory"):
        jt.load_policy(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_readme_quick_start_is_evaluated_and_loaded_from_its_run(tmp_path, monkeypatch, capsys):
    """The README's first code block as written (PPO(PPOConfig(...)), a config dataclass)
    records its module: ``load_policy`` and ``jaxtrainer eval`` need nothing else (they
    once said "no config.yaml" for it)."""
    from jaxtrainer.commands import _eval_cli as eval_cli

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "PPO(PPOConfig(env=\"CartPole-v1\"))" in code
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    run = namespace["trainer"].log_dir
    act = jt.load_policy(run)
    assert act.spec.env.name == "CartPole-v1"
    capsys.readouterr()
    assert eval_cli.main([run, "--episodes", "8"]) == 0
    assert float(capsys.readouterr().out.split("episode_return: mean=")[1].split()[0]) >= 475.0
