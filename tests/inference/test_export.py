"""``jaxtrainer export`` and ``Policy.export``: a saved run's greedy policy as a StableHLO
file that a plain JAX program reloads, or an ONNX file onnxruntime runs, acting as
``load_policy`` does on 1,000 observations; the model card beside it; bad input refused
before anything is restored."""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib.util
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.commands import _export_cli as export_cli
from jaxtrainer.commands import fit
from jaxtrainer.inference import export, saved_run
from jaxtrainer.rundir.storage import StorageError

TINY = ["trainer.strategy=single", "trainer.devices=1", "trainer.max_env_steps=null",
        "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
        "trainer.compile_evaluation_ahead=false", "trainer.compilation_cache=false",
        "logger.tensorboard=false", "algorithm.num_envs=2", "algorithm.hidden_sizes=[8]",
        "algorithm.eval_episodes=2"]
TINY_PPO = [*TINY, "trainer.max_steps=2", "algorithm.num_steps=8", "algorithm.num_minibatches=2",
            "algorithm.update_epochs=1", "algorithm.normalize_observations=true"]
N = 1000
RELEASE_PPO = Path(__file__).parents[1] / "_support" / "fixtures" / "release_runs" / "ppo_recipe" / \
    "version_0"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Five saved runs: PPO on CartPole (discrete; the release fixture's recipe run), SAC
    on Pendulum (tanh-squashed, continuous) normalising observations, a 2-seed sweep of
    PPO with a GRU core normalising observations (recurrent, a population), PPO on a brax
    env normalising observations (``ppo_brax_cpu.yaml`` on ``brax/fast``, brax's smallest
    env: two steps on ``inverted_pendulum`` take over a minute on 2 busy cores, its physics
    compiling; the policy and its normalisation are the same code) and PQN with the MinAtar
    CNN (``pqn_minatar.yaml``: Breakout-MinAtar, 10x10x4 grids)."""
    root = tmp_path_factory.mktemp("runs")
    fit.run([f"trainer.default_root_dir={root / 'sac'}", *TINY, "trainer.max_steps=4",
             "algorithm.buffer_size=64", "algorithm.batch_size=8", "algorithm.learning_starts=4",
             "algorithm.normalize_observations=true"], "sac")
    fit.run([f"trainer.default_root_dir={root / 'gru'}", *TINY_PPO, "network.core=gru",
             "network.core_size=8", "sweep.seeds=2"], "ppo")
    fit.run(["--config", "ppo_brax_cpu.yaml", f"trainer.default_root_dir={root / 'brax'}",
             *TINY_PPO, "env.name=brax/fast", "env.episode_length=20", "algorithm.num_steps=10",
             "algorithm.unroll_length=5", "algorithm.critic_hidden_sizes=[8]"], "ppo")
    fit.run(["--config", "pqn_minatar.yaml", f"trainer.default_root_dir={root / 'pqn'}", *TINY,
             "trainer.max_steps=2", "algorithm.num_steps=4", "algorithm.num_minibatches=2",
             "algorithm.update_epochs=1"], "pqn")
    return {"ppo": RELEASE_PPO, **{name: root / name / "version_0" for name in list(CASES)[1:]}}


CASES = {"ppo": None, "sac": None, "gru": 1, "brax": None, "pqn": None}
"""The runs exported (:func:`runs`), each with the member exported (``None``: not a population)."""


def observations(name: str) -> np.ndarray:
    """1,000 observations in (and beyond) the env's range: CartPole float32[N, 4],
    Pendulum (cos, sin, angular velocity) float32[N, 3], brax/fast (position, velocity)
    float32[N, 2], Breakout-MinAtar's 0/1 grids float32[N, 10, 10, 4]."""
    rng = np.random.default_rng(0)
    if name == "sac":
        theta = rng.uniform(-np.pi, np.pi, N)
        return np.stack([np.cos(theta), np.sin(theta), rng.uniform(-8, 8, N)], 1).astype(np.float32)
    if name == "brax":
        return rng.normal(0, 3, (N, 2)).astype(np.float32)
    if name == "pqn":
        return (rng.uniform(size=(N, 10, 10, 4)) < 0.1).astype(np.float32)
    return (rng.uniform(-1, 1, (N, 4)) * [2.4, 3.0, 0.21, 3.0]).astype(np.float32)


@functools.cache
def loaded(run: Path, member: int | None = None) -> jt.Policy:
    """``jt.load_policy(run, member=member)``, restored once per run and member."""
    return jt.load_policy(run, member=member)


@functools.cache
def expected(run: Path, name: str, member: int | None = None) -> list[np.ndarray]:
    """What ``load_policy`` acts: ``[actions]``, or ``[actions, next carry]`` from zeros
    (once per run: the StableHLO and ONNX tests compare with the same arrays)."""
    act = loaded(run, member)
    obs = observations(name)
    if isinstance(act, jt.RecurrentPolicy):
        actions, carry = act(obs, act.initial_carry(N))
        return [np.asarray(actions), np.asarray(carry)]
    return [np.asarray(act(obs))]


RELOAD = textwrap.dedent("""\
    import sys
    import jax
    import numpy as np

    for file, obs, out in zip(*[iter(sys.argv[1:])] * 3):
        exported = jax.export.deserialize(bytearray(open(file, "rb").read()))
        obs = np.load(obs)
        inputs = [obs] + [np.zeros((len(obs), *a.shape[1:]), a.dtype) for a in exported.in_avals[1:]]
        result = exported.call(*inputs)
        result = result if isinstance(result, (tuple, list)) else [result]
        np.savez(out, *[np.asarray(r) for r in result])
    print("jaxtrainer imported:", any(m.split(".")[0] == "jaxtrainer" for m in sys.modules))
""")


BOUND = {"sac": 2.0, "brax": 1.0}
"""The continuous runs' action bounds (Pendulum, brax/fast): the squash or clip is in the file."""


def assert_acts_alike(got: list[np.ndarray], want: list[np.ndarray], name: str) -> None:
    """Discrete actions (argmax, PQN's greedy Q) equal; continuous actions and carries
    to float32 rounding: ``rtol=1e-5, atol=1e-6``."""
    assert len(got) == len(want)
    assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype
    if name in BOUND:
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        assert np.all(np.abs(got[0]) <= BOUND[name]) and len(np.unique(want[0])) > 1
    else:
        np.testing.assert_array_equal(got[0], want[0])
    for g, w in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def stablehlo(runs, tmp_path_factory):
    """Every run exported by ``jaxtrainer export --format stablehlo`` (in process): the
    folder of the files and model cards, and what the command printed."""
    out, said = tmp_path_factory.mktemp("stablehlo"), io.StringIO()
    with contextlib.redirect_stdout(said):
        for name, member in CASES.items():
            argv = [str(runs[name]), "--format", "stablehlo", "-o", str(out / f"{name}.stablehlo")]
            assert export_cli.main(argv + ([] if member is None else ["--member", str(member)])) == 0
    return out, said.getvalue()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stablehlo_reloads_in_plain_jax_and_acts_as_load_policy(runs, stablehlo, tmp_path):
    exported, said = stablehlo
    args = []
    for name in CASES:
        np.save(tmp_path / f"{name}_obs.npy", observations(name))
        args += [str(exported / f"{name}.stablehlo"), str(tmp_path / f"{name}_obs.npy"),
                 str(tmp_path / f"{name}_out.npz")]
    assert f"wrote {exported / 'gru.stablehlo'} (stablehlo; CartPole-v1, checkpoint " in said
    assert "member 1)" in said and f"wrote {exported / 'gru.stablehlo.json'} (model card)" in said
    out = subprocess.run([sys.executable, "-c", RELOAD, *args], capture_output=True, text=True,
                         timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "jaxtrainer imported: False" in out.stdout
    for name, member in CASES.items():
        with np.load(tmp_path / f"{name}_out.npz") as got:
            assert_acts_alike([got[k] for k in sorted(got.files)],
                              expected(runs[name], name, member), name)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_onnx_runs_in_onnxruntime_and_acts_as_load_policy(runs, tmp_path):
    ort = pytest.importorskip(
        "onnxruntime", reason="onnxruntime is not installed: pip install 'jaxtrainer[onnx]'")
    for name, member in CASES.items():
        file = loaded(runs[name], member).export(tmp_path / f"{name}.onnx", "onnx")
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only
        session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
        inputs = session.get_inputs()
        obs = observations(name)
        feed = {"obs": obs}
        for carry in inputs[1:]:  # zeros start an episode
            assert carry.shape == ["batch", 8] and carry.name == "carry_0"
            feed[carry.name] = np.zeros((N, 8), np.float32)
        assert [i.name for i in inputs] == list(feed)
        assert inputs[0].shape == ["batch", *obs.shape[1:]]
        got = session.run(None, feed)
        assert [o.name for o in session.get_outputs()] == ["action"] + \
            (["next_carry_0"] if name == "gru" else [])
        assert_acts_alike(got, expected(runs[name], name, member), name)
        one = session.run(None, {k: v[:1] for k, v in feed.items()})  # the batch is dynamic
        assert one[0].shape[0] == 1
    brax, pqn = (json.loads(export.card_path(tmp_path / f"{n}.onnx").read_text())
                 for n in ("brax", "pqn"))
    assert brax["env"] == "brax/fast" and brax["algorithm"] == "ppo" and brax["format"] == "onnx"
    assert brax["observation_space"] == {"shape": [2], "dtype": "float32"}
    assert brax["action_space"] == {"shape": [1], "dtype": "float32", "type": "box",
                                    "low": [-1.0], "high": [1.0]}
    assert pqn["env"] == "Breakout-MinAtar" and pqn["algorithm"] == "pqn"
    assert pqn["inputs"] == [{"name": "obs", "shape": ["batch", 10, 10, 4], "dtype": "float32"}]
    assert pqn["action_space"] == {"shape": [], "dtype": "int32", "type": "discrete", "n": 3}


@pytest.mark.slow
def test_the_model_card_names_the_spaces_the_run_and_its_return(runs, stablehlo, tmp_path):
    """PPO's card written by ``Policy.export``; SAC's and the sweep member's by the
    command (the ``stablehlo`` fixture: the same writer); brax, pqn: the ONNX test."""
    file = tmp_path / "ppo.stablehlo"
    assert loaded(runs["ppo"]).export(file) == file
    cards = {name: json.loads((folder / f"{name}.stablehlo.json").read_text())
             for name, folder in (("ppo", tmp_path), ("sac", stablehlo[0]), ("gru", stablehlo[0]))}
    ppo, sac, gru = cards["ppo"], cards["sac"], cards["gru"]
    with open(runs["ppo"] / "metrics.csv", newline="") as f:
        logged = [r for r in csv.DictReader(f) if r["eval/episode_return"]]
    assert ppo["return"] == {"metric": "eval/episode_return", "step": 2,
                             "value": float(logged[-1]["eval/episode_return"])}
    assert ppo["env"] == "CartPole-v1" and ppo["algorithm"] == "ppo" and ppo["member"] is None
    assert ppo["observation_space"] == {"shape": [4], "dtype": "float32"}
    assert ppo["action_space"] == {"shape": [], "dtype": "int32", "type": "discrete", "n": 2}
    assert ppo["inputs"] == [{"name": "obs", "shape": ["batch", 4], "dtype": "float32"}]
    assert ppo["outputs"] == [{"name": "action", "shape": ["batch"], "dtype": "int32"}]
    assert ppo["run_dir"] == str(runs["ppo"]) and ppo["global_step"] == 2
    assert ppo["checkpoint"] == str(runs["ppo"] / "checkpoints" / "2")
    assert ppo["format"] == "stablehlo" and ppo["platforms"] == ["cpu", "cuda", "tpu"]
    assert ppo["jax_version"] == jax.__version__ and ppo["jaxtrainer_version"] == "0.2.0"
    assert sac["algorithm"] == "sac" and sac["env"] == "Pendulum-v1"
    assert sac["action_space"] == {"shape": [1], "dtype": "float32", "type": "box",
                                   "low": [-2.0], "high": [2.0]}
    assert sac["return"]["metric"] == "eval/episode_return" and sac["return"]["step"] == 4
    assert gru["member"] == 1 and gru["recurrent"] is True
    assert gru["return"]["metric"] == "member/1/eval/episode_return"  # the member's own
    assert gru["inputs"][1:] == [{"name": "carry_0", "shape": ["batch", 8], "dtype": "float32"}]
    assert gru["outputs"][1:] == [{"name": "next_carry_0", "shape": ["batch", 8],
                                   "dtype": "float32"}]
    assert jt.load_policy(runs["gru"]).member == 0  # a sweep's default member


def test_a_policy_built_by_hand_exports_through_export_policy_without_a_run(tmp_path):
    act = jt.load_policy(RELEASE_PPO)
    bare = jt.Policy(act.spec, act.params)
    with pytest.raises(TypeError, match="Policy built without an exporter: pass exporter="):
        bare.export(tmp_path / "bare.stablehlo")
    assert export.export_policy(bare, tmp_path / "bare.stablehlo") == tmp_path / "bare.stablehlo"
    card = json.loads((tmp_path / "bare.stablehlo.json").read_text())
    assert card["run_dir"] is card["algorithm"] is card["return"] is card["checkpoint"] is None
    assert card["env"] == "CartPole-v1" and card["global_step"] == 0


@pytest.mark.slow
def test_a_member_outside_the_population_is_refused_before_anything_is_restored(
        runs, tmp_path, monkeypatch, capsys):
    def restored(*args, **kwargs):
        raise AssertionError("the checkpoint was restored")

    monkeypatch.setattr(saved_run, "load_into", restored)
    file = tmp_path / "p.stablehlo"
    assert export_cli.main([str(runs["gru"]), "-o", str(file), "--member", "2"]) == 2
    assert capsys.readouterr().err == ("jaxtrainer export: error: --member 2: expected an index "
                                       "in [0, 2) (the run's 2 members)\n")
    assert export_cli.main([str(runs["ppo"]), "-o", str(file), "--member", "0"]) == 2
    assert "--member 0: PPO is one agent, not a population of members" in capsys.readouterr().err
    assert not file.exists()


def test_bad_arguments_are_one_line_before_anything_is_restored(tmp_path, capsys):
    run = tmp_path / "empty_run"
    run.mkdir()
    assert export_cli.main([str(run), "-o", str(tmp_path / "missing" / "p.stablehlo")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxtrainer export: error: could not write the exported policy ") \
        and err.endswith("missing/p.stablehlo: directory " + str(tmp_path / "missing") + " does not exist\n")
    assert export_cli.main([str(run), "-o", str(tmp_path / "p.stablehlo")]) == 2
    assert capsys.readouterr().err.startswith(f"jaxtrainer export: error: no checkpoint in {run}")
    assert export_cli.main([str(run), "-o", str(tmp_path / "p.bin")]) == 2
    assert "--format not given and -o " in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        export_cli.main([str(run), "--format", "tflite", "-o", str(tmp_path / "p")])
    assert exit_.value.code == 2
    assert "argument --format: invalid choice: 'tflite' (choose from 'stablehlo', 'onnx')" in \
        capsys.readouterr().err
    with pytest.raises(ValueError, match=r"format 'tflite': expected one of stablehlo, onnx"):
        export.check_format("tflite")
    with pytest.raises(StorageError, match="it is a directory"):
        export.check_output(tmp_path)
    assert export_cli.FORMATS == export.FORMATS  # the command names them without JAX


def test_onnx_without_its_converter_names_the_extra(monkeypatch, tmp_path, capsys):
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax2onnx" else find(name, *a))
    with pytest.raises(ImportError, match=r"exporting to onnx needs jax2onnx, which is not "
                                          r"installed: pip install 'jaxtrainer\[onnx\]'"):
        export.check_format("onnx")
    assert export_cli.main([str(tmp_path), "-o", str(tmp_path / "p.onnx")]) == 2
    assert "pip install 'jaxtrainer[onnx]'" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
