"""The recipe helpers of jaxtrainer.recipes.config: section, make_env, fit_and_report,
and the trainer keys read from the Trainer's signature."""

from __future__ import annotations

import inspect
import pathlib

import jax.numpy as jnp
import pytest
from omegaconf import OmegaConf

import jaxtrainer as jt
from jaxtrainer import envs
from jaxtrainer.recipes import config
from tests._support import toys

CONFIGS = pathlib.Path(__file__).parents[2] / "recipes" / "configs"
ES_CONFIG_FILES = ("ars", "simple_es", "sep_cma_es")
"""``--config`` files of ``recipes/openes.py`` named after their algorithm (not ``openes_*``)."""

PPO_CONFIG_FILES = ("ippo", "mappo")
"""``--config`` files of ``recipes/ppo.py`` named after their algorithm (multi-agent PPO)."""


def quiet(run_dir, *overrides):
    """The run of recipes/configs/ppo.yaml with a tiny single-device budget under ``run_dir``."""
    return config.load_run(CONFIGS / "ppo.yaml", [
        f"trainer.default_root_dir={run_dir}", "trainer.strategy=single",
        "trainer.max_env_steps=null", "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false", "trainer.logger=false", *overrides])


@pytest.mark.timeout(20)
def test_section_is_a_plain_resolved_dict_and_names_the_sections_it_has():
    cfg = OmegaConf.create({"trainer": {"seed": 3}, "algorithm": {"lr": 0.5, "base_lr": "${.lr}",
                                                                  "sizes": [8, 8]},
                            "note": "not a section"})
    algo = config.section(cfg, "algorithm")
    assert algo == {"lr": 0.5, "base_lr": 0.5, "sizes": [8, 8]}
    assert type(algo) is dict and type(algo["sizes"]) is list
    algo["lr"] = 1.0  # a copy: the config is unchanged
    assert cfg.algorithm.lr == 0.5
    with pytest.raises(ValueError, match=r"no section 'env'; its sections: algorithm, trainer$"):
        config.section(cfg, "env")
    with pytest.raises(ValueError, match=r"no section 'note'"):
        config.section(cfg, "note")


@pytest.mark.timeout(20)
def test_make_env_builds_the_gymnax_env_of_the_config():
    cartpole = config.make_env(config.load(CONFIGS / "ppo.yaml"))
    assert isinstance(cartpole, envs.GymnaxEnv)
    assert (cartpole.name, cartpole.observation_shape, cartpole.discrete, cartpole.num_actions) \
        == ("CartPole-v1", (4,), True, 2)
    assert cartpole.max_episode_steps == 500
    pendulum = config.make_env(config.load(CONFIGS / "sac.yaml"))
    assert (pendulum.name, pendulum.observation_shape, pendulum.discrete, pendulum.action_size) \
        == ("Pendulum-v1", (3,), False, 1)
    assert pendulum.max_episode_steps == 200
    acrobot = config.make_env(config.load(CONFIGS / "td3.yaml", ["env.name=Acrobot-v1"]))
    assert (acrobot.name, acrobot.observation_shape, acrobot.num_actions) == ("Acrobot-v1", (6,), 3)


@pytest.mark.timeout(20)
def test_make_env_passes_the_other_env_keys_to_envs_make(monkeypatch):
    seen = []
    monkeypatch.setattr(envs, "make", lambda name, **kw: seen.append((name, kw)) or "env")
    cfg = config.load(CONFIGS / "sac_brax.yaml", ["env.episode_length=7", "env.backend=spring"])
    assert config.make_env(cfg) == "env"
    assert seen == [("brax/ant", {"episode_length": 7, "backend": "spring"})]


@pytest.mark.timeout(20)
def test_make_env_errors_name_the_choices():
    with pytest.raises(ValueError, match=r"CartPole-v9.*CartPole-v1"):
        config.make_env(config.load(CONFIGS / "ppo.yaml", ["env.name=CartPole-v9"]))
    with pytest.raises(ValueError, match=r"section 'env' has no name: set env.name"):
        config.make_env(OmegaConf.create({"env": {"episode_length": 5}}))
    with pytest.raises(ValueError, match=r"no section 'env'; its sections: trainer"):
        config.make_env(OmegaConf.create({"trainer": {"seed": 0}}))


@pytest.mark.timeout(20)
def test_fit_and_report_trains_evaluates_and_prints_the_recipe_line(run_dir, capsys):
    run = quiet(run_dir, "trainer.max_steps=2")
    trainer = config.make_trainer(run.config)
    result = config.fit_and_report(trainer, toys.EnvCounter(), run)
    assert trainer.global_step == 2 and trainer.env_steps == 24   # 2 x 4 envs x 3 steps
    # FixedLengthEnv: every evaluation episode lasts 10 steps with reward 1
    assert result["eval/episode_return"] == 10.0 and result["eval/episode_length"] == 10.0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"eval/episode_return=10.00 run_dir={run_dir / 'version_0'}"
    assert (run_dir / "version_0" / "checkpoints" / "2").is_dir()


class NearZeroReturn(toys.EnvCounter):
    def evaluation_step(self, state, key):
        return {**super().evaluation_step(state, key), "eval/episode_return": jnp.float32(-0.001)}


@pytest.mark.timeout(20)
def test_a_return_that_rounds_to_zero_prints_without_a_sign(run_dir, capsys):
    run = quiet(run_dir, "trainer.max_steps=1", "trainer.enable_checkpointing=false")
    result = config.fit_and_report(config.make_trainer(run.config), NearZeroReturn(), run)
    assert result["eval/episode_return"] == pytest.approx(-0.001)
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        f"eval/episode_return=0.00 run_dir={run_dir / 'version_0'}"
    from jaxtrainer._formatting import fixed
    assert [fixed(v) for v in (-0.004, -0.005001, 0.0, -0.0, float("nan"))] == \
        ["0.00", "-0.01", "0.00", "0.00", "nan"]


@pytest.mark.timeout(20)
def test_fit_and_report_resumes_from_the_configs_ckpt_path(run_dir, capsys):
    first = config.make_trainer(quiet(run_dir, "trainer.max_steps=2").config)
    first.fit(toys.EnvCounter())
    run = quiet(run_dir, "trainer.max_steps=4", "trainer.ckpt_path=last")
    trainer = config.make_trainer(run.config)
    config.fit_and_report(trainer, toys.EnvCounter(), run)
    assert (trainer.global_step, trainer.env_steps) == (4, 48)  # 2 restored + 2 trained
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        f"eval/episode_return=10.00 run_dir={run_dir / 'version_0'}"   # the resumed run's dir
    assert not (run_dir / "version_1").exists()


@pytest.mark.timeout(20)
def test_fit_and_report_without_an_episode_return_names_the_metrics(run_dir, capsys):
    run = quiet(run_dir, "trainer.max_steps=1", "trainer.enable_checkpointing=false")
    with pytest.raises(KeyError, match=r"Regression has no eval/episode_return; its metrics: "
                                       r"env_steps, eval/mse, step.$"):  # KeyError quotes it
        config.fit_and_report(config.make_trainer(run.config), toys.Regression(), run)
    assert "eval/episode_return=" not in capsys.readouterr().out


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_every_trainer_argument_is_a_key_of_each_recipe_config(name):
    """Every Trainer argument can be set as ``trainer.<name>`` on the command line
    of every recipe (plus ``ckpt_path``, the argument of fit). A file that is not
    a recipe's own (``ppo_brax.yaml``) is a ``--config`` file: it is checked
    merged over the YAML of the recipe its name starts with (``openes.yaml`` for
    :data:`ES_CONFIG_FILES`, ``ppo.yaml`` for :data:`PPO_CONFIG_FILES`), as the
    recipe loads it."""
    import inspect

    from jaxtrainer.population import PopulationTrainer

    recipes = sorted((p.stem for p in CONFIGS.parent.glob("*.py")), key=len, reverse=True)
    recipe = "openes" if name in ES_CONFIG_FILES else "ppo" if name in PPO_CONFIG_FILES else next(
        r for r in recipes if name == r or name.startswith(r + "_"))
    cfg = config.load(CONFIGS / f"{name}.yaml", defaults=CONFIGS / f"{recipe}.yaml")
    keys = set(cfg.trainer)
    cls = PopulationTrainer if "max_generations" in keys else jt.Trainer
    wanted = set(inspect.signature(cls.__init__).parameters) - set(config._NOT_FROM_YAML)
    if cls is PopulationTrainer:
        wanted -= {"population_size", "member_map", "map_batch_size"}  # set under es:/algorithm:
    assert wanted - keys == set(), f"{name}.yaml lacks trainer keys {sorted(wanted - keys)}"
    assert "ckpt_path" in keys


@pytest.mark.parametrize("cls", [jt.Trainer, jt.PopulationTrainer])
def test_every_trainer_keyword_argument_but_callbacks_is_a_config_key(cls, monkeypatch):
    """The trainer keys are read from the signature, so they cannot drift from it:
    every keyword argument but ``callbacks`` reaches the trainer from ``trainer:``
    (``ckpt_path`` is the extra key, for fit), and ``callbacks`` is refused."""
    names = [n for n in inspect.signature(cls.__init__).parameters if n not in config._NOT_FROM_YAML]
    cfg = OmegaConf.create({"trainer": {**{n: f"<{n}>" for n in names}, "ckpt_path": "last"}})
    received = {}

    class Recorder:
        def __init__(self, **kwargs):
            received.update(kwargs)

    monkeypatch.setattr(config, cls.__name__, Recorder)
    build = config.make_trainer if cls is jt.Trainer else config.make_population_trainer
    build(cfg)
    assert received == {**{n: f"<{n}>" for n in names}, "resume_hint": config._RESUME_HINT}
    assert config.ckpt_path(cfg) == "last"
    cfg.trainer.callbacks = []
    with pytest.raises(ValueError, match=rf"unknown trainer keys \['callbacks'\]; {cls.__name__} "):
        build(cfg)


def test_a_new_trainer_argument_is_a_config_key_with_no_list_to_update():
    class Wider(jt.Trainer):
        def __init__(self, *args, new_knob: int = 1, callbacks=None, **kwargs):
            super().__init__(*args, callbacks=callbacks, **kwargs)

    assert config.accepted_keys(Wider) == ("new_knob",)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ppo_recipe_takes_another_yaml_with_config(run_dir, capsys, tmp_path):
    """Every recipe accepts ``--config FILE`` first (README), here a file holding
    only what differs from ppo.yaml (budget and env; merged over the recipe's
    defaults); overrides still apply after it."""
    import importlib.util

    path = tmp_path / "mine.yaml"
    path.write_text("trainer:\n  max_env_steps: 1024\nenv:\n  name: Acrobot-v1\n")
    spec = importlib.util.spec_from_file_location(
        "ppo_recipe", pathlib.Path(__file__).parents[2] / "recipes" / "ppo.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    recipe.main(["--config", str(path), f"trainer.default_root_dir={run_dir}",
                 "trainer.strategy=single", "trainer.enable_progress_bar=false",
                 "algorithm.eval_episodes=2"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("eval/episode_return=-") and last.endswith("version_0")  # Acrobot: < 0
    hparams = (run_dir / "version_0" / "hparams.csv").read_text()
    assert "Acrobot" in hparams


@pytest.mark.timeout(20)
def test_a_config_file_is_checked_against_the_recipes_defaults(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("algorithm:\n  lrr: 0.1\n")
    with pytest.raises(ValueError, match=r"typo.yaml: unknown config key 'algorithm.lrr': "
                                         r"algorithm has keys: .*\blr\b"):
        config.load(bad, [], defaults=CONFIGS / "ppo.yaml")
    bad.write_text("trainer:\n  max_stepz: 5\n")
    with pytest.raises(ValueError, match=r"'trainer.max_stepz': trainer has keys: .*max_steps"
                                         r".*\bresume_overrides\b"):  # taken before the YAML too
        config.load(bad, [], defaults=CONFIGS / "ppo.yaml")
    # a file or a section of another shape names the file and the section (they leaked
    # OmegaConf's "Cannot merge incompatible container types", or an AttributeError)
    for text, message in (("trainer: [1,2]\n", r"section trainer: expected a mapping of its "
                                                r"keys \(e.g. 'trainer: \{strategy: ...\}'\), got \[1, 2\]"),
                          ("trainer: 5\n", r"section trainer: .*got 5$"),
                          ("- a\n", r"expected a mapping of sections \(trainer:, algorithm:, "
                                    r"...\), got a list$")):
        bad.write_text(text)
        with pytest.raises(ValueError, match=r"typo.yaml: " + message):
            config.load(bad, [], defaults=CONFIGS / "ppo.yaml")
    bad.write_text("trainer:\nalgorithm:\n  lr: 0.1\n")  # a section left empty: none given
    cfg = config.load(bad, [], defaults=CONFIGS / "ppo.yaml")
    assert cfg.algorithm.lr == 0.1 and cfg.trainer == OmegaConf.load(CONFIGS / "ppo.yaml").trainer
    # env keys are the environment's keyword arguments: open; overrides still checked
    ok = tmp_path / "brax.yaml"
    ok.write_text("env:\n  name: brax/ant\n  backend: spring\n")
    cfg = config.load(ok, ["algorithm.gamma=0.9"], defaults=CONFIGS / "sac.yaml")
    assert cfg.env.backend == "spring" and cfg.algorithm.gamma == 0.9
    assert cfg.trainer.max_env_steps == OmegaConf.load(CONFIGS / "sac.yaml").trainer.max_env_steps
    with pytest.raises(ValueError, match="unknown config key 'algorithm.lrr'"):
        config.load(ok, ["algorithm.lrr=1"], defaults=CONFIGS / "sac.yaml")
    # the bundled alternative files are valid --config files of their recipes
    for alt, default in (("sac_brax", "sac"), ("cem_rl_brax", "cem_rl")):
        merged = config.load(CONFIGS / f"{alt}.yaml", [], defaults=CONFIGS / f"{default}.yaml")
        merged = {k: v for k, v in OmegaConf.to_container(merged).items()
                  if k != "search"}  # the section every recipe with traced hyperparameters adds
        plain = OmegaConf.merge(OmegaConf.load(CONFIGS / f"{default}.yaml"),
                                OmegaConf.load(CONFIGS / f"{alt}.yaml"))
        assert merged == OmegaConf.to_container(plain)


@pytest.mark.timeout(60)
def test_config_flag_forms_and_env_keyword_arguments():
    assert config.config_arg(["a=1", "--config", "f.yaml", "b=2"], "d.yaml") == ("f.yaml", ["a=1", "b=2"])
    assert config.config_arg(["--config=f.yaml"], "d.yaml") == ("f.yaml", [])
    assert config.config_arg(["a=1"], "d.yaml") == ("d.yaml", ["a=1"])
    with pytest.raises(ValueError, match="--config needs a path"):
        config.config_arg(["--config"], "d.yaml")
    with pytest.raises(ValueError, match="--config given twice"):
        config.config_arg(["--config", "a.yaml", "--config=b.yaml"], "d.yaml")
    # env keys are the environment's keyword arguments: a new one may be given on the
    # command line too, and one the environment does not take is named
    cfg = config.load(CONFIGS / "ppo.yaml", ["env.foo=3"])
    with pytest.raises(TypeError, match=r"config keys env.foo: not all are keyword arguments "
                                        r"of the environment 'CartPole-v1'"):
        config.make_env(cfg)


@pytest.mark.timeout(60)
def test_an_optuna_searchs_rounds_end_on_log_boundaries_by_its_budget():
    """``search.method=optuna search.rounds=2 trainer.max_steps=6``: rounds of 3 updates;
    the Trainer is built with that budget, so the fit's log interval is gcd(4, 3) = 1
    (``trainer.log_every_n_steps`` stays the 4 given); other searches have no rounds."""
    from jaxtrainer.recipes._modules import build_module

    sizes = ["search.space.lr=loguniform(1e-5,1e-2)", "search.members=2", "trainer.max_steps=6",
             "trainer.max_env_steps=null", "trainer.log_every_n_steps=4", "trainer.devices=1",
             "algorithm.num_envs=2", "algorithm.num_steps=4", "algorithm.num_minibatches=1",
             "trainer.logger=false", "trainer.enable_progress_bar=false"]
    cfg = config.load(CONFIGS / "ppo.yaml", ["search.method=optuna", "search.rounds=2", *sizes])
    trainer = config.make_trainer(cfg)
    assert trainer.budget.rounds == 2
    trainer.prepare(build_module("ppo", cfg))
    assert (trainer.max_steps, trainer.log_every_n_steps, trainer.planner.log_every_n_steps) == (6, 4, 1)
    asha = config.make_trainer(config.load(CONFIGS / "ppo.yaml", ["search.method=asha", *sizes]))
    assert asha.budget.rounds is None


def test_the_resume_hint_is_the_command_with_the_checkpoint_just_written_once():
    """The preemption advice of a recipe command: the command, shell-quoted, with
    ``trainer.ckpt_path=<the checkpoint just written>`` once, in place of any
    ``ckpt_path`` it had (``last`` among them: it resumes the newest run under the
    root, another run once something else ran there); braces survive ``format``.
    One process of several says it in words (its launcher's command is not this one)."""
    hint = config.resume_hint("jaxtrainer fit ppo", ["trainer.ckpt_path=runs/ppo/version_0/checkpoints/8",
                                                     "algorithm.hidden_sizes=[64, 64]",
                                                     "--config", "x.yaml", "env.kwargs={a: 1}"])
    assert hint.format(checkpoint="CK") == (
        "jaxtrainer fit ppo 'algorithm.hidden_sizes=[64, 64]' --config x.yaml 'env.kwargs={a: 1}' "
        "trainer.ckpt_path=CK")
    hint = config.resume_hint("python recipes/ppo.py", ["trainer.ckpt_path=last"])
    assert hint.format(checkpoint="CK") == "python recipes/ppo.py trainer.ckpt_path=CK"
    assert config.resume_hint("jaxtrainer fit ppo", [], one_process=False) == config._RESUME_HINT
    assert config._RESUME_HINT.format(checkpoint="CK") == "the same command plus trainer.ckpt_path=CK"
    assert config.resume_hint("x", ["trainer.ckpt_path=last"], one_process=False).format(
        checkpoint="CK") == "the same command with trainer.ckpt_path=CK in place of its trainer.ckpt_path=last"
    assert config.resume_hint("x", ["trainer.ckpt_path=r/checkpoints/8"], one_process=False).format(
        checkpoint="CK") == ("the same command with trainer.ckpt_path=CK in place of its "
                             "trainer.ckpt_path=r/checkpoints/8")


def test_a_sweep_of_a_recipe_without_a_search_section_builds_its_trainer():
    """``jaxtrainer fit pqn --config pqn_minatar.yaml sweep.seeds=3`` (the accelerator
    table's PQN row): PQN's configs have no ``search:`` section, and the sweep's Trainer
    is built with each member's budget and no search rounds."""
    cfg = config.load(CONFIGS / "pqn_minatar.yaml", ["sweep.seeds=3"], defaults=CONFIGS / "pqn.yaml")
    assert "search" not in cfg
    trainer = config.make_trainer(cfg)
    assert trainer.budget.per_member and trainer.budget.rounds is None
    assert trainer.budget.max_env_steps == cfg.trainer.max_env_steps
