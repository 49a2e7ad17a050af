"""IPPO runs beyond one device and one agent: shard_map, a sweep of IPPO
members, and a recipe run evaluated by `jaxtrainer eval` and `load_policy`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.population import Sweep

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jaxmarl") is None,
                                reason="needs JaxMARL: pip install 'jaxtrainer[marl]'")

SPREAD = "jaxmarl/MPE_simple_spread_v3"
RECIPES = Path(__file__).parents[2] / "recipes"


def ippo(num_envs: int = 12) -> PPO:
    return PPO(PPOConfig(env=SPREAD, num_envs=num_envs, num_steps=8, num_minibatches=1,
                         update_epochs=1, hidden_sizes=(8,), eval_episodes=num_envs))


def quiet(root, **kw):
    return jt.Trainer(log_every_n_steps=1, default_root_dir=root, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      compile_evaluation_ahead=False, **kw)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ippo_under_shard_map_keeps_every_replica_equal(tmp_path):
    """4 devices of a shard_map mesh, 3 games a device (a game's agents stay on
    one device): the replicated parameters are bitwise equal on every device."""
    trainer = quiet(tmp_path, strategy="shard_map", devices=4, max_steps=2)
    trainer.fit(ippo(36))
    assert trainer.env_steps == 2 * 36 * 8
    for leaf in jax.tree.leaves(trainer.state.params):
        buffers = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(buffers) == 4
        for other in buffers[1:]:
            np.testing.assert_array_equal(buffers[0], other)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_sweep_of_ippo_members_trains_each_on_its_own_games(tmp_path):
    """Two seeds of IPPO as vmapped members on 2 devices: each member's
    parameters differ, and its returns are logged apart."""
    sweep = Sweep(ippo(), seeds=2, member_metrics=("train/episode_return",))
    trainer = quiet(tmp_path, strategy="pmap", devices=2, max_steps=4)
    trainer.fit(sweep)
    params = jax.device_get(trainer.state.members.params)
    leaf = jax.tree.leaves(params)[0]
    assert leaf.shape[0] == 2 and not np.array_equal(leaf[0], leaf[1])
    metrics = trainer.evaluate(sweep)
    assert all(np.isfinite(metrics[f"member/{i}/eval/episode_return"]) for i in range(2))
    assert metrics["member/0/eval/episode_length"] == 26.0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_recipe_ippo_run_evaluates_and_loads_as_a_policy(tmp_path, capsys):
    """`jaxtrainer fit ppo --config ippo.yaml` (tiny): `jaxtrainer eval RUN` prints
    what the run's last line printed; `load_policy` acts for every agent."""
    from jaxtrainer.commands import _cli as cli
    from jaxtrainer.recipes import config
    from jaxtrainer.recipes._modules import build_module

    recipe_run = config.load_run(RECIPES / "configs" / "ippo.yaml", [
        "trainer.max_steps=2", "algorithm.num_envs=6", "algorithm.num_steps=8",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "algorithm.eval_episodes=6",
        f"trainer.default_root_dir={tmp_path}", "trainer.devices=1",
        "trainer.enable_progress_bar=false"], defaults=RECIPES / "configs" / "ppo.yaml")
    cfg = recipe_run.config
    result = config.fit_and_report(config.make_trainer(cfg), build_module("ppo", cfg), recipe_run)
    capsys.readouterr()
    run = tmp_path / "version_0"
    assert cli.main(["eval", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "episodes: 6 completed of 6"
    assert float(lines[2].split("mean=")[1].split()[0]) == pytest.approx(
        result["eval/episode_return"], abs=1e-4)
    # episodes that are not whole games: one line naming --episodes, before compiling
    assert cli.main(["eval", str(run), "--episodes", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "jaxtrainer eval: error: PPO: --episodes 16 gives 16 env(s) a device, not a multiple of "
        "the 3 agents of a jaxmarl/MPE_simple_spread_v3 game (each env is one agent); use a "
        "multiple of 3")
    with pytest.raises(ValueError, match=r"eval_episodes=4 gives 4 env\(s\) a device, not a "
                                         r"multiple of the 3 agents"):
        build_module("ppo", config.load(RECIPES / "configs" / "ippo.yaml", [
            "algorithm.eval_episodes=4"], defaults=RECIPES / "configs" / "ppo.yaml")).validate(1)
    act = jt.load_policy(run)
    obs = np.zeros((6, 18), np.float32)  # 2 games x 3 agents
    actions = np.asarray(act(obs))
    assert actions.shape == (6,) and actions.dtype == np.int32 and (actions < 5).all()
