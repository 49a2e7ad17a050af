"""Trainer and PopulationTrainer arguments as they arrive from YAML and the command line.

``devices`` takes "auto", a count, a list of device indices (``[0, 2]``, as in
Lightning) or a list of devices; on/off switches take real bools only, so a
typo (``trainer.logger=flase``) or a number (``trainer.enable_checkpointing=100``)
is an error naming the key, raised before anything runs or is written.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from omegaconf import OmegaConf

import jaxtrainer as jt
from jaxtrainer.population import PopulationTrainer
from jaxtrainer.recipes import config
from tests._support._xla import OPTIMIZATION
from tests._support.modules import Regression

ROOT = pathlib.Path(__file__).parents[2]
CONFIGS = ROOT / "recipes" / "configs"
QUIET = dict(compile_evaluation_ahead=False, enable_progress_bar=False,
             enable_checkpointing=False, logger=False)
SMALL_PPO = ["algorithm.hidden_sizes=[8]", "algorithm.update_epochs=1", "algorithm.num_minibatches=1"]
"""A PPO recipe run that compiles fast: what these tests check is not its size."""
FORMS = r"expected 'auto', a positive int n \(the first n devices"
SWITCHES = ("jit", "enable_progress_bar", "enable_checkpointing", "logger",
            "compile_evaluation_ahead", "run_ahead")


def recipe(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- devices
@pytest.mark.timeout(60)
def test_a_list_of_indices_selects_those_local_devices_and_trains_on_them(run_dir):
    local = jax.local_devices()
    trainer = jt.Trainer(devices=[0, 2], max_steps=2, default_root_dir=run_dir, **QUIET)
    assert isinstance(trainer.strategy, jt.PmapStrategy)   # "auto" with 2 devices
    assert trainer.strategy.devices == [local[0], local[2]]
    assert trainer.num_devices == 2
    trainer.fit(Regression())
    assert trainer.global_step == 2
    assert trainer.state["params"]["w"].sharding.device_set == {local[0], local[2]}


@pytest.mark.parametrize("strategy,devices,picked", [
    ("single", [2], [2]),
    ("auto", [3], [3]),
    ("pmap", [3, 1], [3, 1]),        # in the order given
    ("shard_map", (1, 2), [1, 2]),
    ("auto", "2", [0, 1]),           # a count written as a string
    ("pmap", " 3 ", [0, 1, 2]),
    ("auto", "0,2", [0, 2]),         # indices written as a string
    ("auto", 1, [0]),
    ("auto", "auto", [0, 1, 2, 3]),
])
def test_devices_forms_select_the_devices_they_name(strategy, devices, picked):
    trainer = jt.Trainer(strategy=strategy, devices=devices, max_steps=1, **QUIET)
    assert trainer.strategy.devices == [jax.local_devices()[i] for i in picked]
    assert trainer.num_devices == len(picked)


def test_omegaconf_lists_and_device_objects_are_accepted():
    local = jax.local_devices()
    from_yaml = jt.Trainer(devices=OmegaConf.create([1, 3]), max_steps=1, **QUIET)
    assert from_yaml.strategy.devices == [local[1], local[3]]
    assert from_yaml.config["devices"] == "[1, 3]"
    objects = jt.Trainer(devices=[local[2], local[0]], max_steps=1, **QUIET)
    assert objects.strategy.devices == [local[2], local[0]]
    single = jt.Trainer(strategy="single", devices=[local[3]], max_steps=1, **QUIET)
    assert single.strategy.devices == [local[3]]


@pytest.mark.parametrize("devices,reason", [
    (-1, r"a device count must be >= 1"),
    (0, r"a device count must be >= 1"),
    ("-2", r""),
    (1.5, r"a device count must be a whole number"),
    (2.0, r"a device count must be a whole number"),
    (True, r"a bool is not a device count"),
    ([], r"an empty list selects no device"),
    ([0, 0], r"repeated device index"),
    ([-1], r"device indices are >= 0"),
    ([0, "a"], r"only device indices \(ints\) or only jax.Device"),
    ([0.0], r"only device indices"),
    ("cpu", r""),
    (None, r""),
    (OmegaConf.create({"ids": [0]}), r"a mapping \(e.g. an omegaconf DictConfig\)"),
    ({"ids": [0]}, r"a mapping"),
])
def test_malformed_devices_raise_naming_the_value_and_the_forms(devices, reason, run_dir):
    with pytest.raises(ValueError) as info:
        jt.Trainer(devices=devices, max_steps=1, default_root_dir=run_dir, **QUIET)
    message = str(info.value)
    assert message.startswith(f"devices={devices!r}: ")
    assert re.search(reason, message)
    assert re.search(FORMS, message)
    assert not run_dir.exists()


def test_multi_node_devices_are_checked_before_joining_a_run():
    """MultiNodeStrategy takes "auto" or a per-process count only; a malformed
    value fails in the Trainer, before the strategy would start jax.distributed."""
    with pytest.raises(ValueError, match=r"devices=\[0, 0\]: repeated device index"):
        jt.Trainer(strategy="multi_node", devices=[0, 0], max_steps=1, **QUIET)
    with pytest.raises(ValueError, match=r"devices=\[0\]: MultiNodeStrategy takes 'auto' or a "
                                         r"positive int \(local devices per process\)"):
        jt.strategies.MultiNodeStrategy([0])


@pytest.mark.parametrize("strategy,devices,match", [
    ("auto", [4], r"devices=\[4\]: no device index 4: 4 device\(s\) are available to "
                  r"SingleDeviceStrategy \(indices 0..3\)"),
    ("pmap", [1, 7], r"devices=\[1, 7\]: no device index 7: 4 device\(s\) are available to "
                     r"PmapStrategy"),
    ("auto", 5, r"devices=5: this process has 4 cpu device\(s\) \(for PmapStrategy\); "
                r"choose 1..4$"),
    ("single", [0, 1], r"devices=\[0, 1\]: strategy 'single' uses exactly 1 device, got 2"),
])
def test_devices_beyond_the_machine_fail_before_compiling_or_writing(run_dir, monkeypatch,
                                                                     strategy, devices, match):
    compiled = []
    monkeypatch.setattr(jt.strategies.Strategy, "_compile",
                        lambda *a, **k: compiled.append(1))
    trainer = jt.Trainer(strategy=strategy, devices=devices, max_steps=1,
                         default_root_dir=run_dir, **QUIET)
    with pytest.raises(ValueError, match=match):
        trainer.fit(Regression())
    assert compiled == []
    assert not run_dir.exists()


# ------------------------------------------------------- on/off switches
@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize("value", ["flase", "wandb", "true", 100, 1, 0, None, 1.0])
def test_switches_take_real_bools_only(name, value, run_dir):
    expected = (r"expected True, False or 'auto'" if name in ("run_ahead", "compile_evaluation_ahead")
                else r"expected True or False")
    with pytest.raises(ValueError) as info:
        jt.Trainer(max_steps=1, default_root_dir=run_dir, **{**QUIET, name: value})
    assert str(info.value).startswith(f"{name}={value!r}: ")
    assert re.search(expected, str(info.value))
    assert not run_dir.exists()


def test_switch_values_that_are_accepted():
    trainer = jt.Trainer(max_steps=1, jit=np.bool_(False), run_ahead="auto", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         compile_evaluation_ahead=np.bool_(True))
    assert (trainer.jit, trainer.run_ahead, trainer.compile_evaluation_ahead) == (False, "auto", True)
    assert type(trainer.jit) is bool and type(trainer.compile_evaluation_ahead) is bool
    assert trainer.callbacks == []  # logger/checkpointing/progress bar off: none added
    on = jt.Trainer(max_steps=1, run_ahead=True, compile_evaluation_ahead=False)
    assert on.run_ahead is True
    assert sorted(type(c).__name__ for c in on.callbacks) == [
        "CSVLogger", "ModelCheckpoint", "RichProgressBar", "TensorBoardLogger"]


def test_logger_message_says_where_other_loggers_go():
    with pytest.raises(ValueError, match=r"logger='wandb': expected True or False .*pass other "
                                         r"loggers \(e.g. jaxtrainer.loggers.WandbLogger\) in callbacks"):
        jt.Trainer(max_steps=1, logger="wandb")


def test_default_root_dir_must_be_a_path():
    with pytest.raises(ValueError, match=r"default_root_dir=2024: expected a directory path"):
        jt.Trainer(max_steps=1, default_root_dir=2024)


@pytest.mark.parametrize("name", SWITCHES)
def test_population_trainer_checks_the_same_switches(name, run_dir):
    with pytest.raises(ValueError, match=rf"^{name}='flase': expected True"):
        PopulationTrainer(8, max_generations=1, default_root_dir=run_dir, **{**QUIET, name: "flase"})
    assert not run_dir.exists()


@pytest.mark.parametrize("kwargs,match", [
    (dict(max_generations=0), r"max_generations=0: expected a positive int"),
    (dict(max_generations=2, log_every_n_generations=0),
     r"log_every_n_generations=0: expected a positive int$"),
    (dict(max_generations=2, eval_every_n_generations="3"),
     r"eval_every_n_generations='3': expected a positive int or None"),
    (dict(max_generations=2, map_batch_size=True), r"map_batch_size=True: expected a positive int"),
    (dict(max_generations=2, member_map=["vmap"]), r"member_map=\['vmap'\]: choose one of"),
    (dict(max_generations=2, devices="1.5"), r"devices='1.5': expected 'auto'"),
])
def test_population_trainer_names_its_own_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PopulationTrainer(8, **{**QUIET, **kwargs})


def test_population_trainer_takes_device_indices():
    trainer = PopulationTrainer(8, strategy="shard_map", devices="1,3", max_generations=1, **QUIET)
    assert trainer.strategy.devices == [jax.local_devices()[1], jax.local_devices()[3]]
    assert (trainer.max_generations, trainer.log_every_n_steps) == (1, 10)


def test_population_trainer_takes_every_trainer_argument_not_counted_in_steps():
    """PopulationTrainer takes every Trainer argument, by keyword, with the Trainer's
    default, except the step counts it replaces with generations; its signature
    (what ``help`` and the recipes' ``trainer:`` keys read) lists them."""
    import inspect

    trainer = inspect.signature(jt.Trainer.__init__).parameters
    population = inspect.signature(PopulationTrainer.__init__).parameters
    in_steps = {"max_steps", "max_env_steps", "budget", "log_every_n_steps", "eval_every_n_steps"}
    assert set(trainer) - in_steps <= set(population)
    for name in set(trainer) - in_steps - {"self", "strategy", "devices"}:
        assert population[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert population[name].default == trainer[name].default, name
    with pytest.raises(TypeError, match="max_steps"):
        PopulationTrainer(8, max_generations=1, max_steps=3, **QUIET)


def test_population_trainer_names_an_unknown_keyword():
    """The Trainer's arguments are passed on, not copied: a keyword neither takes is a
    TypeError naming it (and the closest name), before anything starts."""
    with pytest.raises(TypeError, match=r"^PopulationTrainer got an unexpected keyword argument "
                                        r"'sede'; did you mean 'seed'\?$"):
        PopulationTrainer(8, max_generations=1, sede=3, **QUIET)
    with pytest.raises(TypeError, match=r"^PopulationTrainer counts generations: got "
                                        r"log_every_n_steps=5; use log_every_n_generations$"):
        PopulationTrainer(8, max_generations=1, log_every_n_steps=5, **QUIET)
    trainer = PopulationTrainer(8, max_generations=1, seed=3, sync_every_n_seconds=None, **QUIET)
    assert (trainer.seed, trainer.sync_every_n_seconds, trainer.jit) == (3, 0.0, True)


# ------------------------------------------------------------ recipes
def test_recipe_config_values_reach_the_trainer_as_plain_python():
    cfg = config.load(CONFIGS / "ppo.yaml", ["trainer.devices=[0,2]", "trainer.logger=false"])
    kwargs = config.trainer_kwargs(cfg)
    assert kwargs["devices"] == [0, 2] and type(kwargs["devices"]) is list
    assert kwargs["logger"] is False
    trainer = config.make_trainer(cfg, enable_progress_bar=False, enable_checkpointing=False)
    assert trainer.strategy.devices == [jax.local_devices()[0], jax.local_devices()[2]]
    es = config.load(CONFIGS / "openes.yaml", ["trainer.devices=[1]", "trainer.logger=false",
                                              "trainer.max_generations=2"])
    population = config.make_population_trainer(es, enable_progress_bar=False)
    assert isinstance(population, PopulationTrainer)
    assert population.strategy.devices == [jax.local_devices()[1]]
    assert population.max_generations == 2


@pytest.mark.parametrize("override,match", [
    ("trainer.logger=flase", r"^trainer\.logger='flase': expected True or False"),
    ("trainer.logger=wandb", r"^trainer\.logger='wandb': expected True or False"),
    ("trainer.enable_checkpointing=100", r"^trainer\.enable_checkpointing=100: expected True or False"),
    ("trainer.jit=enabled", r"^trainer\.jit='enabled': expected True or False"),
    ("trainer.run_ahead=maybe", r"^trainer\.run_ahead='maybe': expected True, False or 'auto'"),
    ("trainer.devices=1.5", r"^trainer\.devices=1.5: a device count must be a whole number"),
    ("trainer.devices=[0,0]", r"^trainer\.devices=\[0, 0\]: repeated device index"),
    ("trainer.devices={ids: [0]}", r"^trainer\.devices=\{'ids': \[0\]\}: a mapping"),
    ("trainer.devices=[]", r"^trainer\.devices=\[\]: an empty list selects no device"),
])
def test_ppo_recipe_rejects_bad_trainer_values_before_writing_anything(run_dir, override, match):
    with pytest.raises(ValueError, match=match):
        recipe("ppo").main([f"trainer.default_root_dir={run_dir}", "trainer.max_env_steps=512",
                            "algorithm.eval_episodes=1", override])  # tiny, should it run
    assert not run_dir.exists()  # no run directory, no file


@pytest.mark.parametrize("override,match", [
    ("trainer.logger=flase", r"^trainer\.logger='flase': expected True or False"),
    ("trainer.enable_checkpointing=100", r"^trainer\.enable_checkpointing=100: expected True or False"),
    ("trainer.devices=[-1]", r"^trainer\.devices=\[-1\]: device indices are >= 0"),
])
def test_population_recipe_rejects_bad_trainer_values_before_writing_anything(run_dir, override,
                                                                               match):
    with pytest.raises(ValueError, match=match):
        recipe("openes").main([f"trainer.default_root_dir={run_dir}", "trainer.max_generations=1",
                               override])
    assert not run_dir.exists()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ppo_recipe_with_devices_index_list_runs_on_that_one_device(tmp_path):
    """``python recipes/ppo.py trainer.devices=[0]`` (it used to end in
    AttributeError: 'int' object has no attribute 'device_kind')."""
    root = tmp_path / "runs"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # XLA_FLAGS: 4 fake devices (conftest)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "ppo.py"), "trainer.devices=[0]",
         f"trainer.default_root_dir={root}", "trainer.max_env_steps=256",
         "trainer.log_every_n_steps=2", "trainer.enable_progress_bar=false",
         "trainer.enable_checkpointing=false", "trainer.compile_evaluation_ahead=false",
         "algorithm.num_steps=32", "algorithm.eval_episodes=2", *SMALL_PPO],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = root / "version_0"
    assert proc.stdout.strip().splitlines()[-1].endswith(f"run_dir={run}")
    assert "SingleDeviceStrategy: 1 device(s) [cpu] [CpuDevice(id=0)]" in proc.stdout + proc.stderr
    hparams = {row["name"]: row["value"] for row in csv.DictReader(open(run / "hparams.csv"))}
    assert (hparams["trainer/devices"], hparams["trainer/num_devices"]) == ("[0]", "1")
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert int(rows[-1]["env_steps"]) == 256  # 2 updates x 4 envs x 32 steps


def test_add_callback_inserts_by_order_and_is_the_one_way_to_edit_the_list():
    """The search callbacks run where their orders say: OptunaSearch (80) before the
    recipes' final evaluation (90), SearchReport (95) after it, both before
    ModelCheckpoint (100); and no module edits a Trainer's list but add_callback."""
    import re
    from pathlib import Path

    from jaxtrainer.population.optuna_search import OptunaSearch
    from jaxtrainer.population.search_report import SearchReport
    from jaxtrainer.recipes._command import RunRecord

    t = jt.Trainer(max_steps=1, callbacks=[jt.CSVLogger()], enable_progress_bar=False)
    for cb in (SearchReport(), OptunaSearch(), RunRecord(None, "ppo")):
        t.add_callback(cb)
    names = [type(cb).__name__ for cb in t.callbacks]
    assert names[-4:] == ["OptunaSearch", "RunRecord", "SearchReport", "ModelCheckpoint"], names
    orders = [int(getattr(cb, "order", 0)) for cb in t.callbacks]
    assert orders == sorted(orders)
    with pytest.raises(TypeError, match="add_callback expects a jaxtrainer.Callback"):
        t.add_callback(object())
    package = Path(jt.__file__).parent
    editing = [str(p.relative_to(package)) for p in package.rglob("*.py")
               if re.search(r"\.callbacks\.(append|insert)\(", p.read_text())]
    assert editing == ["trainer/trainer.py"]


def test_more_devices_than_the_one_cpu_device_says_how_to_split_the_cpu():
    """``trainer.devices=3`` on a CPU JAX shows as one device named only a strategy
    the user never chose (``... available to PmapStrategy``)."""
    from jaxtrainer._arguments import pick_devices

    with pytest.raises(ValueError, match=r"^devices=3: this process has 1 cpu device\(s\) \(for "
                                         r"PmapStrategy\); choose 1..1 \(the CPU shows as one device: "
                                         r"XLA_FLAGS=--xla_force_host_platform_device_count=3 before "
                                         r"JAX starts splits it into 3\)$"):
        pick_devices(3, jax.devices("cpu")[:1], "PmapStrategy")


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_pmap_on_the_one_cpu_device_says_how_to_split_the_cpu(tmp_path):
    """``jaxtrainer fit ppo trainer.strategy=pmap`` on a CPU that JAX shows as one
    device ran on it without a word: the start says how to get more devices."""
    # XLA_FLAGS without a device count: the CPU shows one device (the tests' codegen flags only)
    env = {**os.environ, "XLA_FLAGS": OPTIMIZATION, "JAX_PLATFORMS": "cpu"}

    def fit(strategy):
        proc = subprocess.run(
            [sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo",
             f"trainer.strategy={strategy}", f"trainer.default_root_dir={tmp_path / 'runs'}",
             "trainer.max_env_steps=128", "trainer.enable_progress_bar=false",
             "trainer.enable_checkpointing=false", "trainer.compile_evaluation_ahead=false",
             "algorithm.num_steps=32", "algorithm.eval_episodes=2", *SMALL_PPO],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return (proc.stdout + proc.stderr).splitlines()

    assert ("jaxtrainer: PmapStrategy runs on the one CPU device JAX shows; "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N before the command splits "
            "the CPU into N devices") in fit("pmap")
    assert not any("device_count" in line for line in fit("single"))
