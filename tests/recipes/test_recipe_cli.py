"""The recipes as commands: loggers and callbacks from the config, ``--help`` and
``--print-config``, one-line config errors (exit status 2), the run's
``config.yaml`` and the final evaluation in the run's logs (issue 16)."""

from __future__ import annotations

import csv
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

import jaxtrainer as jt
from jaxtrainer.checkpoint import read_meta
from jaxtrainer.recipes import _components as components
from jaxtrainer.recipes import config
from tests._support import toys
from tests._support._xla import xla_flags

ROOT = pathlib.Path(__file__).parents[2]
CONFIGS = ROOT / "recipes" / "configs"
TINY_PPO = ["trainer.max_env_steps=null", "algorithm.num_envs=2", "algorithm.num_steps=8",
            "algorithm.num_minibatches=2", "algorithm.update_epochs=1", "algorithm.hidden_sizes=[8]",
            "algorithm.eval_episodes=2", "trainer.enable_progress_bar=false"]


def run_recipe(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python recipes/<name>.py ARGS`` on one CPU device, wandb without a network."""
    env = dict(os.environ, XLA_FLAGS=xla_flags(1), JAX_PLATFORMS="cpu", WANDB_SILENT="true")
    return subprocess.run([sys.executable, f"recipes/{name}.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def recipe(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def leaf_keys(node, prefix=""):
    if isinstance(node, dict) and node:
        return [k for key, v in node.items() for k in leaf_keys(v, f"{prefix}{key}.")]
    return [prefix[:-1]]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_ppo_command_line_checkpoints_wandb_config_and_final_evaluation(tmp_path, capsys):
    """Must-show 1 at a tiny budget (``recipes/ppo.py``'s ``main`` in this process, on
    one device): periodic checkpoints at steps 2, 4, 6, an offline wandb run, the
    resolved config in the run directory, and the evaluation at the last step (the
    final one: not repeated) in metrics.csv, TensorBoard and the last checkpoint,
    which it ranks."""
    from tensorboard.backend.event_processing import event_accumulator

    overrides = [
        *TINY_PPO,
        "trainer.strategy=single",
        "trainer.max_steps=6",
        "trainer.log_every_n_steps=1",
        f"trainer.default_root_dir={tmp_path}",
        "callbacks.checkpoint.every_n_steps=2",
        "callbacks.checkpoint.monitor=eval/episode_return",
        "callbacks.checkpoint.mode=max",
        "trainer.eval_every_n_steps=6",
        "logger.wandb.mode=offline",
        "logger.wandb.tags=[cli,test]",
    ]
    capsys.readouterr()
    recipe("ppo").main(overrides)
    run = tmp_path / "version_0"
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("eval/episode_return=") and last.endswith(f"run_dir={run}")
    printed = float(last.split()[0].split("=")[1])
    assert 8.0 <= printed <= 500.0  # CartPole returns

    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir()) == [2, 4, 6]
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb"))

    saved = yaml.safe_load((run / "config.yaml").read_text())
    expected = OmegaConf.to_container(config.load(CONFIGS / "ppo.yaml", overrides), resolve=True)
    assert saved == {"recipe": "ppo", **expected}
    assert saved["logger"]["wandb"] == {"mode": "offline", "tags": ["cli", "test"]}

    rows = list(csv.DictReader(open(run / "metrics.csv")))
    (evaluated,) = [r for r in rows if r["eval/episode_return"]]  # once, at step 6
    assert evaluated["step"] == "6" and evaluated["env_steps"] == "96"   # 6 x 2 envs x 8 steps
    assert round(float(evaluated["eval/episode_return"]), 2) == printed
    assert [r["step"] for r in rows if r["loss/total"]] == ["1", "2", "3", "4", "5", "6"]

    acc = event_accumulator.EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, round(e.value, 2)) for e in acc.Scalars("eval/episode_return")] == [(6, printed)]
    # the checkpoint at the last step is saved after the evaluation: ranked by it
    (state,) = [v for k, v in read_meta(run / "checkpoints" / "6")["callbacks"].items()
                if k.startswith("ModelCheckpoint")]
    assert state["scores"]["2"] is state["scores"]["4"] is None
    assert round(state["scores"]["6"], 2) == printed
    assert state["best_model_path"] == str(run / "checkpoints" / "6")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_help_lists_every_key_with_its_doc_and_a_typo_is_one_line_with_exit_2(tmp_path):
    helped = subprocess.Popen([sys.executable, "recipes/ppo.py", "--help"], cwd=ROOT,
                              env=dict(os.environ, JAX_PLATFORMS="cpu", COLUMNS="120"), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    typo = run_recipe("ppo", f"trainer.default_root_dir={tmp_path}",
                      "callbacks.checkpoint.every_n_step=100")
    stdout, stderr = helped.communicate(timeout=60)
    assert helped.returncode == 0, stderr
    lines = stdout.splitlines()

    def doc(key):
        return next(line for line in lines if line.startswith(f"  {key}=")).split(None, 1)[1]

    for key in leaf_keys(OmegaConf.to_container(OmegaConf.load(CONFIGS / "ppo.yaml"))):
        assert f"  {key}=" in stdout, key
        i = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {key}="))
        documented = len(lines[i].split(None, 1)) == 2 or lines[i + 1].startswith(" " * 10)
        assert documented or key.startswith("search.space"), f"{key} has no doc line"

    # docs from the classes: Trainer's Args, PPOConfig's Attributes, the callbacks' Args
    assert doc("trainer.max_steps") == "training steps (global updates) to run."
    assert doc("algorithm.gae_lambda") == "GAE's lambda."
    assert doc("callbacks.checkpoint.save_last").startswith("save when training ends")
    # every keyword argument of every logger and callback is listed, with its default
    for section, registry in components.SECTIONS.items():
        for name, cls in registry.items():
            for arg in config.accepted_keys(cls):
                assert f"  {section}.{name}.{arg}=" in stdout, (section, name, arg)
    assert "  callbacks.timer.duration=???" in stdout            # required: no default
    assert "logger.wandb.<key>=" in stdout  # named, not listed: listing would import wandb
    assert doc("logger.wandb.<key>").startswith("also wandb.init's keyword arguments")

    assert typo.returncode == 2, typo.stderr
    error = typo.stderr.strip().splitlines()
    assert len(error) == 1 and "Traceback" not in typo.stderr, typo.stderr
    assert error[0].startswith("recipes/ppo.py: error: unknown config key "
                               "'callbacks.checkpoint.every_n_step'")
    assert error[0].endswith("did you mean 'every_n_steps'?")
    assert not tmp_path.joinpath("version_0").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("override,message", [
    ("trainer.max_stepz=5", "unknown config key 'trainer.max_stepz': trainer has keys: "),
    ("trainr.seed=1", "did you mean 'trainer.seed'?"),
    ("env.name=CartPol-v1", "unknown environment env.name='CartPol-v1'; closest: CartPole-v1, "),
    ("env.name=CartPol-v1", "; `jaxtrainer envs` lists all "),
    ("algorithm.lr=abc", "error: algorithm.lr='abc': expected a non-negative number"),
    ("trainer.logger=flase", "error: trainer.logger='flase': expected True or False"),
    ("logger.wandb=maybe", "logger.wandb='maybe': expected true (a WandbLogger with its defaults), "
                         "false or null (none), or its keys"),
    ("logger.wandb.projct=x", "WandbLogger) has keys: project, name, save_dir, mode (and "
                              "wandb.init's); did you mean 'project'?"),
    ("callbacks.timer=true", "callbacks.timer (Timer) needs callbacks.timer.duration"),
    ("callbacks.checkpoint.every_n_steps=0",
     "callbacks.checkpoint: every_n_steps=0: expected a positive int or None"),
    ("callbacks.nan_guard.raise_eror=true", "did you mean 'raise_error'?"),
    ("logger.tensorboard.flush_secs=-1", "TensorBoardLogger: flush_secs=-1: expected a number > 0"),
    ("trainer.ckpt_path=last", "no checkpoint"),
    ("trainer.ckpt_path=bestt", "bestt: no such file or directory; did you mean 'best'?"),
    ("lr=1e-3", "unknown config key 'lr': <top level> has keys: "),
    ("lr=1e-3", "; did you mean 'algorithm.lr'?"),
    ("trainer.hidden_sizes=[8]", "; did you mean 'algorithm.hidden_sizes'?"),
    ("sweep.seed=2", "; did you mean 'sweep.seeds'?"),  # a typo in its section, not trainer.seed
    ("--lr=1e-3", "bad override '--lr=1e-3': overrides are section.key=value without dashes"),
    ("--lr=1e-3", "; did you mean algorithm.lr=1e-3?"),
])
def test_a_bad_config_is_one_line_on_stderr_and_exit_status_2(run_dir, capsys, override, message):
    with pytest.raises(SystemExit) as exit_:
        config.cli(recipe("ppo").main, [f"trainer.default_root_dir={run_dir}", *TINY_PPO,
                                        "trainer.strategy=single", "trainer.max_steps=2",
                                        override], prog="ppo.py")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ppo.py: error: ") and message in err, err
    assert not (run_dir / "version_0").exists()


@pytest.mark.timeout(60)
def test_a_key_close_to_nothing_in_its_section_suggests_nothing(run_dir, capsys):
    """``algorithm.bogus=1`` lists algorithm's keys and guesses nothing (it once asked
    "did you mean 'algorithm'?", the section the key is already in)."""
    with pytest.raises(SystemExit):
        config.cli(recipe("ppo").main, [f"trainer.default_root_dir={run_dir}", "algorithm.bogus=1"],
                   prog="ppo.py")
    err = capsys.readouterr().err
    assert "unknown config key 'algorithm.bogus': algorithm has keys: " in err, err
    assert "did you mean" not in err and err.rstrip().endswith("update_epochs, vf_coef"), err


@pytest.mark.timeout(60)
def test_help_gives_whole_sentences_wrapped_to_80_columns(monkeypatch, capsys):
    """No description is cut: each wraps under its column at the terminal's width."""
    from jaxtrainer.recipes._usage import doc_entries, one_sentence

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_:
        recipe("ppo").main(["--help"])
    assert exit_.value.code == 0
    lines = capsys.readouterr().out.splitlines()

    def doc(key):  # the key's line and its continuation lines (indented to the doc column)
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  {key}="))
        words = lines[at].split(None, 1)[1:] if len(lines[at]) > 42 else []
        for line in lines[at + 1:]:
            if not line.startswith(" " * 42):
                break
            words.append(line.strip())
        return " ".join(words)

    strategy = one_sentence(doc_entries(jt.Trainer)["strategy"])
    assert doc("trainer.strategy") == strategy and strategy.endswith("or a Strategy.")
    assert doc("trainer.max_env_steps").endswith("the same under any device count.")
    assert doc("callbacks.lr_monitor.names") == "hyperparameter names to log; None logs every scalar one."
    assert not [ln for ln in lines if ln.endswith("...") and not ln.lstrip().startswith("[")]
    key_lines = [ln for ln in lines if re.match(r"^  [a-z_]+\.", ln) and len(ln) > 80]
    assert all(" " not in ln.strip() for ln in key_lines), key_lines  # only a long key=value alone
    assert doc("trainer.resume_overrides").startswith("with trainer.ckpt_path, what to do")
    sweep = next(i for i, line in enumerate(lines) if line.startswith("sweep: "))
    assert "jaxtrainer.population.Sweep" in " ".join(lines[sweep:sweep + 2])
    assert doc("sweep.seeds").startswith("S seeds trainer.seed .. trainer.seed + S - 1")
    assert doc("sweep.vectorize").startswith("true batches each device's members with vmap")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("key", ["trainer.default_root_dir", "logger.tensorboard.save_dir",
                                 "logger.csv.save_dir"])
def test_a_path_that_is_an_existing_file_is_one_line_before_any_run_directory(run_dir, capsys,
                                                                              key):
    run_dir.mkdir(parents=True, exist_ok=True)
    afile = run_dir / "afile.txt"
    afile.write_text("keep me")
    bad = str(afile / "sub") if key.startswith("logger.csv") else str(afile)
    root = [] if key == "trainer.default_root_dir" else [f"trainer.default_root_dir={run_dir}"]
    with pytest.raises(SystemExit) as exit_:
        config.cli(recipe("ppo").main, [*root, *TINY_PPO, "trainer.strategy=single",
                                        "trainer.max_steps=2", f"{key}={bad}"], prog="ppo.py")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    where = "is an existing file" if bad == str(afile) else f"is under {str(afile)!r}, which is"
    assert err.count("\n") == 1 and err.startswith("ppo.py: error: ") and repr(bad) in err, err
    assert where in err and "expected a directory" in err, err
    assert sorted(p.name for p in run_dir.iterdir()) == ["afile.txt"]  # no run directory
    assert afile.read_text() == "keep me"


@pytest.mark.timeout(60)
def test_errors_once_training_started_keep_their_traceback(run_dir, capsys):
    class Boom(toys.EnvCounter):
        def init_state(self, key):
            raise ValueError("boom in init_state")

    def main(argv):
        run = config.load_run(CONFIGS / "ppo.yaml", [f"trainer.default_root_dir={run_dir}",
                                                     "trainer.max_steps=2", *argv])
        return config.fit_and_report(config.make_trainer(run.config), Boom(), run)

    with pytest.raises(ValueError, match="boom in init_state"):   # started: not one line
        config.cli(main, ["trainer.enable_progress_bar=false"])
    assert not (run_dir / "version_0").exists()  # no step trained: its run directory is gone

    def uneven(argv):  # sizes checked against the devices in fit, before training starts
        run = config.load_run(CONFIGS / "ppo.yaml", argv)
        return config.fit_and_report(config.make_trainer(run.config), toys.Regression(batch_size=6), run)

    with pytest.raises(SystemExit) as exit_:
        config.cli(uneven, [f"trainer.default_root_dir={run_dir / 'b'}", "trainer.strategy=pmap",
                            "trainer.max_steps=2"], prog="x")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "x: error: batch_size=6 does not split over 4 devices\n"
    assert not (run_dir / "b").exists()


def tiny(run_dir, *overrides):
    return tiny_run(run_dir, *overrides).config


def tiny_run(run_dir, *overrides):
    return config.load_run(CONFIGS / "ppo.yaml", [
        f"trainer.default_root_dir={run_dir}", "trainer.strategy=single",
        "trainer.max_env_steps=null", "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false", *overrides])


@pytest.mark.timeout(60)
def test_config_yaml_is_kept_on_resume_and_each_fit_logs_its_final_evaluation(run_dir, capsys):
    run1 = tiny_run(run_dir, "trainer.max_steps=2")
    cfg = run1.config
    first = config.fit_and_report(config.make_trainer(cfg), toys.EnvCounter(), run1)
    run = run_dir / "version_0"
    written = (run / "config.yaml").read_text()
    assert yaml.safe_load(written) == {"recipe": "ppo",
                                       **OmegaConf.to_container(cfg, resolve=True)}
    run2 = tiny_run(run_dir, "trainer.max_steps=4", "trainer.ckpt_path=last")
    second = config.fit_and_report(config.make_trainer(run2.config), toys.EnvCounter(), run2)
    # the run's original config with the budget it was last given (the next resume goes on to it)
    assert yaml.safe_load((run / "config.yaml").read_text()) == {
        **yaml.safe_load(written), "trainer": {**yaml.safe_load(written)["trainer"], "max_steps": 4}}
    assert not (run_dir / "version_1").exists()
    # FixedLengthEnv: every evaluation episode returns 10; one evaluation row per fit end
    assert (first["step"], first["eval/episode_return"]) == (2, 10.0)
    assert (second["step"], second["eval/episode_return"]) == (4, 10.0)
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert [(r["step"], r["eval/episode_return"]) for r in rows if r["eval/episode_return"]] \
        == [("2", "10.0"), ("4", "10.0")]
    # eval_every_n_steps dividing the last step: that evaluation is the final one (not twice)
    run3 = tiny_run(run_dir / "c", "trainer.max_steps=2", "trainer.eval_every_n_steps=1")
    config.fit_and_report(config.make_trainer(run3.config), toys.EnvCounter(), run3)
    rows = list(csv.DictReader(open(run_dir / "c" / "version_0" / "metrics.csv")))
    assert [r["step"] for r in rows if r["eval/episode_return"]] == ["1", "2"]


@pytest.mark.timeout(30)
def test_print_config_is_the_resolved_yaml_and_a_valid_config_file(tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text("algorithm:\n  lr: 0.125\ncallbacks:\n  nan_guard: true\n")
    with pytest.raises(SystemExit) as exit_:
        config.config_arg(["--print-config", "--config", str(mine), "trainer.seed=3",
                           "logger.wandb.project=me"], CONFIGS / "ppo.yaml")
    assert exit_.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["recipe"] == "ppo" and printed["trainer"]["seed"] == 3
    assert printed["algorithm"]["lr"] == 0.125 and printed["callbacks"]["nan_guard"] is True
    assert printed["logger"]["wandb"] == {"project": "me"}
    # the printed file (as a run's config.yaml) is a --config file of its recipe, not another's
    again = tmp_path / "config.yaml"
    again.write_text(yaml.safe_dump(printed))
    run = config.load_run(again, [], defaults=CONFIGS / "ppo.yaml")
    assert OmegaConf.to_container(run.config) == {k: v for k, v in printed.items() if k != "recipe"}
    assert run.recipe == "ppo"
    with pytest.raises(ValueError, match=r"config of the 'ppo' recipe .* run jaxtrainer fit ppo --config"):
        config.load(again, [], defaults=CONFIGS / "a2c.yaml")


@pytest.mark.timeout(30)
def test_loggers_and_callbacks_built_from_config_and_switches(run_dir):
    def kinds(*overrides):
        t = config.make_trainer(tiny(run_dir, "trainer.max_steps=1", *overrides))
        return {type(c).__name__: c for c in t.callbacks}

    default = kinds()   # as before: CSV + TensorBoard, a checkpoint (now also every 10 min)
    assert {"CSVLogger", "TensorBoardLogger", "ModelCheckpoint"} <= set(default)
    assert default["ModelCheckpoint"].every_n_seconds == 600 and "WandbLogger" not in default
    assert not {"CSVLogger", "TensorBoardLogger"} & set(kinds("trainer.logger=false",
                                                              "logger.wandb=true"))
    assert "ModelCheckpoint" not in kinds("callbacks.checkpoint=false")
    assert "ModelCheckpoint" not in kinds("trainer.enable_checkpointing=false")
    only_csv = kinds("logger.tensorboard=false")
    assert "CSVLogger" in only_csv and "TensorBoardLogger" not in only_csv
    # true over a mapping keeps its keys; guards and timers from keys
    assert kinds("callbacks.checkpoint=true")["ModelCheckpoint"].every_n_seconds == 600
    built = kinds("callbacks.early_stopping.monitor=eval/episode_return",
                  "callbacks.early_stopping.mode=max", "callbacks.nan_guard=true",
                  "callbacks.timer.duration=00:00:01:00", "logger.wandb.group=g")
    assert (built["EarlyStopping"].monitor, built["EarlyStopping"].mode) == ("eval/episode_return",
                                                                            "max")
    assert built["Timer"].duration == 60.0 and "NaNGuard" in built
    assert built["WandbLogger"].init_kwargs == {"group": "g"}


def test_callback_keys_are_read_from_the_signatures(run_dir, monkeypatch):
    """No list of argument names to keep in step: a new argument of a callback
    is a config key at once, and a key that is not one is refused."""
    class Wider(jt.callbacks.Timer):
        def __init__(self, duration: float | str = 1.0, *, grace: int = 0) -> None:
            super().__init__(duration)
            self.grace = grace

    monkeypatch.setitem(components.CALLBACKS, "timer", Wider)
    assert components.entry_keys(Wider) == ("duration", "grace")
    t = config.make_trainer(tiny(run_dir, "trainer.max_steps=1", "callbacks.timer.grace=3"))
    assert [c.grace for c in t.callbacks if isinstance(c, Wider)] == [3]
    for cls in [*components.LOGGERS.values(), *components.CALLBACKS.values()]:
        params = inspect.signature(cls.__init__).parameters.values()
        assert components.own_keys(cls) == tuple(
            p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD,
                                                                          p.VAR_POSITIONAL))
    with pytest.raises(ValueError, match=r"'callbacks.checkpoint.every': .*ModelCheckpoint\) has "
                                         r"keys: dirpath, every_n_steps"):
        tiny(run_dir, "callbacks.checkpoint.every=1")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_resume_takes_the_saved_config_and_refuses_or_applies_changed_settings(run_dir, capsys):
    """trainer.ckpt_path=last alone resumes with the run's saved settings; a changed
    algorithm.lr is refused (one line naming it, exit 2) unless
    trainer.resume_overrides=apply, which sets it in the state too and prints each change
    `key: saved -> given`."""
    ppo = recipe("ppo")
    start = [f"trainer.default_root_dir={run_dir}", "trainer.strategy=single", *TINY_PPO,
             "trainer.max_steps=2", "algorithm.ent_coef=0.02", "algorithm.anneal_lr=false"]
    ppo.main(start)
    run = run_dir / "version_0"
    written = (run / "config.yaml").read_text()
    base = [f"trainer.default_root_dir={run_dir}", "trainer.ckpt_path=last"]
    cfg = config.load(CONFIGS / "ppo.yaml", [*base, "trainer.max_steps=3"])
    assert cfg.algorithm.ent_coef == 0.02 and cfg.algorithm.num_envs == 2  # the saved settings
    assert cfg.trainer.max_steps == 3 and not cfg.algorithm.anneal_lr
    capsys.readouterr()
    config.load(CONFIGS / "ppo.yaml", [f"trainer.default_root_dir={os.path.relpath(run_dir)}",
                                       "trainer.ckpt_path=last", "trainer.max_steps=3"])
    assert "default_root_dir" not in capsys.readouterr().err  # one directory, spelled two ways
    with pytest.raises(SystemExit) as exit_:
        config.cli(ppo.main, [*base, "trainer.max_steps=3", "algorithm.lr=0.01"], prog="ppo.py")
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    # refused: the one error line, not "resume: ... -> 0.01" lines first as if applied
    assert err.count("\n") == 1 and err.startswith("ppo.py: error: resuming the run of ")
    assert "(algorithm.lr: 0.00025 -> 0.01): pass trainer.resume_overrides=apply" in err
    assert (run / "config.yaml").read_text() == written and not (run / "checkpoints" / "3").exists()

    result = ppo.main([*base, "trainer.max_steps=3", "algorithm.lr=0.01",
                       "trainer.resume_overrides=apply"])
    err = capsys.readouterr().err
    assert "jaxtrainer: resume: trainer.max_steps: 2 -> 3\n" in err
    assert "jaxtrainer: resume: algorithm.lr: 0.00025 -> 0.01\n" in err
    assert result["step"] == 3
    state = read_meta(run / "checkpoints" / "3")
    assert state["global_step"] == 3
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["algorithm"]["lr"] == 0.01 and saved["algorithm"]["ent_coef"] == 0.02
    trainer = jt.Trainer(strategy="single", max_steps=3, logger=False,
                         enable_progress_bar=False, enable_checkpointing=False)
    module = recipe_module(run)
    trainer.evaluate(module, ckpt_path=str(run / "checkpoints" / "3"))
    assert float(trainer.state.hyperparams["lr"]) == pytest.approx(0.01)  # applied in the state
    # "rerun a run's exact config" starts a new run where it is told, and leaves this one alone
    assert saved["trainer"]["ckpt_path"] is None
    kept = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    again = ppo.main(["--config", str(run / "config.yaml"),
                      f"trainer.default_root_dir={run_dir / 'again'}"])
    assert again["step"] == 3 and (run_dir / "again" / "version_0" / "checkpoints" / "3").is_dir()
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == kept
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == ["2", "3"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_resume_with_another_seed_is_refused_even_with_apply(run_dir, capsys):
    """``trainer.seed=7 trainer.ckpt_path=last`` on a run of seed 0 printed
    ``resume: trainer.seed: 0 -> 7`` and trained on with seed 0's keys."""
    ppo = recipe("ppo")
    start = [f"trainer.default_root_dir={run_dir}", "trainer.strategy=single", *TINY_PPO,
             "trainer.max_steps=2"]
    ppo.main(start)
    run = run_dir / "version_0"
    written = (run / "config.yaml").read_text()
    for extra in ([], ["trainer.resume_overrides=apply"]):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            config.cli(ppo.main, [f"trainer.default_root_dir={run_dir}", "trainer.max_steps=4",
                                  "trainer.seed=7", "trainer.ckpt_path=last", *extra], prog="ppo.py")
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1, err
        assert "with trainer.seed=7: the run was started with trainer.seed=0, and its random " \
               "keys, in the checkpoint, go on; another seed is a new run" in err
    assert (run / "config.yaml").read_text() == written and not (run / "checkpoints" / "4").exists()


def recipe_module(run):
    from jaxtrainer.inference import saved_run
    from jaxtrainer.recipes._modules import build_module

    name, cfg = saved_run.load_config(run)
    return build_module(name, cfg)


_OPENED: list[str] = []  # files opened for reading while a test below listens
_LISTENING: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    if _LISTENING and event == "open" and isinstance(args[0], str | bytes | os.PathLike) \
            and "r" in str(args[1] or "r") and "w" not in str(args[1] or ""):
        _OPENED.append(os.fsdecode(args[0]))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_resume_resolves_the_checkpoint_once_and_reads_config_yaml_once(tmp_path, monkeypatch):
    """``jaxtrainer fit ppo trainer.ckpt_path=last``: the recipes look up the
    checkpoint and the run's saved config once and hand both on (the Trainer
    restores the step directory they found; the run record compares against
    the config they read)."""
    from jaxtrainer.commands import fit
    from jaxtrainer.trainer._connectors import checkpoint_connector

    base = [*TINY_PPO, "trainer.strategy=single", f"trainer.default_root_dir={tmp_path}"]
    fit.run([*base, "trainer.max_steps=2"], "ppo")
    searched = []
    real = checkpoint_connector.resolve

    def counted(*args, **kwargs):
        searched.append(args[:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint_connector, "resolve", counted)
    sys.addaudithook(_audit)
    _OPENED.clear()
    _LISTENING.append(True)
    try:
        result = fit.run([*base, "trainer.max_steps=4", "trainer.ckpt_path=last"], "ppo")
    finally:
        _LISTENING.clear()
    assert result["step"] == 4
    assert searched == [(str(tmp_path), "last")]
    reads = [p for p in _OPENED if os.path.basename(p) == "config.yaml"]
    assert reads == [str(tmp_path / "version_0" / "config.yaml")]
    assert not (tmp_path / "version_1").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["a2c", "cem_rl", "crossq", "ddpg", "dqn", "erl", "impala",
                                  "pbt_ppo", "pbt_sac", "ppo", "pqn", "rainbow", "sac", "td3"])
def test_a_discount_above_one_is_refused_before_anything_runs(run_dir, name):
    """``algorithm.gamma=1.5`` (a discount, in [0, 1]) was accepted and trained."""
    from jaxtrainer.commands import fit

    with pytest.raises(ValueError, match=r"^algorithm\.gamma=1\.5: expected a number in \[0, 1\]$"):
        fit.run([f"trainer.default_root_dir={run_dir}", "algorithm.gamma=1.5"], name)
    assert not (run_dir / "version_0").exists()


@pytest.mark.timeout(120)
def test_a_bad_value_names_the_key_typed_whatever_the_module_takes(run_dir, capsys):
    """A recipe whose module takes keyword arguments (map_elites) named the bare keyword
    (``iso_sigma='fast'``) and one built from a config class (ppo) its field; each names
    the key typed on the command line, whatever section holds it. Python users get what
    they typed: the config class's field, or the keyword."""
    from jaxtrainer.algorithms.ppo import PPOConfig
    from jaxtrainer.commands import _cli as cli
    from jaxtrainer.population import MAPElites

    root = f"trainer.default_root_dir={run_dir}"
    for argv, error in [
        (["map_elites", "algorithm.iso_sigma=fast"],
         "algorithm.iso_sigma='fast': expected a non-negative number"),
        (["map_elites", "env.num_dims=fast"], "env.num_dims='fast': expected a positive int"),
        (["map_elites", "algorithm.grid_shape=[10,0]"],
         "algorithm.grid_shape[1]=0: expected a positive int"),
        (["ppo", "algorithm.lr=fast"], "algorithm.lr='fast': expected a non-negative number"),
        (["crossq", "network.torso=cnn"], "network.torso='cnn': CrossQ's networks read the "
                                          "flattened observation (torso mlp) only"),
        # an ES's and PBT's numbers: they said "could not convert string to float: 'fast'"
        # and "'<' not supported between instances of 'float' and 'str'"
        (["openes", "algorithm.std=fast"], "algorithm.std='fast': expected a number > 0.0"),
        (["pbt_ppo", "pbt.truncation_fraction=fast"],
         "pbt.truncation_fraction='fast': expected a number in (0.0, 0.5]"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            cli.main(["fit", *argv, root])
        assert exit_.value.code == 2
        assert capsys.readouterr().err == f"jaxtrainer fit {argv[0]}: error: {error}\n"
    assert not (run_dir / "version_0").exists()
    with pytest.raises(ValueError, match=r"^PPOConfig\.lr='abc': expected a non-negative number$"):
        PPOConfig(env="CartPole-v1", lr="abc")
    with pytest.raises(ValueError, match=r"^iso_sigma='fast': expected a non-negative number$"):
        MAPElites("arm", iso_sigma="fast")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_checkpoint_path_of_another_recipes_run_is_refused_naming_that_recipe(run_dir, capsys):
    """``jaxtrainer fit ppo trainer.ckpt_path=runs/sac/version_2/checkpoints/5000`` merged
    SAC's saved config into PPO's and failed on ``PPOConfig.__init__() got an unexpected
    keyword argument 'train_frequency'``; it says whose run it is."""
    base = [f"trainer.default_root_dir={run_dir}", *TINY_PPO, "trainer.strategy=single",
            "trainer.max_steps=2"]
    recipe("ppo").main(base)
    run = run_dir / "version_0"
    sac = config.load(ROOT / "src" / "jaxtrainer" / "recipes" / "configs" / "sac.yaml")
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.merge({"recipe": "sac"}, sac)))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        config.cli(recipe("ppo").main, [*base, f"trainer.ckpt_path={run}/checkpoints/2"],
                   prog="ppo.py")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "this command cannot resume that run: it is a run of the " \
        "'sac' recipe (algorithm keys this command does not have: " in err, err


@pytest.mark.timeout(30)
def test_the_guides_early_stopping_line_also_ranks_its_checkpoints(run_dir):
    """A new user ran the command-line guide's early-stopping line: CartPole reached 500 at
    the first evaluation, the run stopped three evaluations later at 361.84, and the only
    checkpoint was that last state. The guide's line, as written, ranks a checkpoint at
    every evaluation by the same metric, so ``--ckpt best`` has the best state."""
    text = (ROOT / "docs" / "guides" / "command-line.md").read_text()
    line = re.search(r"python recipes/ppo.py (callbacks.early_stopping.*?)\n(?!    )", text, re.S)
    overrides = line.group(1).replace("\\\n", " ").split()
    t = config.make_trainer(tiny(run_dir, "trainer.max_steps=1", *overrides))
    built = {type(c).__name__: c for c in t.callbacks}
    stop, keep = built["EarlyStopping"], built["ModelCheckpoint"]
    assert (stop.monitor, stop.mode) == (keep.monitor, keep.mode) == ("eval/episode_return", "max")
    assert keep.every_n_steps == t.eval_every_n_steps == 20
