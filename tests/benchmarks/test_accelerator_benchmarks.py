"""The accelerator table's scripts (benchmarks/accelerator/) at tiny budgets on the CPU:
the env-only limit, our side of the seeds and PQN rows through the documented commands,
purejaxql's own PQN script where its checkout is at hand, both sides of the SAC,
Playground, OpenAI-ES, IPPO and EvoRL rows (JaxMARL's baseline and EvoRL where they are at hand),
the summary lines' and tables' arithmetic, and the offline install from a wheel folder."""

import base64
import gzip
import hashlib
import importlib.util
import inspect
import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accelerator"))

import _go1_assets  # noqa: E402
import _settings  # noqa: E402
import env_limit  # noqa: E402
import seeds  # noqa: E402
import trace_ops  # noqa: E402


def _row(name):
    """``benchmarks/accelerator/<name>.py`` as module ``accelerator_<name>`` ("pqn" alone
    could be another module)."""
    spec = importlib.util.spec_from_file_location(
        f"accelerator_{name}", ROOT / "benchmarks" / "accelerator" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pqn_row, sac_row = _row("pqn"), _row("sac")
PUREJAXQL = Path(os.environ.get("PUREJAXQL", ROOT / ".peers" / "purejaxql"))
"""A checkout of mttga/purejaxql (``PUREJAXQL``; its packages, ``requirements/purejaxql.txt``
installed into a folder, named by ``PUREJAXQL_PYTHONPATH``)."""


def test_the_env_limit_steps_every_env_of_the_batch_every_step():
    rate, reward = env_limit.limit("CartPole-v1", batch=8, length=20, repeats=1)
    assert reward == 8 * 20  # CartPole pays 1 a step, reset steps included
    assert 0 < rate < float("inf")


@pytest.mark.slow
def test_our_side_of_the_seeds_row_runs_the_documented_command_for_every_member():
    row = seeds.ours(2, 2048, str(ROOT / "src"), timeout=600)  # 4 updates of 512 env steps
    assert row["side"] == "ours" and row["n"] == 2
    assert row["env_steps_per_s"] > 0 and row["compile_s"] > 0
    assert len(row["returns"]) == 2 and all(0 < r <= 500 for r in row["returns"])


def test_the_summary_line_gives_the_ratio_and_both_fractions_of_the_limit():
    rows = {"ours": {"env_steps_per_s": 300.0, "returns": [490.0, 500.0]},
            "purejaxrl": {"env_steps_per_s": 200.0, "returns": [480.0, 500.0]},
            "env_only": {"env_steps_per_s": 1000.0}}
    line = seeds.summary(64, rows)
    assert line == ("N=64 ours=300 purejaxrl=200 ratio=1.500 limit=1,000 ours_fraction=0.300 "
                    "purejaxrl_fraction=0.200 return ours=495.0 purejaxrl=490.0+-10.0")


@pytest.mark.slow
def test_our_side_of_the_pqn_row_runs_the_documented_command_for_every_member():
    row = pqn_row.ours(2, "Breakout-MinAtar", 8192, 128, str(ROOT / "src"), timeout=600)
    assert row["side"] == "ours" and row["seeds"] == 2 and row["env_steps_per_seed"] == 8192
    assert row["env_steps_per_s"] > 0 and row["compile_s"] > 0
    assert len(row["returns"]) == 2 and all(r >= 0 for r in row["returns"])
    assert len(row["eval_returns"]) == 2  # each member's final greedy evaluation


@pytest.mark.slow
@pytest.mark.skipif(not (PUREJAXQL / "purejaxql" / "pqn_minatar.py").exists()
                    or not (os.environ.get("PUREJAXQL_PYTHONPATH") or importlib.util.find_spec("hydra")),
                    reason=f"no purejaxql checkout at {PUREJAXQL} (set PUREJAXQL) with its packages "
                           "(hydra-core; set PUREJAXQL_PYTHONPATH)")
def test_purejaxqls_own_pqn_script_runs_its_seeds_in_one_program():
    row = pqn_row.peer(2, "Breakout-MinAtar", 8192, str(PUREJAXQL),
                       os.environ.get("PUREJAXQL_PYTHONPATH"), timeout=600)
    assert row["side"] == "purejaxql" and row["env_steps_per_seed"] == 8192  # 2 updates
    assert row["env_steps_per_s"] > 0 and row["compile_s"] > 0
    assert len(row["returns"]) == 2 and all(r >= 0 for r in row["returns"])


def test_the_pqn_row_gives_the_ratio_both_fractions_and_the_markdown_row(tmp_path):
    rows = {"ours": {"side": "ours", "env": "Breakout-MinAtar", "seeds": 2, "env_steps_per_s": 300.0,
                     "returns": [60.0, 70.0], "eval_returns": [65.0, 75.0]},
            "purejaxql": {"side": "purejaxql", "env": "Breakout-MinAtar", "seeds": 2,
                          "env_steps_per_s": 200.0, "returns": [50.0, 70.0],
                          "env_steps_per_seed": 9998336},
            "env_only": {"side": "env_only", "env": "Breakout-MinAtar", "seeds": 2,
                         "env_steps_per_s": 1000.0}}
    assert pqn_row.summary(rows) == (
        "Breakout-MinAtar seeds=2 ours=300 purejaxql=200 ratio=1.500 limit=1,000 "
        "ours_fraction=0.300 purejaxql_fraction=0.200 return ours=65.00 ± 5.00 "
        "purejaxql=60.00 ± 10.00")
    runs = tmp_path / "pqn.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    assert pqn_row.table([str(runs)]).splitlines()[-1] == (
        "| Breakout-MinAtar | 2 | 9,998,336 | 300 | 200 | 1.50 | 1,000 | 0.300 | 0.200 | "
        "65.00 ± 5.00 | 60.00 ± 10.00 | 70.00 ± 5.00 |")


playground_row = _row("playground")

TINY_SAC = ("algorithm.num_envs=8", "algorithm.batch_size=32", "algorithm.gradient_steps=2",
            "algorithm.buffer_size=1024", "algorithm.learning_starts=64",
            "algorithm.eval_episodes=4", "env.episode_length=50")


@pytest.mark.slow
def test_both_sides_of_the_sac_row_run_at_a_tiny_budget():
    """Row 3's two programs on brax's ``fast`` env: ours through the documented command,
    Brax's own trainer through the driver; each reports what the table needs."""
    ours = sac_row.ours("fast", 256, 0, str(ROOT / "src"), timeout=600, overrides=TINY_SAC)
    assert ours["side"] == "ours" and ours["env_steps"] == 256
    assert ours["env_steps_per_s"] > 0 and ours["compile_s"] > 0
    assert -1e6 < ours["eval_return"] < 1e6
    brax = sac_row.brax("fast", 64 + 3 * 8 * 4, 0, 4, None, timeout=600, settings=(
        "num_envs=8", "batch_size=32", "grad_updates_per_step=2", "max_replay_size=1024",
        "min_replay_size=64", "episode_length=50"))
    assert brax["side"] == "brax" and brax["env_steps"] == 64 + 3 * 8 * 4
    assert brax["env_steps_per_s"] > 0 and brax["run_s"] > 0
    assert [s for s, _ in brax["curve"]] == [0, 64 + 8 * 4, 64 + 2 * 8 * 4, 64 + 3 * 8 * 4]


def test_the_sac_row_gives_the_ratio_both_fractions_and_the_markdown_row(tmp_path):
    rows = {"ours": {"side": "ours", "env": "hopper", "seed": 1, "env_steps": 139264,
                     "env_steps_per_s": 300.0, "eval_return": 700.0},
            "brax": {"side": "brax", "env": "hopper", "seed": 1, "env_steps": 139264,
                     "env_steps_per_s": 200.0, "eval_return": 1400.0},
            "env_only": {"side": "env_only", "env": "hopper", "env_steps_per_s": 1000.0}}
    assert sac_row.summary(rows) == (
        "hopper seed=1 ours=300 brax=200 ratio=1.500 limit=1,000 ours_fraction=0.300 "
        "brax_fraction=0.200 return ours=700.0 brax=1400.0")
    runs = tmp_path / "sac.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    assert sac_row.table([str(runs)]).splitlines()[-1] == (
        "| brax/hopper | 1 | 139,264 | 300 | 200 | 1.50 | 1,000 | 0.300 | 0.200 | 700.0 | 1400.0 |")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mujoco_playground") is None,
                    reason="MuJoCo Playground is not installed")
def test_both_sides_of_the_playground_row_run_at_a_tiny_budget():
    """Row 4's programs on Playground's CartpoleBalance (MJX's JAX implementation): ours
    through the documented command, Playground's training through the driver."""
    ours = playground_row.ours("CartpoleBalance", 128, 0, str(ROOT / "src"), timeout=600, overrides=(
        "algorithm.num_envs=8", "algorithm.num_steps=8", "algorithm.unroll_length=8",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=1", "algorithm.hidden_sizes=[16]",
        "algorithm.critic_hidden_sizes=[16]", "algorithm.eval_episodes=4", "env.episode_length=50"))
    assert ours["side"] == "ours" and ours["env"] == "CartpoleBalance" and ours["env_steps"] == 128
    assert ours["env_steps_per_s"] > 0 and 0 <= ours["eval_return"] <= 50
    peer = playground_row.playground("CartpoleBalance", 320, 0, 3, None, timeout=600, settings=(
        "num_envs=8", "batch_size=8", "num_minibatches=2", "unroll_length=5",
        "num_updates_per_batch=1", "episode_length=50", "num_eval_envs=8", "num_resets_per_eval=2"))
    assert peer["side"] == "playground" and peer["env_steps"] == 320
    assert [s for s, _ in peer["curve"]] == [0, 160, 320]
    # timed over the 160 env steps after the first evaluation's, each counted once (Brax's
    # training/sps counts them num_resets_per_eval times)
    assert peer["env_steps_per_s"] * peer["run_s"] == pytest.approx(160)


@pytest.mark.skipif(importlib.util.find_spec("mujoco_playground") is None,
                    reason="MuJoCo Playground is not installed")
def test_the_go1_rows_two_sides_take_playgrounds_published_locomotion_settings():
    """Row 4's Go1 variant: ours' resolved config (``ppo_playground.yaml`` with
    ``GO1``) against Playground's own locomotion config, setting by setting (both
    sides' training paths run at tiny sizes in the CartpoleBalance test above and in
    tests/envs/test_playground_locomotion.py's Go1 fit, which compiles MJX's Go1 for
    minutes)."""
    import _playground_ppo_original as original

    from jaxtrainer.recipes import config

    configs = ROOT / "src" / "jaxtrainer" / "recipes" / "configs"
    cfg = config.load(configs / "ppo_playground.yaml", list(playground_row.GO1),
                      defaults=configs / "ppo.yaml")
    env, alg = cfg["env"], cfg["algorithm"]
    pg = original.published("Go1JoystickFlatTerrain", "jax")
    net = pg["network_factory"]
    assert (env["value_obs_key"], env["policy_obs_key"]) == (net["value_obs_key"],
                                                              net["policy_obs_key"])
    assert list(alg["hidden_sizes"]) == list(net["policy_hidden_layer_sizes"])
    assert list(alg["critic_hidden_sizes"]) == list(net["value_hidden_layer_sizes"])
    assert env["randomization"] is True and env["episode_length"] == pg["episode_length"]
    assert (alg["num_envs"], alg["unroll_length"], alg["num_minibatches"],
            alg["update_epochs"]) == (pg["num_envs"], pg["unroll_length"],
                                      pg["num_minibatches"], pg["num_updates_per_batch"])
    # one update's env steps: Brax's batch_size x num_minibatches unrolls
    assert alg["num_envs"] * alg["num_steps"] == (pg["batch_size"] * pg["num_minibatches"]
                                                  * pg["unroll_length"])
    assert (alg["lr"], alg["gamma"], alg["ent_coef"], alg["reward_scaling"],
            alg["max_grad_norm"], alg["normalize_observations"]) == (
        pg["learning_rate"], pg["discounting"], pg["entropy_cost"], pg["reward_scaling"],
        pg["max_grad_norm"], pg["normalize_observations"])
    assert alg["clip_eps"] == inspect.signature(original.brax_ppo.train).parameters[
        "clipping_epsilon"].default  # the config sets none: Brax's default
    assert pg["num_timesteps"] == 200_000_000 and pg["num_resets_per_eval"] == 10


def test_the_go1_standin_goes_where_the_first_playground_on_the_path_looks(tmp_path):
    (tmp_path / "a").mkdir()
    package = tmp_path / "b" / "mujoco_playground"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assets = package / "external_deps" / "mujoco_menagerie" / "unitree_go1" / "assets"
    assets.mkdir(parents=True)
    (assets / "trunk.stl").write_bytes(b"a real clone's mesh")
    menagerie = _go1_assets.provide(f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    assert menagerie == package / "external_deps" / "mujoco_menagerie"
    assert sorted(p.name for p in assets.iterdir()) == [
        "calf.stl", "hip.stl", "thigh.stl", "thigh_mirror.stl", "trunk.stl"]
    assert (assets / "trunk.stl").read_bytes() == b"a real clone's mesh"  # left as it was
    stl = (assets / "hip.stl").read_bytes()
    assert len(stl) == 80 + 4 + 4 * 50 and stl[80:84] == (4).to_bytes(4, "little")


def test_the_playground_row_names_its_peer_and_the_limits_batch(tmp_path):
    runs = tmp_path / "playground.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in (
        {"side": "env_only", "env": "CartpoleBalance", "env_steps_per_s": 4e6},
        {"side": "ours", "env": "CartpoleBalance", "seed": 0, "env_steps": 983040,
         "env_steps_per_s": 2e6, "eval_return": 900.0},
        {"side": "playground", "env": "CartpoleBalance", "seed": 0, "env_steps": 983040,
         "env_steps_per_s": 1e6, "eval_return": 850.0})))
    header, _, row = playground_row.table([str(runs)], peer="playground", title="Playground",
                                          family="playground", envs=2048).splitlines()
    assert "| Playground | ratio | env-only limit (2048 envs) |" in header
    assert row == ("| playground/CartpoleBalance | 0 | 983,040 | 2,000,000 | 1,000,000 | 2.00 | "
                   "4,000,000 | 0.500 | 0.250 | 900.0 | 850.0 |")


def test_the_go1_rows_table_names_the_limits_batch_of_playgrounds_locomotion_config(
        tmp_path, monkeypatch, capsys):
    runs = tmp_path / "pg-go1.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in (
        {"side": "env_only", "env": "Go1JoystickFlatTerrain", "env_steps_per_s": 4e6},
        {"side": "ours", "env": "Go1JoystickFlatTerrain", "seed": 0, "env_steps": 200_048_640,
         "env_steps_per_s": 2e6, "eval_return": 30.0},
        {"side": "playground", "env": "Go1JoystickFlatTerrain", "seed": 0,
         "env_steps": 201_326_592, "env_steps_per_s": 1e6, "eval_return": 25.0})))
    monkeypatch.setattr(sys, "argv", ["playground.py", "--table", str(runs)])
    playground_row.main()
    header, _, row = capsys.readouterr().out.splitlines()
    assert "| Playground | ratio | env-only limit (8192 envs) |" in header
    assert row == ("| playground/Go1JoystickFlatTerrain | 0 | 201,326,592 | 2,000,000 | 1,000,000 | "
                   "2.00 | 4,000,000 | 0.500 | 0.250 | 30.0 | 25.0 |")


def test_the_env_limit_steps_a_brax_env_as_the_trainers_wrap_it():
    rate, reward = env_limit.limit("brax/fast", batch=4, length=10, repeats=1, episode_length=5)
    assert 0 < rate < float("inf")
    assert math.isfinite(reward) and reward != 0.0  # fast's reward is the moved position


def test_the_env_limit_steps_brax_envs_per_env_as_evosax_rolls_out_its_population():
    """``--structure per_env``: the same envs as a per-env scan vmapped over rollouts and
    members (evosax's ``BraxProblem``); a batch that the rollouts do not divide and a
    non-brax env are refused before anything compiles."""
    rate, reward = env_limit.limit("brax/fast", batch=4, length=10, repeats=1, episode_length=5,
                                   structure="per_env", rollouts=2)
    assert 0 < rate < float("inf")
    assert math.isfinite(reward) and reward != 0.0
    with pytest.raises(ValueError, match="--batch 6 --rollouts 4"):
        env_limit.limit("brax/fast", batch=6, length=10, repeats=1, structure="per_env",
                        rollouts=4)
    with pytest.raises(ValueError, match="brax envs only"):
        env_limit.limit("CartPole-v1", batch=4, length=10, repeats=1, structure="per_env")


openes_row = _row("openes")
ippo_row = _row("ippo")
JAXMARL = Path(os.environ.get("JAXMARL", ROOT / ".peers" / "jaxmarl"))
"""A JaxMARL checkout (``JAXMARL``; only ``baselines/IPPO/ippo_ff_mpe.py`` and its YAML are read)."""


@pytest.mark.slow
def test_both_sides_of_the_openes_row_run_at_a_tiny_budget():
    """Row 5's programs on brax's ``fast`` env, 8 members x 2 episodes of 20 steps: ours
    through the documented command, evosax's example loop through the driver."""
    ours = openes_row.ours("fast", 4, 0, str(ROOT / "src"), timeout=600, overrides=(
        "trainer.population_size=8", "algorithm.num_episodes=2", "env.episode_length=20",
        "algorithm.hidden_sizes=[8]", "trainer.log_every_n_generations=2",
        "algorithm.eval_episodes=4", "algorithm.episode_loop=scan"))
    assert ours["side"] == "ours" and ours["generations"] == 4 and ours["env_steps"] == 4 * 8 * 2 * 20
    assert ours["generations_per_s"] == pytest.approx(ours["env_steps_per_s"] / (8 * 2 * 20))
    assert 0 < ours["best_fitness"] <= 20 and 0 <= ours["eval_return"] <= 20  # fast pays <= 1 a step
    peer = openes_row.evosax("fast", 6, 0, None, timeout=600, settings=(
        "population_size=8", "num_rollouts=2", "episode_length=20", "hidden_sizes=8", "log_period=2"))
    assert peer["side"] == "evosax" and peer["generations"] == 6 and peer["env_steps"] == 6 * 8 * 2 * 20
    assert len(peer["chunk_s"]) == 3  # timed: the third chunk, after the two that compile
    assert peer["generations_per_s"] * peer["run_s"] == pytest.approx(2)
    assert peer["env_steps_per_s"] == pytest.approx(peer["generations_per_s"] * 8 * 2 * 20)
    assert 0 < peer["best_fitness"] <= 20 and [g for g, _ in peer["curve"]] == [2, 4, 6]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jaxmarl") is None, reason="jaxmarl is not installed")
def test_our_side_of_the_ippo_row_runs_its_seeds_in_one_program():
    row = ippo_row.ours(2, 64, 0, str(ROOT / "src"), timeout=600, overrides=(  # 4 updates of 16
        "algorithm.num_envs=6", "algorithm.num_steps=8", "algorithm.num_minibatches=2",
        "algorithm.update_epochs=1", "algorithm.hidden_sizes=[8]", "algorithm.eval_episodes=6",
        "trainer.log_every_n_steps=1"))
    assert row["side"] == "ours" and row["seeds"] == 2 and row["env"] == "MPE_simple_spread_v3"
    assert row["env_steps_per_s"] > 0 and row["compile_s"] > 0
    assert len(row["returns"]) == 2 and all(-1e3 < r < 0 for r in row["returns"])


@pytest.mark.slow
@pytest.mark.skipif(not (JAXMARL / "baselines" / "IPPO" / "ippo_ff_mpe.py").exists()
                    or importlib.util.find_spec("distrax") is None,
                    reason=f"no JaxMARL checkout at {JAXMARL} (set JAXMARL) or no distrax")
def test_jaxmarls_own_ippo_baseline_runs_its_seeds_in_one_program():
    row = ippo_row.jaxmarl(2, 64, 30, str(JAXMARL), None, timeout=600, settings=(
        "NUM_ENVS=2", "NUM_STEPS=8", "NUM_MINIBATCHES=2", "UPDATE_EPOCHS=1"))
    assert row["side"] == "jaxmarl" and row["seeds"] == 2 and row["seed"] == 30
    assert row["env_steps"] == 64  # 4 updates of 2 games x 8 steps a seed
    assert row["env_steps_per_s"] * row["run_s"] == pytest.approx(2 * 64)
    assert len(row["returns"]) == 2 and all(-1e3 < r < 0 for r in row["returns"])


def test_the_es_and_marl_rows_tabulate_their_own_speed_and_quality(tmp_path):
    """Row 5 reads generations/s and best fitness (fractions of the limit from env
    steps/s), row 6 one row per number of seeds with each seed's return."""
    es = tmp_path / "openes.jsonl"
    es.write_text("".join(json.dumps(r) + "\n" for r in (
        {"side": "env_only", "env": "ant", "env_steps_per_s": 8e6},
        {"side": "ours", "env": "ant", "seed": 0, "env_steps": 393216000, "env_steps_per_s": 4e6,
         "generations_per_s": 0.9765625, "best_fitness": 1500.0},
        {"side": "evosax", "env": "ant", "seed": 0, "env_steps": 393216000, "env_steps_per_s": 2e6,
         "generations_per_s": 0.48828125, "best_fitness": 1400.0})))
    header, _, row = openes_row.table([str(es)], **openes_row.TABLE).splitlines()
    assert header.startswith("| env | seed | env steps | ours generations/s | evosax | ratio | "
                             "env-only limit (4096 envs) |")
    assert header.endswith("| best fitness ours | best fitness evosax |")
    assert row == ("| brax/ant | 0 | 393,216,000 | 0.977 | 0.488 | 2.00 | 8,000,000 | 0.500 | "
                   "0.250 | 1500.0 | 1400.0 |")
    marl = tmp_path / "ippo.jsonl"
    marl.write_text("".join(json.dumps(r) + "\n" for r in (
        {"side": "env_only", "env": "MPE_simple_spread_v3", "seeds": 10, "env_steps_per_s": 1e7},
        {"side": "ours", "env": "MPE_simple_spread_v3", "seed": 30, "seeds": 10,
         "env_steps_per_s": 3e6, "returns": [-23.0, -22.0]},
        {"side": "jaxmarl", "env": "MPE_simple_spread_v3", "seed": 30, "seeds": 10,
         "env_steps": 9998336, "env_steps_per_s": 2e6, "returns": [-24.0, -22.0]})))
    header, _, row = ippo_row.table([str(marl)], **ippo_row.TABLE).splitlines()
    assert header.startswith("| env | seeds | game steps a seed | ours env steps/s | JaxMARL | "
                             "ratio | env-only limit (16 x seeds envs) |")
    assert row == ("| jaxmarl/MPE_simple_spread_v3 | 10 | 9,998,336 | 3,000,000 | 2,000,000 | 1.50 | "
                   "10,000,000 | 0.300 | 0.200 | -22.50 ± 0.50 | -23.00 ± 1.00 |")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jaxmarl") is None, reason="jaxmarl is not installed")
def test_the_env_limit_steps_a_jaxmarl_game_with_every_agents_action():
    rate, reward = env_limit.limit("jaxmarl/MPE_simple_spread_v3", batch=4, length=30, repeats=1)
    assert 0 < rate < float("inf")
    assert math.isfinite(reward) and reward < 0  # simple_spread pays minus the distances


def test_the_trace_report_counts_device_ops_only_by_name_and_kind(tmp_path):
    meta = [{"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:TPU:0"}},
            {"ph": "M", "pid": 3, "tid": 3, "name": "thread_name", "args": {"name": "XLA Ops"}},
            {"ph": "M", "pid": 3, "tid": 2, "name": "thread_name", "args": {"name": "XLA Modules"}},
            {"ph": "M", "pid": 7, "name": "process_name", "args": {"name": "/host:CPU"}}]
    ops = [("fusion.1", 3, 3, 60.0), ("fusion.1", 3, 3, 20.0), ("fusion.22", 3, 3, 10.0),
           ("copy.4", 3, 3, 10.0), ("jit_body", 3, 2, 500.0), ("$python", 7, 1, 999.0)]
    events = meta + [{"ph": "X", "name": n, "pid": p, "tid": t, "ts": 0, "dur": d}
                     for n, p, t, d in ops]
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    result = trace_ops.report(trace_ops.device_ops(str(path)), top=2)
    assert result["busy_us"] == 100.0  # the module line and the host are not ops
    assert "running_us" not in result and "where" not in result["ops"][0]
    assert [(r["name"], r["us"], r["calls"]) for r in result["ops"]] == [("fusion.1", 80.0, 2),
                                                                         ("fusion.22", 10.0, 1)]
    assert [(r["name"], r["share"]) for r in result["kinds"]] == [("fusion", 0.9), ("copy", 0.1)]


def test_the_trace_report_names_each_top_ops_source_and_counts_nested_time_once(tmp_path):
    """A loop's event holds its body's ops: summed, they count twice (row 3's first trace:
    62.4 ms "busy"); the time with any op running counts them once. Each top op's source
    is read from its event's arguments, so a trace's ``while.698`` says which code it is."""
    meta = [{"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:TPU:0"}},
            {"ph": "M", "pid": 3, "tid": 3, "name": "thread_name", "args": {"name": "XLA Ops"}}]
    ops = [("while.1", 0, 100, {"long_name": "%while.1 = (f32[]) while(...)"}),
           ("fusion.2", 10, 30, {"tf_op": "jit(body)/while/body/add", "long_name": "%fusion.2"}),
           ("copy.3", 150, 20, {})]
    events = meta + [{"ph": "X", "name": n, "pid": 3, "tid": 3, "ts": ts, "dur": d, "args": a}
                     for n, ts, d, a in ops]
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    details, spans = {}, []
    result = trace_ops.report(trace_ops.device_ops(str(path), details, spans), 3, details, spans)
    assert (result["busy_us"], result["running_us"]) == (150.0, 120.0)
    assert [(r["name"], r["where"]) for r in result["ops"]] == [
        ("while.1", "%while.1 = (f32[]) while(...)"), ("fusion.2", "jit(body)/while/body/add"),
        ("copy.3", "")]


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel of a package ``name`` holding ``VERSION``."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


def test_the_offline_install_takes_the_pinned_release_from_the_wheel_folder(tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    _wheel(wheels, "offline_pkg", "1.0")
    _wheel(wheels, "offline_pkg", "2.0")
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("offline_pkg==1.0\n")
    script = ROOT / "benchmarks" / "accelerator" / "wheels.sh"
    proc = subprocess.run(["bash", str(script), "install", str(wheels), str(target), str(reqs)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"installed reqs.txt into {target}" in proc.stdout
    env = dict(os.environ, PYTHONPATH=str(target))
    version = subprocess.run([sys.executable, "-c", "import offline_pkg; print(offline_pkg.VERSION)"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == "1.0", version.stderr


def test_a_drivers_set_takes_the_type_of_the_setting_it_replaces():
    assert _settings.value("1e7", 3) == 10_000_000 and isinstance(_settings.value("1e7", 3), int)
    assert _settings.value("0.5", 1.0) == 0.5 and _settings.value("False", True) is False
    assert _settings.value("64,64", (32,)) == (64, 64) and _settings.value("ant", "hopper") == "ant"


evorl_row = _row("evorl")
EVORL_CONFIGS = Path(os.environ.get("EVORL_CONFIGS", ROOT / ".peers" / "evorl" / "configs"))
"""EvoRL's configs folder (``EVORL_CONFIGS``; from its sdist or source tree); its packages,
``requirements/evorl.txt`` installed into a folder, named by ``EVORL_PYTHONPATH``."""
EVORL_PYTHONPATH = os.environ.get("EVORL_PYTHONPATH")


@pytest.mark.slow
def test_our_side_of_the_evorl_row_runs_both_workflows_at_evorls_settings():
    """Row 7's documented commands with EvoRL's settings as overrides, then tiny sizes, on
    brax's ``fast``: PPO's budget rounds up to whole rollouts as EvoRL's ``ceil`` does."""
    ppo = evorl_row.ours(
        "ppo",
        "fast",
        48,
        0,
        str(ROOT / "src"),
        timeout=600,
        overrides=(
            "algorithm.num_envs=4",
            "algorithm.num_steps=8",
            "algorithm.num_minibatches=2",
            "algorithm.update_epochs=1",
            "algorithm.hidden_sizes=[8]",
            "algorithm.critic_hidden_sizes=[8]",
            "algorithm.eval_episodes=4",
            "env.episode_length=20",
            "trainer.log_every_n_steps=1",
            "trainer.compilation_cache=false",
        ),
    )
    assert ppo["side"] == "ours" and ppo["algo"] == "ppo" and ppo["env_steps"] == 2 * 4 * 8
    assert ppo["env_steps_per_s"] > 0 and 0 <= ppo["eval_return"] <= 20  # fast pays <= 1 a step
    es = evorl_row.ours(
        "openes",
        "fast",
        4,
        0,
        str(ROOT / "src"),
        timeout=600,
        overrides=(
            "trainer.population_size=8",
            "algorithm.num_episodes=2",
            "algorithm.hidden_sizes=[8]",
            "algorithm.eval_episodes=4",
            "env.episode_length=20",
            "trainer.log_every_n_generations=2",
            "trainer.compilation_cache=false",
        ),
    )
    assert es["side"] == "ours" and es["generations"] == 4 and es["env_steps"] == 4 * 8 * 2 * 20
    assert es["generations_per_s"] == pytest.approx(es["env_steps_per_s"] / (8 * 2 * 20))
    assert 0 < es["best_fitness"] <= 20 and 0 <= es["eval_return"] <= 20


def test_the_evorl_row_gives_evorls_iterations_and_tabulates_each_workflow(tmp_path):
    """EvoRL's PPO runs ``ceil(budget / rollout)`` iterations (50M: 153 of 327,680); the
    tables read env steps/s and return (PPO), generations/s and best fitness (OpenES)."""
    assert evorl_row.ppo_iterations(50_000_000) == 153 and evorl_row.ppo_iterations(48, 4, 8) == 2
    assert "algorithm.vf_coef=1.0" in evorl_row.PPO_OVERRIDES  # EvoRL: 0.5 x mean, ours 0.5 x
    runs = tmp_path / "evorl.jsonl"
    runs.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in (
                {"side": "env_only", "env": "ant", "env_steps_per_s": 8e6},
                {
                    "side": "ours",
                    "env": "ant",
                    "seed": 42,
                    "env_steps": 50135040,
                    "env_steps_per_s": 2e5,
                    "generations_per_s": 2.0,
                    "eval_return": 5000.0,
                    "best_fitness": 3000.0,
                },
                {
                    "side": "evorl",
                    "env": "ant",
                    "seed": 42,
                    "env_steps": 50135040,
                    "env_steps_per_s": 1e5,
                    "generations_per_s": 4.0,
                    "eval_return": 4000.0,
                    "best_fitness": 2000.0,
                },
            )
        )
    )
    header, _, row = evorl_row.table([str(runs)], **evorl_row.TABLES["ppo"]).splitlines()
    assert header.startswith(
        "| env | seed | env steps | ours env steps/s | EvoRL | ratio | env-only limit (4096 envs) |"
    )
    assert row == (
        "| brax/ant | 42 | 50,135,040 | 200,000 | 100,000 | 2.00 | 8,000,000 | 0.025 | "
        "0.013 | 5000.0 | 4000.0 |"
    )
    header, _, row = evorl_row.table([str(runs)], **evorl_row.TABLES["openes"]).splitlines()
    assert "| ours generations/s | EvoRL | ratio | env-only limit (2048 envs) |" in header
    assert row.startswith("| brax/ant | 42 | 50,135,040 | 2.000 | 4.000 | 0.50 |")
    assert row.endswith("| 3000.0 | 2000.0 |")


def _evorl_config(*names: str) -> dict:
    """EvoRL's agent YAMLs merged in the order hydra's ``defaults`` take them."""
    import yaml

    merged: dict = {}
    for name in names:
        merged.update(yaml.safe_load((EVORL_CONFIGS / "agent" / f"{name}.yaml").read_text()))
    return merged


@pytest.mark.slow
@pytest.mark.skipif(
    not EVORL_PYTHONPATH or not (EVORL_CONFIGS / "agent" / "ppo.yaml").exists(),
    reason=f"no EvoRL configs at {EVORL_CONFIGS} (set EVORL_CONFIGS) or no folder "
    "with requirements/evorl.txt installed (set EVORL_PYTHONPATH)",
)
def test_evorls_own_workflows_run_at_its_configs_and_ours_takes_their_settings():
    """EvoRL's PPO and OpenES through the driver at a tiny budget on brax's
    inverted_pendulum (EvoRL's envs need a ``sys``; ``fast`` has none), and the row's
    overrides carry the values of EvoRL's own YAML files."""
    ppo_cfg = _evorl_config("ppo", "exp/ppo/brax/ant")
    es_cfg = _evorl_config("ec/openes", "exp/ec/openes/brax-default")
    assert (ppo_cfg["num_envs"], ppo_cfg["rollout_length"], ppo_cfg["total_timesteps"]) == (
        evorl_row.PPO_ENVS,
        evorl_row.PPO_STEPS,
        evorl_row.PPO_BUDGET,
    )
    ours_ppo = dict(o.split("=", 1) for o in evorl_row.PPO_OVERRIDES)
    assert int(ours_ppo["algorithm.num_minibatches"]) == 4096 * 80 // ppo_cfg["minibatch_size"]
    for ours_key, value in (
        ("lr", ppo_cfg["optimizer"]["lr"]),
        ("clip_eps", ppo_cfg["clip_epsilon"]),
        ("gamma", ppo_cfg["discount"]),
        ("gae_lambda", ppo_cfg["gae_lambda"]),
        ("update_epochs", ppo_cfg["reuse_rollout_epochs"]),
        ("max_grad_norm", ppo_cfg["optimizer"]["grad_clip_norm"]),
        ("ent_coef", -ppo_cfg["loss_weights"]["actor_entropy"]),
        ("vf_coef", 2 * ppo_cfg["loss_weights"]["critic_loss"]),
    ):
        assert float(ours_ppo[f"algorithm.{ours_key}"]) == pytest.approx(value), ours_key
    assert (es_cfg["pop_size"], es_cfg["episodes_for_fitness"], es_cfg["num_iters"]) == (
        evorl_row.POPULATION,
        evorl_row.EPISODES,
        evorl_row.GENERATIONS,
    )
    ours_es = dict(o.split("=", 1) for o in evorl_row.OPENES_OVERRIDES)
    assert float(ours_es["algorithm.std"]) == es_cfg["ec_noise_std"]["init"]
    assert float(ours_es["algorithm.learning_rate"]) == es_cfg["ec_lr"]["init"]
    assert es_cfg["ec_noise_std"]["decay"] == es_cfg["ec_lr"]["decay"] == 1.0  # fixed: ours' 1.0
    assert ours_es["algorithm.hidden_sizes"] == str(
        es_cfg["agent_network"]["actor_hidden_layer_sizes"]
    ).replace(" ", "")
    tiny = (
        "num_eval_envs=4",
        "eval_episodes=4",
        "env.max_episode_steps=20",
        "agent_network.actor_hidden_layer_sizes=[8]",
    )
    ppo = evorl_row.evorl(
        "ppo",
        "inverted_pendulum",
        96,
        42,
        EVORL_PYTHONPATH,
        timeout=600,
        settings=(
            "num_envs=4",
            "rollout_length=8",
            "minibatch_size=16",
            "eval_interval=100",
            "agent_network.critic_hidden_layer_sizes=[8]",
            *tiny,
        ),
        configs=str(EVORL_CONFIGS),
    )
    assert ppo["side"] == "evorl" and ppo["iterations"] == 3 and ppo["env_steps"] == 96
    assert len(ppo["iteration_s"]) == 3 and ppo["run_s"] == pytest.approx(
        sum(ppo["iteration_s"][1:])
    )
    assert ppo["env_steps_per_s"] * ppo["run_s"] == pytest.approx(2 * 32)  # after the first
    assert ppo["curve"][-1][0] == 3 and 0 < ppo["eval_return"] <= 20  # one evaluation: the last
    es = evorl_row.evorl(
        "openes",
        "inverted_pendulum",
        4,
        42,
        EVORL_PYTHONPATH,
        timeout=600,
        settings=(
            "pop_size=8",
            "num_envs=2",
            "episodes_for_fitness=2",
            "eval_interval=2",
            "random_timesteps=64",
            *tiny,
        ),
        configs=str(EVORL_CONFIGS),
    )
    assert es["side"] == "evorl" and es["iterations"] == 4 and [g for g, _ in es["curve"]] == [2, 4]
    assert es["generations_per_s"] * es["run_s"] == pytest.approx(3)
    assert es["env_steps_per_s"] == pytest.approx(es["generations_per_s"] * 8 * 2 * 20)
    assert 0 < es["evorl_env_steps_per_s"] <= es["env_steps_per_s"]  # its episodes end early
    assert 0 < es["best_fitness"] <= 20 and 0 < es["eval_return"] <= 20
