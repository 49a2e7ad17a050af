"""The persistent compilation cache: where it goes, how it is switched, and a
second process that loads the programs the first one compiled."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms import DQN, PPO
from jaxtrainer.recipes import config
from jaxtrainer.runtime import compilation_cache
from tests._support._xla import xla_flags

RECIPES = Path(__file__).parents[2] / "recipes"


def test_setting_and_environment_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation_cache._ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache.resolve(None) is None
    assert compilation_cache.resolve(False) is None
    assert compilation_cache.resolve(tmp_path / "c") == tmp_path / "c"
    assert compilation_cache.resolve("~/c") == Path.home() / "c"
    # True: the directory JAX is already configured with (the suite's), else ours
    assert compilation_cache.resolve(True) == Path(jax.config.jax_compilation_cache_dir)
    assert compilation_cache.default_dir() == tmp_path / "xdg" / "jaxtrainer" / "jax"
    # the environment variable wins over the setting
    for off in ("0", "off", "False"):
        monkeypatch.setenv(compilation_cache._ENV_VAR, off)
        assert compilation_cache.resolve(True) is None
    monkeypatch.setenv(compilation_cache._ENV_VAR, str(tmp_path / "env"))
    assert compilation_cache.resolve(None) == tmp_path / "env"
    monkeypatch.delenv(compilation_cache._ENV_VAR)
    for bad in (3, "flase", "cache"):  # a word without "/" is a misspelt switch, not a directory
        with pytest.raises(ValueError, match=rf"compilation_cache={bad!r}: expected true/false"):
            compilation_cache.resolve(bad)
    assert compilation_cache.resolve(0) is None and compilation_cache.resolve("off") is None
    monkeypatch.setenv(compilation_cache._ENV_VAR, "flase")
    with pytest.raises(ValueError, match="JAXTRAINER_COMPILATION_CACHE='flase'"):
        compilation_cache.resolve(True)


def test_bad_setting_fails_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="compilation_cache=3"):
        jt.Trainer(max_steps=1, default_root_dir=tmp_path / "runs", compilation_cache=3)
    assert not (tmp_path / "runs").exists()


def test_recipes_turn_it_on_and_config_turns_it_off(monkeypatch):
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", ["trainer.logger=false"])
    assert cfg.trainer.compilation_cache is True
    # the suite points the environment variable at its own throwaway directory
    assert config.make_trainer(cfg).compilation_cache_dir == Path(
        os.environ[compilation_cache._ENV_VAR])
    monkeypatch.delenv(compilation_cache._ENV_VAR)
    # on: the directory JAX is configured with (here the suite's, else ~/.cache/jaxtrainer/jax)
    assert config.make_trainer(cfg).compilation_cache_dir == Path(
        jax.config.jax_compilation_cache_dir)
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", ["trainer.compilation_cache=false"])
    assert config.make_trainer(cfg).compilation_cache_dir is None


SCRIPT = textwrap.dedent("""
    import sys
    import jaxtrainer as jt
    from tests._support.toys import Regression
    trainer = jt.Trainer(strategy="single", max_steps=4, log_every_n_steps=2,
                         default_root_dir=sys.argv[1], enable_progress_bar=False,
                         enable_checkpointing=False, logger=False, compilation_cache=sys.argv[2])
    trainer.fit(Regression())
    print("RESULT", trainer.evaluate(Regression()))
""")


def _script_process(root: Path, cache: Path, log_compiles: bool) -> subprocess.CompletedProcess:
    """:data:`SCRIPT` in a fresh interpreter: a run under ``root`` with the cache at ``cache``."""
    env = {**os.environ, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}  # the toy compiles in no time
    if log_compiles:
        env["JAX_LOG_COMPILES"] = "1"
    env.pop(compilation_cache._ENV_VAR)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(root), str(cache)], env=env,
                         capture_output=True, text=True, timeout=200, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def first_process(tmp_path_factory):
    """:data:`SCRIPT`'s first process, into an empty cache: ``(cache, its output)``. The
    cache is kept as it left it (:func:`_as_first_left_it`) for the tests' second processes."""
    tmp = tmp_path_factory.mktemp("first")
    out = _script_process(tmp / "runs", tmp / "cache", log_compiles=True)
    shutil.copytree(tmp / "cache", tmp / "kept")
    return tmp / "cache", out


def _as_first_left_it(cache: Path) -> Path:
    """``cache`` (:func:`first_process`'s) as the first process left it. The same path:
    JAX's cache keys hold the cache directory (its XLA caches' paths)."""
    shutil.rmtree(cache)
    shutil.copytree(cache.parent / "kept", cache)
    return cache


def _result(out: subprocess.CompletedProcess) -> str:
    return out.stdout.split("RESULT")[-1].strip()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_second_process_loads_the_compiled_programs(first_process, tmp_path):
    cache, first = first_process
    assert "Persistent compilation cache hit" not in first.stderr
    assert any(cache.iterdir())
    second = _script_process(tmp_path / "runs", _as_first_left_it(cache), log_compiles=True)
    hits = second.stderr.count("Persistent compilation cache hit")
    assert hits >= 3, second.stderr[-3000:]  # the init, training and evaluation programs at least
    assert _result(first) == _result(second)  # the same numbers from the cached programs


@pytest.mark.slow
def test_an_unwritable_cache_directory_is_one_line_and_the_run_goes_on(tmp_path):
    """~/.cache that cannot hold the cache, with the cache on as the recipes have it:
    one line naming the directory, then the run trains without the cache. (Root
    writes into read-only directories, so ~/.cache is made a file: no directory
    can be created under it, whoever runs.)"""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").write_text("not a directory")
    env = {k: v for k, v in os.environ.items() if k not in (compilation_cache._ENV_VAR,
                                                            "XDG_CACHE_HOME")}
    env.update(HOME=str(home), JAX_COMPILATION_CACHE_DIR="")
    code = textwrap.dedent(f"""
        import jaxtrainer as jt
        from tests._support.toys import Regression
        t = jt.Trainer(strategy="single", max_steps=2, logger=False, enable_progress_bar=False,
                       enable_checkpointing=False, compilation_cache=True,
                       default_root_dir={str(tmp_path / "runs")!r})
        t.fit(Regression())
        print("RESULT", t.global_step, t.compilation_cache_dir)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=200, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("RESULT")[-1].split() == ["2", "None"]
    lines = [line for line in out.stderr.splitlines() if "compilation cache directory" in line]
    assert lines == [f"jaxtrainer: the compilation cache directory {home}/.cache/jaxtrainer/jax "
                     "is not writable (NotADirectoryError: Not a directory); running without "
                     f"the cache (set {compilation_cache._ENV_VAR} to another directory, or 0 to "
                     "turn it off)"]


@pytest.mark.slow
def test_a_damaged_cache_entry_is_compiled_again(first_process, tmp_path):
    cache, first = first_process
    for entry in _as_first_left_it(cache).rglob("*"):
        if entry.is_file():
            entry.write_bytes(b"\x00damaged" * 8)
    assert _result(_script_process(tmp_path / "runs", cache, log_compiles=False)) == _result(first)


HYPERPARAMS_SCRIPT = textwrap.dedent("""
    import dataclasses, json, sys
    import jaxtrainer as jt
    from jaxtrainer.algorithms import DQN, PPO
    root, cache, changed = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    modules = [PPO(num_envs=2, num_steps=4, update_epochs=1, num_minibatches=1, hidden_sizes=(4,)),
               DQN(num_envs=2, batch_size=4, buffer_size=8, learning_starts=4, hidden_sizes=(4,))]
    for module in modules:
        if changed:  # every traced hyperparameter of the module to another value
            new = {n: getattr(module.config, n) * 0.9 for n in type(module).TUNABLE}
            module = type(module)(dataclasses.replace(module.config, **new), env=module.env)
        trainer = jt.Trainer(strategy="pmap", devices=2, max_steps=2, log_every_n_steps=1,
                             seed=int(changed), default_root_dir=root, logger=False,
                             enable_progress_bar=False, enable_checkpointing=False,
                             compile_evaluation_ahead=False, compilation_cache=cache)
        trainer.fit(module)
        print("RESULT", type(module).__name__,
              json.dumps({k: float(v) for k, v in trainer.state.hyperparams.items()}))
""")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_another_learning_rate_or_seed_loads_every_program_from_the_cache(tmp_path):
    """A second process with every traced hyperparameter (learning rates, gamma,
    lambda, clip, coefficients, tau, epsilon ends) changed and another seed,
    PPO and DQN under pmap on 2 devices: no program compiles again, so the
    cache gains no entry (every program compiled after the cache is on is
    stored, however fast it compiled)."""
    cache = tmp_path / "cache"
    env = {**os.environ, "JAX_LOG_COMPILES": "1", "XLA_FLAGS": xla_flags(2)}
    env.pop(compilation_cache._ENV_VAR)
    env.pop("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", None)  # jaxtrainer's own threshold
    entries, outs = [], []
    for changed in range(2):
        out = subprocess.run([sys.executable, "-c", HYPERPARAMS_SCRIPT, str(tmp_path / "runs"),
                              str(cache), str(changed)], env=env, capture_output=True, text=True,
                             timeout=200, cwd=Path(__file__).parents[2])
        assert out.returncode == 0, out.stderr[-3000:]
        entries.append(sorted(p.name for p in cache.iterdir()))
        outs.append(out)
    # the state holds each run's values (float32), as traced hyperparameters
    held = [[json.loads(line.split(" ", 2)[2]) for line in o.stdout.splitlines()
             if line.startswith("RESULT")] for o in outs]
    for algo, first, second in zip((PPO, DQN), held[0], held[1], strict=True):
        defaults = algo.config_class()
        assert first == {n: float(np.float32(getattr(defaults, n))) for n in algo.TUNABLE}
        assert second == {n: float(np.float32(getattr(defaults, n) * 0.9)) for n in algo.TUNABLE}
    assert entries[1] == entries[0]  # nothing compiled again
    assert outs[1].stderr.count("Persistent compilation cache hit") >= 6  # init, train x 2 ...


def test_the_trainer_turns_it_on_by_default_and_false_leaves_it_off(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation_cache._ENV_VAR)
    kwargs = {"max_steps": 1, "default_root_dir": tmp_path, "logger": False,
              "enable_checkpointing": False}
    # on: the directory JAX is configured with (here the suite's, else ~/.cache/jaxtrainer/jax)
    assert jt.Trainer(**kwargs).compilation_cache_dir == Path(jax.config.jax_compilation_cache_dir)
    assert jt.Trainer(compilation_cache=False, **kwargs).compilation_cache_dir is None
