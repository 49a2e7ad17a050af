"""``jaxtrainer eval``: a saved run rebuilt from its config.yaml, evaluated on
fresh episodes (the numbers of ``Trainer.evaluate``), and watched (--video)."""

from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf
from PIL import Image, ImageChops

import jaxtrainer as jt
from jaxtrainer import checkpoint as ckpt
from jaxtrainer.commands import _cli as cli
from jaxtrainer.commands import _eval_cli as eval_cli
from jaxtrainer.commands import _render as render
from jaxtrainer.commands._eval_cli import evaluate_run, format_result
from jaxtrainer.distributed import keys
from jaxtrainer.envs.evaluation import run_episodes
from jaxtrainer.inference import saved_run
from jaxtrainer.policy import policy_spec
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import BUILDERS, POPULATION_RECIPES, build_module
from jaxtrainer.rundir import runs
from jaxtrainer.trainer import _fit_run as fit_run

RECIPES = Path(__file__).parents[2] / "recipes"
QUIET = dict(logger=False, enable_progress_bar=False, compile_evaluation_ahead=False)
PPO_SIZES = ["algorithm.num_steps=32", "algorithm.update_epochs=1", "algorithm.num_minibatches=2",
             "algorithm.hidden_sizes=[16]", "algorithm.eval_episodes=4"]


def save_config(run: Path, recipe: str, cfg) -> None:
    """What the recipes write: the resolved config plus ``recipe: <name>``."""
    OmegaConf.save(OmegaConf.create({"recipe": recipe, **OmegaConf.to_container(cfg, resolve=True)}),
                   run / "config.yaml")


def init_only_run(root: Path, recipe: str, cfg, config_file: bool = True, edit=None) -> Path:
    """A run whose one checkpoint holds the initial state (no training step
    compiled), changed by ``edit(state)`` when given."""
    module = build_module(recipe, cfg)
    if recipe in POPULATION_RECIPES:
        trainer = jt.PopulationTrainer(cfg.trainer.population_size, strategy="single",
                                       max_generations=1, default_root_dir=root, **QUIET)
        module = trainer.wrap(module)
    else:
        trainer = jt.Trainer(strategy="single", max_steps=1, default_root_dir=root, **QUIET)
    trainer.prepare(module)  # as fit does before it initialises
    fit_run.init_state(trainer, module)
    if edit is not None:
        trainer.state = edit(trainer.state)
    trainer.log_dir = runs.new_run_dir(root)
    with jt.checkpoint.manager(Path(trainer.log_dir) / "checkpoints", async_save=False) as mgr:
        trainer.save_checkpoint(mgr)
    if config_file:
        save_config(Path(trainer.log_dir), recipe, cfg)
    return Path(trainer.log_dir)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """8 PPO updates on CartPole, a checkpoint every 2 ranked by the training return."""
    checkpoint = jt.ModelCheckpoint(every_n_steps=2, monitor="train/episode_return", mode="max",
                                    async_save=False)
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", PPO_SIZES)
    trainer = jt.Trainer(strategy="single", max_steps=8, log_every_n_steps=2, callbacks=[checkpoint],
                         default_root_dir=tmp_path_factory.mktemp("runs"), **QUIET)
    trainer.fit(build_module("ppo", cfg))
    save_config(Path(trainer.log_dir), "ppo", cfg)
    return Path(trainer.log_dir), cfg, checkpoint


def reference_episodes(run: Path, step_dir: Path, root_key, episodes: int):
    """The episodes of the evaluation at ``step_dir``, recomputed outside any
    Trainer: run_episodes on the key fold_in(fold_in(root, EVAL), step), the same
    on every device (episode e draws from fold_in(key, e))."""
    step = int(step_dir.name)
    policy = jt.load_policy(step_dir)
    module = build_module("ppo", saved_run.load_config(run)[1])
    key = keys.sub_key(keys.stream_key(root_key, keys.EVAL_STREAM), step)
    ep = jax.jit(lambda p, k: run_episodes(module.env, module.greedy_policy(), p, k, episodes))(
        policy.params, key)
    assert bool(np.all(ep.finished))
    return np.asarray(ep.returns), np.asarray(ep.lengths)


POLICYLESS_RECIPES = ("map_elites", "pga_me", "me_es", "nsga2")
"""Recipes whose module searches genotypes of a task, with no policy acting in an env."""


def test_every_recipe_script_builds_its_module_through_the_registry():
    scripts = sorted(p.stem for p in RECIPES.glob("*.py"))
    assert scripts == sorted(BUILDERS)
    for name in scripts:  # openes.py and cma_es.py share openes.run(..., recipe=<name>)
        text = (RECIPES / f"{name}.py").read_text()
        assert f'build_module("{name}", cfg)' in text or f'recipe="{name}"' in text
        module = build_module(name, config.load(RECIPES / "configs" / f"{name}.yaml"))
        expected = jt.PopulationModule if name in POPULATION_RECIPES else jt.Module
        assert isinstance(module, expected)
        if name in POLICYLESS_RECIPES:  # an archive or a front of genotypes, not a policy
            assert not module.has_policy()
            continue
        assert policy_spec(module).env.name in ("CartPole-v1", "Pendulum-v1")
    with pytest.raises(ValueError, match=r"unknown recipe 'ppo2'; did you mean 'ppo'\? expected one of a2c, .*ppo"):
        build_module("ppo2", None)


@pytest.mark.slow
def test_eval_prints_the_mean_of_trainer_evaluate_and_seed_draws_a_runs_episodes(ppo_run):
    """``jaxtrainer eval RUN --episodes 8``: the numbers of Trainer.evaluate of the
    same checkpoint and (run's) seed; ``--seed`` draws the episodes a run with that
    seed draws."""
    run, cfg, _ = ppo_run
    got = evaluate_run(run, episodes=8)  # what `jaxtrainer eval RUN --episodes 8` prints
    out = "\n".join(format_result(got))
    newest = run / "checkpoints" / "8"
    assert f"checkpoint {newest} (step 8, env steps 1024); seed 0" in out

    # Trainer.evaluate of the same checkpoint, same (run's) seed, eval_episodes=8
    cfg8 = OmegaConf.merge(cfg, {"algorithm": {"eval_episodes": 8}})
    expected = jt.Trainer(strategy="single", max_steps=8, enable_checkpointing=False,
                          **QUIET).evaluate(build_module("ppo", cfg8), ckpt_path=newest)
    assert got["metrics"]["eval/episode_return"] == expected["eval/episode_return"]
    assert got["metrics"]["eval/episode_length"] == expected["eval/episode_length"]
    assert f"episode_return: mean={expected['eval/episode_return']:.4f} " in out

    # std/min/max are those of the very episodes evaluate averaged
    returns, lengths = reference_episodes(run, newest, jax.random.key(0), 8)
    m = got["metrics"]
    assert got["completed"] == 8 and m["eval/episode_return"] == pytest.approx(returns.mean())
    assert m["eval/episode_return_std"] == pytest.approx(returns.std(), rel=1e-5)
    assert (m["eval/episode_return_min"], m["eval/episode_return_max"]) == (returns.min(), returns.max())
    assert (m["eval/episode_length_min"], m["eval/episode_length_max"]) == (lengths.min(), lengths.max())
    assert (f"episode_return: mean={m['eval/episode_return']:.4f} "
            f"std={m['eval/episode_return_std']:.4f} min={returns.min():g} max={returns.max():g}") in out

    # --seed: 0 is the run's own seed, i.e. its root key (above); 5 another
    assert got["seed"] == 0
    got = evaluate_run(run, episodes=8, seed=5)
    returns, _ = reference_episodes(run, newest, jax.random.key(5), 8)
    assert got["seed"] == 5
    assert got["metrics"]["eval/episode_return"] == pytest.approx(returns.mean(), rel=1e-6)
    assert got["metrics"]["eval/episode_return_max"] == returns.max()


@pytest.mark.slow
def test_eval_under_pmap_equals_trainer_evaluate_under_pmap(ppo_run):
    run, cfg, _ = ppo_run
    got = evaluate_run(run / "checkpoints", ckpt="4", episodes=8, strategy="pmap", devices=2)
    cfg8 = OmegaConf.merge(cfg, {"algorithm": {"eval_episodes": 8}})
    expected = jt.Trainer(strategy="pmap", devices=2, max_steps=8, enable_checkpointing=False,
                          **QUIET).evaluate(build_module("ppo", cfg8),
                                            ckpt_path=run / "checkpoints" / "4")
    assert got["step"] == 4 and got["completed"] == 8
    assert got["metrics"]["eval/episode_return"] == expected["eval/episode_return"]


def test_ckpt_selects_best_last_or_a_step(ppo_run):
    run, _, checkpoint = ppo_run
    ckdir = run / "checkpoints"
    assert sorted(int(p.name) for p in ckdir.iterdir()) == [2, 4, 6, 8]
    best = ckpt.best(ckdir)
    assert best.path == Path(checkpoint.best_model_path)
    assert (best.monitor, best.mode, best.score) == ("train/episode_return", "max",
                                                     checkpoint.best_model_score)
    for path in (run, ckdir, ckdir / "6"):
        assert ckpt.resolve(path, "best") == best.path
        assert ckpt.resolve(path, "last") == ckdir / "8"
        assert ckpt.resolve(path, 4) == ckdir / "4"
    assert ckpt.resolve(run) == ckdir / "8"
    assert ckpt.resolve(ckdir / "6") == ckdir / "6"
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at step 5 .*steps: 2, 4, 6, 8"):
        ckpt.resolve(run, "5")
    with pytest.raises(ValueError, match=r"checkpoint 'newest': expected 'last', 'best' or a step"):
        ckpt.resolve(run, "newest")
    with pytest.raises(FileNotFoundError, match=r"is a root of runs \(version_0\): pass one run"):
        ckpt.resolve(run.parent)


def test_best_without_a_monitored_checkpoint_says_how_to_get_one(tmp_path):
    run = init_only_run(tmp_path, "ppo", config.load(RECIPES / "configs" / "ppo.yaml", PPO_SIZES))
    with pytest.raises(ValueError, match=r"no best checkpoint recorded .*ModelCheckpoint with "
                                         r"monitor= and mode=") as err:
        ckpt.resolve(run, "best")
    assert "ckpt_path='best'" not in str(err.value)  # said once, not with the Trainer's wording too


@pytest.mark.slow
def test_video_gif_of_cartpole_has_changing_frames(ppo_run, tmp_path, capsys):
    run, _, _ = ppo_run
    gif = tmp_path / "cartpole.gif"
    # --episodes 8: the evaluation program of test_eval_prints_the_mean_of_... (compiled once)
    assert cli.main(["eval", str(run), "--episodes", "8", "--video", str(gif)]) == 0
    frames = int(re.search(r"wrote .*cartpole.gif \((\d+) frames\)", capsys.readouterr().out)[1])
    image = Image.open(gif)
    assert image.n_frames == frames > 1
    image.seek(0)
    first = image.convert("RGB")
    image.seek(image.n_frames - 1)
    assert ImageChops.difference(first, image.convert("RGB")).getbbox() is not None


@pytest.mark.parametrize("args,match", [
    (["--video", "x.html"], r"CartPole-v1 is written as .gif or .mp4, not '.html'; supported: "),
    (["--episodes", "0"], r"--episodes 0: expected a positive int"),
    (["--ckpt", "first"], r"checkpoint 'first': expected 'last', 'best' or a step number"),
    (["--strategy", "pmap", "--devices", "3", "--episodes", "8"],
     r"num_envs=4 is not divisible by the 3 devices"),
    (["--devices", "3", "--episodes", "8"],  # pmap without --strategy (was: single uses 1 device)
     r"PPO: num_envs=4 is not divisible by the 3 devices"),
])
def test_bad_arguments_are_one_line_errors(ppo_run, capsys, args, match):
    run, _, _ = ppo_run
    assert cli.main(["eval", str(run), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jaxtrainer eval: error: ") and "\n" not in err
    assert re.search(match, err)


def test_a_run_without_config_yaml_is_named(tmp_path, capsys):
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", PPO_SIZES)
    run = init_only_run(tmp_path, "ppo", cfg, config_file=False)  # as a run started from Python
    assert cli.main(["eval", str(run)]) == 2
    assert f"no config.yaml in {run}: runs started by a recipe" in capsys.readouterr().err


@pytest.mark.slow
def test_population_recipe_evaluates_the_mean_policy(tmp_path):
    cfg = config.load(RECIPES / "configs" / "openes.yaml", [
        "algorithm.hidden_sizes=[4]", "trainer.population_size=4"])
    run = init_only_run(tmp_path, "openes", cfg)
    got = evaluate_run(run, episodes=4)
    expected = jt.PopulationTrainer(4, max_generations=2, strategy="single", **QUIET).evaluate(
        build_module("openes", OmegaConf.merge(cfg, {"algorithm": {"eval_episodes": 4}})),
        ckpt_path=run / "checkpoints" / "0")
    assert got["step"] == 0 and got["completed"] == 4
    assert got["metrics"]["eval/episode_return"] == expected["eval/episode_return"]


@pytest.mark.slow
def test_pbt_run_is_evaluated_and_loaded_as_its_best_member(tmp_path, capsys):
    cfg = config.load(RECIPES / "configs" / "pbt_ppo.yaml", [
        *PPO_SIZES, "pbt.population_size=2", "algorithm.num_envs=2"])
    fitness = jnp.array([1.0, 5.0])  # member 1 has the best current fitness
    run = init_only_run(tmp_path, "pbt_ppo", cfg, edit=lambda s: s.replace(fitness=fitness))
    got = evaluate_run(run)
    expected = jt.Trainer(strategy="single", max_steps=1, **QUIET).evaluate(
        build_module("pbt_ppo", cfg), ckpt_path=run / "checkpoints" / "0")
    assert got["completed"] == 4
    assert got["metrics"]["eval/episode_return"] == expected["eval/episode_return"]
    assert got["metrics"]["eval/episode_return"] == expected["member/1/eval/episode_return"]
    on_two = evaluate_run(run, strategy="pmap", devices=2)  # members sharded over devices
    assert (on_two["member"], on_two["member_note"]) == (got["member"], got["member_note"])
    lr = float(saved_run.restore(run).trainer.state.members.hyperparams["lr"][1])
    assert eval_cli.main([str(run)]) == 0  # says why member 1: the best fitness, and its settings
    assert (f"member 1 of 2, fitness (train/episode_return) 5, the best; lr={lr:.4g}, ent_coef="
            in capsys.readouterr().out)
    assert eval_cli.main([str(run), "--member", "0"]) == 0
    assert "member 0 of 2, fitness (train/episode_return) 1; lr=" in capsys.readouterr().out
    act = jt.load_policy(run)
    state = saved_run.restore(run).trainer.state
    member_params = jax.tree.map(lambda x: x[1], state.members.params)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(act.params),
                                                      jax.tree.leaves(member_params), strict=True))


def test_video_formats_are_checked_before_anything_runs():
    render.check_video_path("brax/ant", "ant.html")
    render.check_video_path("CartPole-v1", "cartpole.GIF")
    with pytest.raises(ValueError, match=r"brax/ant is written as .html or .gif, not '.mp4'; "
                                         r"supported: gymnax .* as .gif \(or .mp4 with ffmpeg "
                                         r"installed\), brax/<env> as .html or .gif"):
        render.check_video_path("brax/ant", "ant.mp4")
    with pytest.raises(ValueError, match=r"MuJoCo Playground renders with MuJoCo's OpenGL"):
        render.check_video_path("playground/CartpoleBalance", "x.html")
    with pytest.raises(ValueError, match=r"gymnax's visualiser does not draw DeepSea-bsuite"):
        render.check_video_path("DeepSea-bsuite", "x.gif")


@pytest.mark.slow
@pytest.mark.timeout(180)  # brax compiles slowly on 2 CPU cores
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
def test_video_of_a_brax_run_is_brax_html_viewer_with_the_system_json(tmp_path):
    """What ``jaxtrainer eval RUN --video x.html`` writes for a brax run, from
    the run's policy (a checkpoint of the initial state: no training step to compile)."""
    cfg = config.load(RECIPES / "configs" / "ppo.yaml",
                      [*PPO_SIZES, "env.name=brax/inverted_pendulum", "env.episode_length=12",
                       "algorithm.eval_episodes=1", "algorithm.num_envs=1"])
    act = jt.load_policy(init_only_run(tmp_path, "ppo", cfg))
    html = tmp_path / "pendulum.html"
    frames = render.write_video(act.env, act.spec.greedy, act.params, jax.random.key(0), html, 2)
    text = html.read_text()
    assert "Brax visualizer" in text
    system = json.loads(zlib.decompress(base64.b64decode(
        re.search(r'var system = "([^"]+)"', text)[1])))
    assert "geoms" in system and len(system["states"]["x"]) == frames >= 2
    # the pole moves: its position differs between the first and the last frame
    assert system["states"]["x"][0] != system["states"]["x"][-1]


@pytest.mark.slow
def test_a_sweep_run_is_evaluated_member_by_member(tmp_path, capsys):
    """A sweep (sweep.seeds=2) evaluates its member 0 by default and says so; --member 1
    evaluates member 1 as Trainer.evaluate reports it; one agent has no --member."""
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", [*PPO_SIZES, "sweep.seeds=2",
                                                          "algorithm.num_envs=2"])
    run = init_only_run(tmp_path, "ppo", cfg)
    expected = jt.Trainer(strategy="single", max_steps=1, **QUIET).evaluate(
        build_module("ppo", cfg), ckpt_path=run / "checkpoints" / "0")
    for member in (None, 1):
        got = evaluate_run(run, member=member)
        index = 0 if member is None else member
        assert got["member"] == (index, 2)
        assert got["metrics"]["eval/episode_return"] == \
            expected[f"member/{index}/eval/episode_return"]
    assert eval_cli.main([str(run), "--member", "1"]) == 0
    assert "member 1 of 2 (--member I for another)" in capsys.readouterr().out
    assert eval_cli.main([str(run), "--member", "2"]) == 2
    assert "--member 2: expected an index in [0, 2)" in capsys.readouterr().err


def test_a_mean_that_rounds_to_zero_prints_without_a_sign():
    metrics = {"eval/episode_return": -0.00001, "eval/episode_return_std": 0.00002,
               "eval/episode_return_min": -0.5, "eval/episode_return_max": 0.5}
    lines = format_result({"checkpoint": "c", "step": 1, "env_steps": 2, "seed": 0,
                           "episodes": 4, "completed": 4, "metrics": metrics})
    assert "episode_return: mean=0.0000 std=0.0000 min=-0.5 max=0.5" in lines
