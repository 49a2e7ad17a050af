"""Sweeps (issue 17): seeds x a hyperparameter grid in one program, member
reproducibility, padding, per-member metrics, the rliable summary, recipes, plot.

One module-scoped set of tiny PPO runs (CartPole, 2 envs x 8 steps, 3 updates),
each made when a test first reads it, serves every test that trains:

* ``map1``: 10 members (lr in {1e-3, 3e-3} x seeds 0..4) on 1 device, members one
  after another (``vectorize=False``), a checkpoint at step 2;
* ``map4``: the same sweep on 4 devices with pmap (padded to 12), with the CSV
  logger, the summary and a checkpoint at step 2;
* ``single``: PPO alone, ``Trainer(seed=3)``, lr 3e-3: sweep member 8;
* ``vmap1``: lr {1e-3, 3e-3} x seed 3 on 1 device, members batched with vmap.

Every test that reads ``map1`` or ``map4`` runs in the default-emitters subprocess
(tests/conftest.py), where the bitwise tests make them: each is made once a run.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import jax
import numpy as np
import pytest
from scipy.stats import trim_mean

import jaxtrainer as jt
from jaxtrainer.algorithms import PPO
from jaxtrainer.commands._plot import plot_runs
from jaxtrainer.loggers import CSVLogger
from jaxtrainer.population import Sweep
from jaxtrainer.population import summary as sweep_summary
from jaxtrainer.population.sweep import grid
from jaxtrainer.recipes import _sweep as recipe_sweep
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import build_module
from tests._support.fits import Fits
from tests.population.test_pbt import CountCompiles

RECIPES = Path(__file__).parents[2] / "recipes"
STEPS = 3
LRS = [1e-3, 3e-3]


def tiny(**kw) -> PPO:
    return PPO(num_envs=2, num_steps=8, update_epochs=1, num_minibatches=1, eval_episodes=2,
               hidden_sizes=(8,), **kw)


def fit(module, root, devices=1, seed=0, callbacks=()):
    save = any(isinstance(c, jt.ModelCheckpoint) for c in callbacks)
    trainer = jt.Trainer(strategy="pmap" if devices > 1 else "single", devices=devices,
                         max_steps=STEPS, log_every_n_steps=1, seed=seed, default_root_dir=root,
                         enable_progress_bar=False, logger=False, enable_checkpointing=save,
                         compile_evaluation_ahead=False, callbacks=list(callbacks))
    trainer.fit(module)
    return trainer


def at_step_2() -> jt.ModelCheckpoint:
    """A checkpoint one step before the end (step 2 of 3), where a resumed run starts."""
    return jt.ModelCheckpoint(every_n_steps=STEPS - 1, save_last=False, async_save=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")

    def map1():
        compiles = CountCompiles()
        sweep = Sweep(tiny(), seeds=5, hyperparams={"lr": LRS}, vectorize=False)
        return {"map1": (sweep, fit(sweep, root / "map1", callbacks=[compiles, at_step_2()])),
                "compiles": compiles.events}

    def map4():
        sweep = Sweep(tiny(), seeds=5, hyperparams={"lr": LRS}, vectorize=False)
        summary = sweep_summary.SweepSummary(reps=200, print_table=False)
        return {"map4": (sweep, fit(sweep, root / "map4", devices=4,
                                    callbacks=[CSVLogger(), summary, at_step_2()])),
                "summary": summary}

    def single():
        single = tiny(lr=3e-3)
        return {"single": (single, fit(single, root / "single", seed=3))}

    def vmap1():
        sweep = Sweep(tiny(), seeds=[3], hyperparams={"lr": LRS})
        return {"vmap1": (sweep, fit(sweep, root / "vmap1"))}

    return Fits({"map1": map1, "compiles": map1, "map4": map4, "summary": map4,
                 "single": single, "vmap1": vmap1})


def member_params(run, i):
    """Member ``i``'s final parameters (host arrays)."""
    return jax.tree.map(lambda x: np.asarray(x)[i], jax.device_get(run[1].state.members.params))


# ---- enumeration and input checks (no compile) ----------------------------------
def test_members_are_configuration_major_seed_minor():
    sweep = Sweep(tiny(), seeds=[3, 7], hyperparams={"lr": [1e-3, 3e-3], "ent_coef": [0.0, 0.01]})
    assert sweep.population_size == 8 and sweep.env_steps_per_step == 8 * 16
    assert grid({"lr": [1, 2], "ent_coef": [0, 5]}) == [
        {"lr": 1.0, "ent_coef": 0.0}, {"lr": 1.0, "ent_coef": 5.0},
        {"lr": 2.0, "ent_coef": 0.0}, {"lr": 2.0, "ent_coef": 5.0}]
    got = [(m["member"], m["config"], m["seed"], m["lr"], m["ent_coef"]) for m in sweep.members()]
    assert got == [(0, 0, 3, 1e-3, 0.0), (1, 0, 7, 1e-3, 0.0), (2, 1, 3, 1e-3, 0.01),
                   (3, 1, 7, 1e-3, 0.01), (4, 2, 3, 3e-3, 0.0), (5, 2, 7, 3e-3, 0.0),
                   (6, 3, 3, 3e-3, 0.01), (7, 3, 7, 3e-3, 0.01)]
    assert sweep.config_label(3) == "lr=0.003 ent_coef=0.01"
    assert Sweep(tiny(), seeds=4).seeds == (0, 1, 2, 3) and grid(None) == [{}]


@pytest.mark.parametrize("kwargs,match", [
    ({"seeds": 0}, r"seeds=0: expected a count >= 1"),
    ({"seeds": [1, 1]}, r"repeat a seed"),
    ({"seeds": [1.5]}, r"list of int seeds"),
    ({"hyperparams": {"lr": []}}, r"hyperparams\['lr'\]=\[\]: expected a non-empty list"),
    ({"hyperparams": {"lr": 0.1}}, r"hyperparams\['lr'\]=0.1"),
    ({"hyperparams": {"lr": [0.1, 0.1]}}, r"repeats a value"),
    ({"hyperparams": {"lr": ["fast"]}}, r"holds 'fast': expected numbers"),
    ({"vectorize": "yes"}, r"vectorize='yes'"),
])
def test_bad_sweeps_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Sweep(tiny(), **kwargs)


def test_unknown_hyperparameter_or_metric_is_rejected_before_compiling():
    with pytest.raises(ValueError, match=r"\['learning_rate'\] are not in PPO's "
                                         r"state.hyperparams; choose from \[.*'lr'"):
        Sweep(tiny(), hyperparams={"learning_rate": [1e-3]}).validate(1)
    sweep = Sweep(tiny(), member_metrics=("return",))
    sweep.configure_budget(STEPS)  # as the Trainer does first
    with pytest.raises(ValueError, match=r"metric 'return' is not a training metric"):
        sweep.validate(1)
    with pytest.raises(ValueError, match=r"Sweep.member\(4\).*\[0, 2\)"):
        Sweep(tiny(), seeds=2).member(4)


# ---- training: one program, reproducibility, layouts ------------------------------
@pytest.mark.slow
@pytest.mark.default_emitters  # reads map1/map4, made in that subprocess
def test_one_compile_trains_every_member_with_its_own_hyperparameters(runs):
    sweep, trainer = runs["map1"]
    assert runs["compiles"] == [] and set(trainer.compile_seconds) == {"train"}
    state = jax.device_get(trainer.state)
    np.testing.assert_array_equal(state.members.hyperparams["lr"],
                                  np.float32([1e-3] * 5 + [3e-3] * 5))
    assert int(state.step) == STEPS and trainer.env_steps == STEPS * 10 * 16
    final_lr = np.asarray(state.members.opt_state.hyperparams["learning_rate"])
    assert final_lr[0] < final_lr[5]  # annealed from each member's own lr over the budget


@pytest.mark.slow
@pytest.mark.default_emitters
def test_member_reproduces_its_single_run_bit_for_bit(runs):
    """Member 8 = (lr 3e-3, seed 3): the keys of Trainer(seed=3) on one device and,
    without vmap, the one-member program: equal final parameters, bit for bit."""
    sweep, _ = runs["map1"]
    assert {k: sweep.member(8)[k] for k in ("seed", "lr")} == {"seed": 3, "lr": 3e-3}
    single = jax.device_get(runs["single"][1].state.params)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(member_params(runs["map1"], 8)),
                    strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_vmapped_member_reproduces_its_single_run_to_float_rounding(runs):
    """With vmap (the default) batched matrix products round differently from the
    one-member program: after 3 updates the parameters agree to ~1e-8."""
    single = jax.device_get(runs["single"][1].state.params)
    diffs = [np.max(np.abs(np.asarray(a) - b)) for a, b in zip(
        jax.tree.leaves(single), jax.tree.leaves(member_params(runs["vmap1"], 1)), strict=True)]
    assert max(diffs) < 1e-6, diffs


@pytest.mark.slow
@pytest.mark.default_emitters
def test_ten_members_on_four_devices_equal_one_device_and_padding_is_never_logged(runs):
    sweep, trainer = runs["map4"]
    assert sweep.layout.padded_size == 12 and sweep.layout.local_count == 3
    one, four = (jax.device_get(runs[k][1].state.members) for k in ("map1", "map4"))
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(four), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a)[:10], np.asarray(b)[:10])
    assert trainer.env_steps == STEPS * 10 * 16  # real members only
    rows = list(csv.DictReader(open(Path(trainer.log_dir) / "metrics.csv")))
    members = {c.split("/")[1] for c in rows[0] if c.startswith("member/")}
    assert members == {str(i) for i in range(10)}
    last = rows[-1]
    returns = [float(last[f"member/{i}/eval/episode_return"]) for i in range(10)]
    np.testing.assert_allclose(float(last["eval/episode_return"]), np.mean(returns), rtol=1e-5)
    assert float(last["eval/episode_return_max"]) == pytest.approx(max(returns))
    train = [float(r[f"member/{i}/train/episode_return"] or "nan") for r in rows for i in range(10)]
    assert any(math.isfinite(v) for v in train)


# ---- the summary -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.default_emitters  # reads map1/map4, made in that subprocess
def test_summary_csv_holds_one_row_per_configuration(runs):
    sweep, trainer = runs["map4"]
    run = Path(trainer.log_dir)
    assert sweep_summary.read_members(run) == sweep.members()
    rows = list(csv.DictReader(open(run / "sweep_summary.csv")))
    assert [(int(r["config"]), float(r["lr"]), r["seeds"]) for r in rows] == \
        [(0, 1e-3, "5"), (1, 3e-3, "5")]  # a count written as an integer
    last = list(csv.DictReader(open(run / "metrics.csv")))[-1]
    for r in rows:
        scores = [float(last[f"member/{m['member']}/eval/episode_return"])
                  for m in sweep.members() if m["config"] == int(r["config"])]
        np.testing.assert_allclose(float(r["mean"]), np.mean(scores))
        np.testing.assert_allclose(float(r["iqm"]), trim_mean(scores, 0.25))
        assert float(r["iqm_ci_low"]) <= float(r["iqm"]) <= float(r["iqm_ci_high"])
    assert runs["summary"].rows[1]["mean"] == pytest.approx(float(rows[1]["mean"]))


def test_statistics_match_rliable_and_the_iqm_by_hand():
    from rliable import library, metrics

    scores = [10.0, 500.0, 480.0, 20.0, 490.0, 470.0, 300.0, 495.0]
    stats = sweep_summary.config_statistics(scores + [math.nan], reps=300, seed=4)
    middle = sorted(scores)[2:6]  # the interquartile mean of 8 values: the middle 4
    assert stats["seeds"] == 8 and stats["iqm"] == pytest.approx(np.mean(middle))
    assert stats["mean"] == pytest.approx(np.mean(scores))
    np.random.seed(4)  # rliable 1.2 resamples with NumPy's global generator
    point, ci = library.get_interval_estimates(
        {"x": np.array(scores).reshape(-1, 1)},
        lambda x: np.array([metrics.aggregate_mean(x), metrics.aggregate_iqm(x)]), reps=300)
    assert (stats["mean"], stats["iqm"]) == pytest.approx(tuple(point["x"]))
    assert (stats["mean_ci_low"], stats["iqm_ci_low"]) == pytest.approx(tuple(ci["x"][0]))
    assert (stats["mean_ci_high"], stats["iqm_ci_high"]) == pytest.approx(tuple(ci["x"][1]))
    assert stats["iqm_ci_low"] < stats["iqm"] < stats["iqm_ci_high"]
    members = [{"member": i, "config": i // 2, "lr": [0.1, 0.2][i // 2]} for i in range(4)]
    rows = sweep_summary.summarize(members, {0: 1.0, 1: 3.0, 2: 5.0}, ["lr"], reps=50)
    assert [(r["config"], r["lr"], r["seeds"], r["mean"]) for r in rows] == \
        [(0, 0.1, 2.0, 2.0), (1, 0.2, 1.0, 5.0)]
    table = sweep_summary.format_table(rows, ["lr"], "eval/episode_return")
    assert table.splitlines()[1].split()[:3] == ["config", "lr", "seeds"]
    assert "2.00 [1.00, 3.00]" in table.splitlines()[2]


# ---- plot --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.default_emitters  # reads map1/map4, made in that subprocess
def test_plot_draws_one_line_per_configuration(runs, tmp_path):
    sweep, trainer = runs["map4"]
    out = plot_runs([trainer.log_dir], str(tmp_path / "sweep.png"),
                    metric="eval/episode_return")
    assert out["configs"] == ["lr=0.001 (5 seeds)", "lr=0.003 (5 seeds)"]
    last = list(csv.DictReader(open(Path(trainer.log_dir) / "metrics.csv")))[-1]
    for c in range(2):
        scores = [float(last[f"member/{5 * c + j}/eval/episode_return"]) for j in range(5)]
        assert out["iqm"][c, -1] == pytest.approx(trim_mean(scores, 0.25))
        assert out["low"][c, -1] <= out["iqm"][c, -1] <= out["high"][c, -1]
    assert out["x"][-1] == STEPS * 16  # env steps per member
    assert (tmp_path / "sweep.png").stat().st_size > 1000


# ---- recipes -----------------------------------------------------------------------
def load(*overrides, recipe="ppo"):
    return config.load(RECIPES / "configs" / f"{recipe}.yaml", list(overrides))


@pytest.mark.parametrize("recipe", ["ppo", "a2c"])
def test_recipe_sweep_section_builds_a_sweep_seeded_from_trainer_seed(recipe):
    cfg = load("sweep.seeds=3", "sweep.hyperparams.lr=[1e-3,3e-3]",
               "sweep.hyperparams.ent_coef=[0.0,0.01]", "trainer.seed=10", recipe=recipe)
    module = build_module(recipe, cfg)
    assert isinstance(module, Sweep) and module.seeds == (10, 11, 12)
    assert module.configs[1] == {"lr": 1e-3, "ent_coef": 0.01} and module.population_size == 12
    assert type(module.module).__name__ == recipe.upper()
    assert not isinstance(build_module(recipe, load(recipe=recipe)), Sweep)  # no sweep asked
    trainer = config.make_trainer(cfg, logger=False, enable_progress_bar=False)
    per_member = trainer.budget.max_env_steps
    recipe_sweep.before_fit(trainer, module, recipe)
    assert trainer.budget.total(module.population_size).max_env_steps == per_member * 12
    assert sum(isinstance(c, sweep_summary.SweepSummary) for c in trainer.callbacks) == 1


def test_pqn_recipe_sweeps_seeds_and_its_traced_hyperparameters():
    cfg = config.load(RECIPES / "configs" / "pqn_minatar.yaml",
                      ["sweep.seeds=3", "sweep.hyperparams.lr=[1e-4,3e-4]", "trainer.seed=5"],
                      defaults=RECIPES / "configs" / "pqn.yaml")
    module = build_module("pqn", cfg)
    assert isinstance(module, Sweep) and module.seeds == (5, 6, 7)
    assert module.configs[1] == {"lr": 3e-4} and module.population_size == 6
    assert type(module.module).__name__ == "PQN"


@pytest.mark.slow
@pytest.mark.default_emitters
def test_a_pqn_member_reproduces_its_single_run_bit_for_bit(tmp_path):
    """PQN's epsilon schedule and Q(lambda) targets per member: member 1 (seed 1)
    without vmap equals ``Trainer(seed=1)`` alone, bit for bit."""
    from jaxtrainer.algorithms import PQN

    def pqn():
        return PQN(num_envs=2, num_steps=8, update_epochs=1, num_minibatches=1, eval_episodes=2,
                   hidden_sizes=(8,))

    swept = fit(Sweep(pqn(), seeds=2, vectorize=False), tmp_path / "sweep")
    single = fit(pqn(), tmp_path / "single", seed=1)
    member = jax.tree.map(lambda x: np.asarray(x)[1], jax.device_get(swept.state.members.params))
    for a, b in zip(jax.tree.leaves(jax.device_get(single.state.params)), jax.tree.leaves(member),
                    strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("overrides,match", [
    (["sweep.seeds=0"], r"sweep.seeds=0: expected a number of seeds >= 1"),
    (["sweep.hyperparams.lr=0.1"], r"sweep.hyperparams.lr=0.1: expected a list"),
    (["sweep.hyperparams.learning_rate=[0.1]"], r"'learning_rate' is not a key of the "
                                                 r"algorithm section \(the hyperparameters PPO "
                                                 r"varies per member: clip_eps, .*, lr, "),
    (["sweep.seed=3"], r"unknown config key 'sweep.seed'"),
])
def test_bad_recipe_sweeps_are_clear_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        build_module("ppo", load(*overrides))


def test_recipes_without_sweeps_reject_the_section():
    with pytest.raises(ValueError, match=r"unknown config key 'sweep.seeds': the 'dqn' recipe "
                                         r"cannot sweep; recipes that can: a2c, ppo, pqn"):
        load("sweep.seeds=2", recipe="dqn")


@pytest.mark.slow
@pytest.mark.default_emitters  # reads map1/map4, made in that subprocess
def test_a_members_policy_params_are_that_members(runs):
    """``load_policy(..., member=i)`` picks member ``i``'s params (and its
    normaliser-free PPO policy): those of the single run it reproduces."""
    from jaxtrainer.policy import params_of

    sweep, trainer = runs["map1"]
    spec, params = params_of(sweep, trainer.state, member=8)   # lr=3e-3, seed 3
    want = member_params(runs["map1"], 8)
    for got, ref in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(got), ref)
    _, first = params_of(sweep, trainer.state)                  # default: member 0
    for got, ref in zip(jax.tree.leaves(first), jax.tree.leaves(member_params(runs["map1"], 0)),
                        strict=True):
        np.testing.assert_array_equal(np.asarray(got), ref)
    with pytest.raises(ValueError, match=r"member=10: expected an index in \[0, 10\)"):
        params_of(sweep, trainer.state, member=10)
    with pytest.raises(ValueError, match="PPO has no members"):
        params_of(runs["single"][0], runs["single"][1].state, member=0)


@pytest.mark.slow
def test_a_live_sharded_sweep_state_gives_each_members_params(runs):
    """10 members sharded over 4 devices (3 a device, 2 padding): ``params_of`` on
    the state ``fit`` leaves equals its ``device_get`` copy's, on every device."""
    from jaxtrainer.policy import params_of

    sweep, trainer = runs["map4"]
    host = jax.device_get(trainer.state)
    for member in (0, 4, 9):  # on devices 0, 1 and 3
        _, got = params_of(sweep, trainer.state, member=member)
        _, want = params_of(sweep, host, member=member)
        for a, b, ref in zip(jax.tree.leaves(got), jax.tree.leaves(want),
                             jax.tree.leaves(member_params(runs["map4"], member)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            np.testing.assert_array_equal(np.asarray(a), ref)


@pytest.mark.slow
def test_resume_and_progress_count_env_steps_per_member(tmp_path, capsys):
    """A sweep's budget is per member in a recipe; what is printed counts the
    same way (the Trainer's counters stay the totals)."""
    def trainer(steps, ckpt_path=None):
        t = jt.Trainer(max_steps=steps, log_every_n_steps=1, default_root_dir=tmp_path,
                       enable_progress_bar=False, logger=False, compile_evaluation_ahead=False)
        t.fit(Sweep(tiny(), seeds=2), ckpt_path=ckpt_path)
        return t

    first = trainer(2)
    assert first.env_steps == 2 * 2 * 16  # the total over both members
    bar = jt.callbacks.RichProgressBar()
    bar.on_train_start(first, Sweep(tiny(), seeds=2))
    line = bar.plain_line(first, {})
    assert "env steps per member 32/32" in line, line
    capsys.readouterr()
    trainer(3, ckpt_path="last")
    assert "at step 2 (32 env steps per member x 2 members) of 3" in capsys.readouterr().out
    spent = jt.Trainer(max_env_steps=96, default_root_dir=tmp_path, enable_progress_bar=False,
                       logger=False, compile_evaluation_ahead=False)
    spent.fit(Sweep(tiny(), seeds=2), ckpt_path="last")
    err = capsys.readouterr().err
    assert "budget of 3 training steps (max_env_steps=48 per member x 2 members)" in err, err


@pytest.mark.default_emitters
@pytest.mark.slow
@pytest.mark.parametrize("first, then", [(4, 1), (1, 4)])
def test_a_sweep_resumes_on_another_device_count_where_one_run_ends(runs, tmp_path, first, then):
    """10 members are stored padded to 12 rows on 4 devices (copies of the last) and as
    10 on one: the step-2 checkpoint of either (of a 3-step run) resumes on the other,
    and the run ends bit for bit where one uninterrupted run on one device does."""
    checkpoint = Path(runs[f"map{first}"][1].log_dir) / "checkpoints" / str(STEPS - 1)
    resumed = jt.Trainer(strategy="pmap" if then > 1 else "single", devices=then, seed=0,
                         max_steps=STEPS, log_every_n_steps=1, default_root_dir=tmp_path,
                         enable_progress_bar=False, logger=False, compile_evaluation_ahead=False)
    resumed.fit(Sweep(tiny(), seeds=5, hyperparams={"lr": LRS}, vectorize=False),
                ckpt_path=checkpoint)
    assert resumed.global_step == STEPS
    straight, again = (jax.device_get(t.state.members) for t in (runs["map1"][1], resumed))
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(again), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a)[:10], np.asarray(b)[:10])
