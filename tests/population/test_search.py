"""Hyperparameter search in one program: spaces, sampling, successive halving
at rungs (new trials or exploited copies), search.csv, the recipe section, and
the same search on 4 devices.

One module-scoped set of tiny PPO searches (CartPole, 2 envs x 8 steps, 6
updates, rungs after updates 2 and 4) serves the tests that train:

* ``one``: 3 trials at a time x 2 seeds (6 members) on 1 device, members one
  after another (``vectorize=False``), evaluated at the end;
* ``four``: the same search on 4 devices with pmap (padded to 8);
* ``exploit``: 4 members, ``replace="exploit"``.

The tests that read ``one`` run in the default-emitters subprocess (tests/conftest.py),
where the 1-vs-4-device test makes it: it is made once a run.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms import PPO
from jaxtrainer.population import (
    Choice,
    OptunaSearch,
    Search,
    SearchReport,
    parse_space,
    sample_trials,
)
from jaxtrainer.population.pbt import Hyperparam
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import build_module
from tests._support.fits import Fits
from tests.population.test_pbt import CountCompiles

RECIPES = Path(__file__).parents[2] / "recipes"
SPACE = {"lr": "loguniform(1e-4,1e-2)", "ent_coef": "choice([0.0,0.01,0.02])"}
STEPS, RUNGS = 6, (2, 4)


@contextlib.contextmanager
def _logged_compiles():
    """The messages JAX logs with ``jax_log_compiles`` while the block runs (a list)."""
    compiled: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: compiled.append(record.getMessage())
    logging.getLogger("jax").addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    try:
        yield compiled
    finally:
        jax.config.update("jax_log_compiles", False)
        logging.getLogger("jax").removeHandler(handler)


def tiny() -> PPO:
    return PPO(num_envs=2, num_steps=8, update_epochs=1, num_minibatches=1, eval_episodes=2,
               hidden_sizes=(8,))


def fit(module, root, devices=1, callbacks=(), eval_every=None):
    trainer = jt.Trainer(strategy="pmap" if devices > 1 else "single", devices=devices,
                         max_steps=STEPS, log_every_n_steps=1, default_root_dir=root,
                         eval_every_n_steps=eval_every,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False,
                         compile_evaluation_ahead=eval_every is not None,
                         callbacks=list(callbacks))
    trainer.fit(module)
    return trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")

    def one():
        compiles, report = CountCompiles(), SearchReport()
        search = Search(tiny(), SPACE, members=3, seeds=2, rungs=RUNGS, vectorize=False, seed=3)
        trainer = fit(search, root / "one", callbacks=[compiles, report], eval_every=STEPS)
        return {"one": (search, trainer), "compiles": compiles.events, "report": report}

    def four():
        search = Search(tiny(), SPACE, members=3, seeds=2, rungs=RUNGS, vectorize=False, seed=3)
        return {"four": (search, fit(search, root / "four", devices=4))}

    def exploit():
        search = Search(tiny(), SPACE, members=4, rungs=RUNGS, replace="exploit")
        return {"exploit": (search, fit(search, root / "exploit"))}

    return Fits({"one": one, "compiles": one, "report": one, "four": four, "exploit": exploit})


# ---- spaces and sampling (no compile) ------------------------------------------------
def test_spaces_parse_from_their_written_forms():
    assert parse_space("lr", "loguniform(1e-5,1e-2)") == Hyperparam(1e-5, 1e-2, log=True)
    assert parse_space("ent_coef", "uniform(0,0.05)") == Hyperparam(0.0, 0.05, log=False)
    assert parse_space("gamma", "choice([0.95,0.99])") == Choice((0.95, 0.99))
    assert parse_space("gamma", "choice(0.95, 0.99)") == Choice((0.95, 0.99))
    assert parse_space("gamma", [0.9, 0.99]) == Choice((0.9, 0.99))


@pytest.mark.parametrize("spec, match", [
    ("gaussian(0,1)", r"search.space.x='gaussian\(0,1\)': expected uniform\(low,high\)"),
    ("uniform(1)", "takes two numbers"),
    ("loguniform(0,1)", r"loguniform needs low > 0; use uniform\(low,high\) for a range from 0"),
    ("uniform(2,1)", "need low < high"),
    ("choice([])", "expected distinct numbers"),
    ("choice([a,b])", "expected numbers"),
])
def test_bad_spaces_name_the_key_and_the_forms(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_space("x", spec)


def test_trials_are_reproducible_inside_their_spaces_and_sobol_is_even():
    spaces = {"lr": parse_space("lr", "loguniform(1e-5,1e-2)"),
              "c": parse_space("c", "choice([1,2,3,4])")}
    a, b = sample_trials(spaces, 32, "sobol", seed=1), sample_trials(spaces, 32, "sobol", seed=1)
    np.testing.assert_array_equal(a["lr"], b["lr"])
    assert a["lr"].dtype == np.float32 and a["lr"].shape == (32,)
    assert 1e-5 <= a["lr"].min() and a["lr"].max() <= 1e-2
    # 32 Sobol points put exactly 8 in each quarter of every axis; random ones rarely do
    np.testing.assert_array_equal(np.unique(a["c"], return_counts=True)[1], [8, 8, 8, 8])
    decades = np.floor(np.log10(a["lr"]))
    assert set(decades) == {-5, -4, -3}
    r = sample_trials(spaces, 32, "random", seed=1)
    assert not np.array_equal(r["lr"], a["lr"])
    with pytest.raises(ValueError, match="search.sampler='grid': choose one of random, sobol"):
        sample_trials(spaces, 4, "grid")


@pytest.mark.parametrize("kwargs, match", [
    (dict(space={}), "the space is empty"),
    (dict(members=1), r"search.members=1: expected an int >= 2"),
    (dict(rungs=(4, 2)), r"search.rungs=\[4, 2\]: expected strictly increasing"),
    (dict(fraction=0.7), "search.fraction=0.7"),
    (dict(replace="kill"), "search.replace='kill': choose one of sample, exploit"),
])
def test_bad_searches_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Search(tiny(), **{"space": SPACE, **kwargs})


# ---- one program, rungs, history ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.default_emitters  # reads the fit `one`, made in that subprocess
def test_one_compile_and_the_worst_half_stops_at_each_rung(runs):
    search, trainer = runs["one"]
    assert runs["compiles"] == [] and set(trainer.compile_seconds) == {"train", "eval"}
    state = jax.device_get(trainer.state)
    assert search.population_size == 6 and search.stopped_per_rung == 1
    assert search.trial_count == 5 and int(state.next_trial) == 5  # 3 first + 1 a rung
    stopped = np.asarray(state.stopped)
    assert (stopped == 0).sum() == 1 and (stopped == 1).sum() == 1
    first = np.asarray(state.history)[:3, 0]  # every first trial was ranked at rung 0
    assert not np.isnan(first).any()
    loser = int(np.flatnonzero(stopped == 0)[0])
    assert first[loser] == first.min()  # the worst trial (mean over its seeds) stopped
    # a trial's two members share its hyperparameters and differ in their seeds
    trial = np.asarray(state.trial)
    assert (trial[0::2] == trial[1::2]).all()
    hp, params = state.members.hyperparams, jax.tree.leaves(state.members.params)[0]
    for slot, t in enumerate(trial):
        assert hp["lr"][slot] == pytest.approx(float(state.table["lr"][t]))
        assert hp["ent_coef"][slot] in np.float32([0.0, 0.01, 0.02])
    for a in (0, 2, 4):
        assert not np.array_equal(params[a], params[a + 1])


@pytest.mark.slow
@pytest.mark.default_emitters  # reads the fit `one`, made in that subprocess
def test_search_csv_holds_every_trial_and_the_final_rows(runs, capsys):
    search, trainer = runs["one"]
    rows = list(csv.DictReader(open(Path(trainer.log_dir) / "search.csv")))
    assert list(rows[0]) == ["trial", "lr", "ent_coef", "rung", "step", "env_steps", "fitness",
                             "status", "eval", "eval_seeds", "eval_iqm", "eval_iqm_ci_low",
                             "eval_iqm_ci_high"]
    assert {int(r["trial"]) for r in rows} == set(range(5))
    state = jax.device_get(trainer.state)
    stopped = [r for r in rows if r["status"] == "stopped"]
    assert len(stopped) == 2 and {r["step"] for r in stopped} == {"2", "4"}
    final = [r for r in rows if r["rung"] == "final"]
    trial = np.asarray(state.trial)
    assert sorted(int(r["trial"]) for r in final) == sorted(set(trial.tolist()))
    for r in final:  # 3 trial slots, 1 stopped a rung: trials 3 and 4 train the rest of it
        start = {3: RUNGS[0], 4: RUNGS[1]}.get(int(r["trial"]), 0)
        assert (r["step"], r["env_steps"]) == (str(STEPS - start), str((STEPS - start) * 16))
        assert r["status"] == ("partial" if start else "complete")
    for r in final:  # eval: the mean of the trial's members' own evaluations, and their IQM
        slots = np.flatnonzero(trial == int(r["trial"]))
        seeds = [trainer.callback_metrics[f"member/{i}/eval/episode_return"] for i in slots]
        assert [float(v) for v in r["eval_seeds"].split(";")] == pytest.approx(seeds)
        assert float(r["eval"]) == pytest.approx(np.mean(seeds))
        assert float(r["eval_iqm_ci_low"]) <= float(r["eval_iqm"]) <= float(r["eval_iqm_ci_high"])
    from jaxtrainer.population.search_report import _best_table

    table = _best_table(runs["report"].rows, list(search.spaces))
    assert "IQM [95% CI]" in table
    assert table.splitlines()[0] == ("search: 5 trials started, 2 stopped at a rung, 2 complete, "
                                     "1 partial; the best by fitness:")
    shown = [line.split() for line in table.splitlines()[2:]]
    fitness = [float(line[4]) for line in shown]  # trial, lr, ent_coef, env steps, fitness
    assert fitness == sorted(fitness, reverse=True) and len(shown) == 3


@pytest.mark.slow
@pytest.mark.default_emitters
def test_six_members_on_four_devices_equal_one_device(runs):
    (search, four), (_, one) = runs["four"], runs["one"]
    assert search.layout.padded_size == 8
    a, b = jax.device_get(one.state), jax.device_get(four.state)
    for name in ("trial", "fitness"):
        np.testing.assert_array_equal(np.asarray(getattr(a, name))[:6],
                                      np.asarray(getattr(b, name))[:6])
    for name in ("history", "stopped", "final", "next_trial"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    for x, y in zip(jax.tree.leaves(a.members.params), jax.tree.leaves(b.members.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x)[:6], np.asarray(y)[:6])


@pytest.mark.slow
def test_exploit_copies_better_members_and_records_their_new_values(runs):
    search, trainer = runs["exploit"]
    state = jax.device_get(trainer.state)
    assert int(state.next_trial) == 4 + 2 * 2 and int(state.exploits) == 4
    hp = state.members.hyperparams
    for slot, t in enumerate(np.asarray(state.trial)):
        assert float(hp["lr"][slot]) == float(state.table["lr"][t])
        assert 1e-4 <= float(hp["lr"][slot]) <= 1e-2


# ---- the recipe section ---------------------------------------------------------------
@pytest.mark.parametrize("overrides, match", [
    (["search.method=grid"], "search.method='grid': choose one of random, sobol, asha"),
    (["search.method=random", "search.space.learning_rate=uniform(0,1)"],
     "search.space.learning_rate: 'learning_rate' is not a key of the algorithm section"),
    (["search.method=random", "search.space.lrr=uniform(0,1)"],  # it listed every algorithm key
     r"'lrr' is not a key of the algorithm section; did you mean 'lr'\? \(the hyperparameters "
     r"PPO varies per member: clip_eps, ent_coef, gae_lambda, gamma, lr, max_grad_norm, vf_coef\)$"),
    (["search.method=random", "search.space.lr=uniform(0,1)", "sweep.seeds=2"],
     "a run is either a search or a sweep"),
    (["search.method=asha", "search.space.lr=uniform(0,1)", "search.rungs=[100]"],
     r"search.rungs: \[100\] env steps is below one training step \(512"),
    (["search.method=asha", "search.space.lr=uniform(0,1)", "search.rungs=[4096,2048]"],
     r"search.rungs=\[4096, 2048\]: expected strictly increasing env steps per member"),
])
def test_bad_recipe_searches_are_clear_errors(overrides, match):
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", overrides)
    with pytest.raises(ValueError, match=match):
        build_module("ppo", cfg)


def test_recipe_search_section_builds_a_search():
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", [
        "search.method=asha", "search.members=32", "search.space.lr=loguniform(1e-5,1e-2)",
        "search.space.ent_coef=uniform(0,0.05)", "trainer.seed=7"])
    search = build_module("ppo", cfg)
    assert isinstance(search, Search) and search.population_size == 32
    # 32 trials share search.runs=8 runs: 125,000 env steps (244 updates) a slot
    assert search.budget_share == 0.25
    assert search.rungs == (30, 61, 122)  # 1/8, 1/4, 1/2 of 244 updates
    assert search.seed == 7 and search.sampler == "random"
    assert search.spaces["lr"] == Hyperparam(1e-5, 1e-2, True)
    with pytest.raises(ValueError, match="unknown config key 'search.method': the 'cma_es' recipe "
                                         "cannot search; recipes that can: a2c, ddpg, dqn, "
                                         "impala, openes, ppo, sac, td3"):
        config.load(RECIPES / "configs" / "cma_es.yaml", ["search.method=random"])


def test_search_runs_share_the_budget_between_member_slots(capsys):
    from jaxtrainer.inference.saved_run import make_trainer
    from jaxtrainer.recipes import _search as search_section

    space = ["search.method=asha", "search.space.lr=loguniform(1e-5,1e-2)"]
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", [*space, "search.members=32"])
    module, trainer = build_module("ppo", cfg), config.make_trainer(cfg)
    search_section.before_fit(trainer, module, cfg)
    assert trainer.budget.total(32).max_env_steps == 125_000 * 32  # the Trainer counts every member
    assert ("search of 32 trials at once sharing 8 runs' budget (search.runs): each member slot "
            "trains 125,000 env steps of a run's 500,000") in capsys.readouterr().out
    assert make_trainer(module, cfg).budget.total(32).max_env_steps == 125_000 * 32  # what eval rebuilds
    for overrides, per_slot in ((["search.members=8"], 500_000), (["search.members=4"], 500_000),
                                (["search.members=32", "search.runs=null"], 500_000),
                                (["search.members=32", "search.runs=16"], 250_000),
                                (["search.members=16", "trainer.max_env_steps=null",
                                  "trainer.max_steps=100"], None)):
        cfg = config.load(RECIPES / "configs" / "ppo.yaml", [*space, *overrides])
        module, trainer = build_module("ppo", cfg), config.make_trainer(cfg)
        search_section.before_fit(trainer, module, cfg)
        if per_slot is None:
            total = trainer.budget.total(module.population_size)
            assert total.max_steps == 50 and total.max_env_steps is None
        else:
            total = trainer.budget.total(module.population_size)
            assert total.max_env_steps == per_slot * module.population_size
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", [*space, "search.runs=0"])
    with pytest.raises(ValueError, match=r"search.runs=0: expected a positive int"):
        build_module("ppo", cfg)
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", [*space, "search.members=0"])
    with pytest.raises(ValueError, match=r"search.members=0: expected an int >= 2"):
        build_module("ppo", cfg)


# ---- Optuna's samplers, round by round -------------------------------------------------
class SendSigterm(jt.Callback):
    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)


def optuna_fit(root, ckpt_path=None, callbacks=(), devices="auto", vectorize=True, members=4,
               objective="evaluation", max_steps=12, **trainer_kw):
    search = Search(tiny(), SPACE, members=members, rungs=(2,), sampler="optuna",
                    rounds=max_steps // 4, vectorize=vectorize)
    optuna_cb = OptunaSearch("tpe", seed=5, objective=objective)
    trainer = jt.Trainer(max_steps=max_steps, log_every_n_steps=2, default_root_dir=root,
                         devices=devices,
                         enable_progress_bar=False, compile_evaluation_ahead=False,
                         callbacks=[optuna_cb, SearchReport(print_table=False), *callbacks],
                         **trainer_kw)
    trainer.fit(search, ckpt_path=ckpt_path)
    return search, trainer, optuna_cb


@pytest.mark.slow
def test_optuna_rounds_resume_after_sigterm_and_a_move_without_asking_twice(tmp_path):
    """3 rounds of 4 trials (and 2 more a round, for the slots the rung frees):
    SIGTERM in round 0; the run directory is moved; the resumed run tells what
    was running and asks rounds 1 and 2, with a sampler that does not draw round
    0's trials again (fewer trials than TPE's random start-up: a sampler seeded
    as before would)."""
    import optuna

    with pytest.raises(jt.Preempted):
        optuna_fit(tmp_path / "here", callbacks=[SendSigterm()])
    shutil.move(tmp_path / "here", tmp_path / "there")  # or copied to another machine
    study_db = tmp_path / "there" / "version_0" / "study.db"
    assert study_db.exists()
    study = optuna.load_study(study_name="search", storage=f"sqlite:///{study_db}")
    before = study.get_trials(deepcopy=False)
    assert len(before) == 6  # round 0 asked
    assert sum(t.state == optuna.trial.TrialState.RUNNING for t in before) == 6  # round 0
    assert not any(str(tmp_path) in str(t.user_attrs) for t in before)  # no path as identity
    search, trainer, cb = optuna_fit(tmp_path / "there", ckpt_path="last")
    assert trainer.log_dir == str(tmp_path / "there" / "version_0") and trainer.global_step == 12
    assert search.describe_member(trainer.state, 0).endswith(
        "(of round 3: earlier rounds' trials are no longer in the state; their results are in "
        "search.csv)")
    after = cb.study.get_trials(deepcopy=False)
    ids = sorted(t.user_attrs["search_trial"] for t in after)
    assert len(after) == 18 and ids == list(range(18))  # grown, nothing asked twice
    drawn = {tuple(sorted(t.params.items())) for t in after}
    assert len(drawn) == 18  # a resumed sampler does not draw its first trials again
    states = [t.state for t in after]
    assert optuna.trial.TrialState.RUNNING not in states
    assert states.count(optuna.trial.TrialState.PRUNED) == 6  # 2 a round
    # the state ran what the study asked, and the study holds what search.csv says
    table = jax.device_get(trainer.state.table)
    rows = {int(r["trial"]): r for r in csv.DictReader(open(Path(trainer.log_dir) / "search.csv"))
            if r["rung"] == "final"}
    for t in after:
        k = t.user_attrs["search_trial"]
        assert float(table["lr"][k]) == pytest.approx(t.params["lr"], rel=1e-6)
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert t.value == pytest.approx(float(rows[k]["eval"]))


@pytest.mark.slow
def test_an_optuna_search_on_four_devices_equals_one_device(tmp_path):
    """Members one after another (vectorize=False; 6 members, 2 a device over 4
    with padding), told their training fitness: the same trials are asked and
    told the same values."""
    runs = [optuna_fit(tmp_path / str(n), devices=n, vectorize=False, members=6,
                       objective="fitness", max_steps=8, logger=False,
                       enable_checkpointing=False)[2].study for n in (1, 4)]
    one, four = ([(t.params, t.state, t.value) for t in study.trials] for study in runs)
    assert len(one) == 2 * (6 + 3) and one == four


@pytest.mark.parametrize("recipe, name", [("a2c", "ent_coef"), ("impala", "lr"), ("dqn", "tau"),
                                          ("sac", "policy_lr"), ("td3", "actor_lr"),
                                          ("ddpg", "gamma")])
def test_every_recipe_with_traced_hyperparameters_can_search_them(recipe, name):
    cfg = config.load(RECIPES / "configs" / f"{recipe}.yaml", [
        "search.method=sobol", "search.members=4", f"search.space.{name}=uniform(0.9,0.99)"])
    search = build_module(recipe, cfg)
    assert isinstance(search, Search) and search.sampler == "sobol"
    search.configure_budget(100)
    search.validate(1)  # the name is one of the module's traced hyperparameters
    assert 0.9 <= search.trials[name].min() and search.trials[name].max() <= 0.99


def test_a_space_over_a_value_that_is_not_traced_is_refused_before_compiling():
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", [
        "search.method=random", "search.space.num_envs=choice([4,8])"])
    with pytest.raises(ValueError, match=r"search: hyperparams \['num_envs'\] are not in PPO's "
                                         r"state.hyperparams; choose from"):
        search = build_module("ppo", cfg)
        search.configure_budget(100)
        search.validate(1)



def test_optuna_or_an_env_family_not_installed_is_one_line_and_writes_nothing(
        tmp_path, capsys, monkeypatch):
    """Without the search (or marl) extra: one line naming it, status 2, no run directory
    (the package hidden as ``sys.modules[name] = None`` hides it from an import)."""
    from jaxtrainer.commands import _cli as cli

    for module, args, said in (
            ("optuna", ["search.method=optuna", "search.space.lr=loguniform(1e-5,1e-2)"],
             'search.method=optuna needs optuna: pip install -e ".[search]"'),
            ("jaxmarl", ["env.name=jaxmarl/MPE_simple_spread_v3"], 'pip install -e ".[marl]"')):
        with monkeypatch.context() as hidden:
            hidden.setitem(sys.modules, module, None)
            with pytest.raises(SystemExit) as stop:
                cli.main(["fit", "ppo", *args, f"trainer.default_root_dir={tmp_path}"])
        lines = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(lines) == 1 and said in lines[0], lines
        assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("url, reason", [
    ("notaurl", "Could not parse SQLAlchemy URL"),
    ("sqlite:////nonexistent/dir/study.db", "unable to open database file"),
])
def test_a_storage_that_cannot_open_is_one_line_and_writes_nothing(tmp_path, capsys, url, reason):
    from jaxtrainer.commands import _cli as cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["fit", "ppo", "search.method=optuna", "search.space.lr=loguniform(1e-5,1e-2)",
                  f"search.storage={url}", f"trainer.default_root_dir={tmp_path / 'runs'}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(lines) == 1, lines
    assert f"search.storage={url!r}: " in lines[0] and reason in lines[0]
    assert "expected a database URL Optuna can open" in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_an_evolution_strategy_searches_its_learning_rate_and_std(tmp_path, capsys):
    """`openes` with a search: each member a whole ES run (8 solutions a
    generation), one training step a generation of every member; one compile;
    `jaxtrainer eval --member best` evaluates the member the run reported."""

    from jaxtrainer.commands import _cli as cli
    from jaxtrainer.commands import fit as recipe_fit

    with _logged_compiles() as compiled:
        result = recipe_fit.run([
            "search.method=asha", "search.members=4", "search.space.learning_rate=loguniform(1e-3,1e-1)",
            "search.space.std=uniform(0.02,0.2)", "trainer.max_generations=8",
            "trainer.population_size=8", "trainer.log_every_n_generations=2", "trainer.devices=1",
            "algorithm.hidden_sizes=[4]", "algorithm.eval_episodes=4",
            "trainer.enable_progress_bar=false", f"trainer.default_root_dir={tmp_path}"], "openes")
    # initial state, training (every rung and replacement in it), evaluation
    assert sum(m.startswith("Compiling jit(body)") for m in compiled) == 3, compiled
    out = capsys.readouterr().out
    assert "search: 10 trials started, 6 stopped at a rung" in out  # rungs at 1, 2, 4 generations
    assert "(the member with the best fitness/mean)" in out
    rows = list(csv.DictReader(open(tmp_path / "version_0" / "search.csv")))
    assert {r["status"] for r in rows} >= {"stopped", "continued", "complete", "partial"}
    for r in rows:
        assert 1e-3 <= float(r["learning_rate"]) <= 1e-1 and 0.02 <= float(r["std"]) <= 0.2
    assert cli.main(["eval", str(tmp_path / "version_0"), "--member", "best"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ", trial " in lines[1] and "learning_rate=" in lines[1] and "std=" in lines[1]
    assert float(lines[3].split("mean=")[1].split()[0]) == pytest.approx(
        result["eval/episode_return"])


# ---- a recipe's search: one program, plot, eval --member best, run identity -------------
@pytest.mark.slow
def test_a_recipe_asha_search_compiles_three_programs_and_is_plotted_evaluated_and_told_apart(
        tmp_path, capsys):
    """`fit ppo search.method=asha` of 4 members: the initial state, one training
    program (every member, rung and new trial in it) and one evaluation program
    for all members; nothing compiles again at a rung. `jaxtrainer plot RUN`
    draws its trials, `jaxtrainer eval RUN --member best` evaluates the member
    the run reported, and the run is told apart from single runs."""
    from jaxtrainer.commands import _cli as cli
    from jaxtrainer.commands import fit as recipe_fit
    from jaxtrainer.commands._search_plot import _log_axis
    from jaxtrainer.rundir import _run_kind as run_kind

    with _logged_compiles() as compiled:
        result = recipe_fit.run([
            "search.method=asha", "search.members=4", "search.space.lr=loguniform(1e-5,1e-2)",
            "search.space.ent_coef=uniform(0,0.05)", "trainer.max_steps=8", "trainer.devices=1",
            "search.runs=null", "algorithm.num_envs=2", "algorithm.num_steps=8",
            "algorithm.update_epochs=1", "algorithm.num_minibatches=1", "algorithm.hidden_sizes=[8]",
            "algorithm.eval_episodes=2", "trainer.log_every_n_steps=2",
            "trainer.enable_progress_bar=false", f"trainer.default_root_dir={tmp_path}"], "ppo")
    programs = [m.split(" with ")[0] for m in compiled if m.startswith("Compiling jit(body)")]
    assert len(programs) == 3, compiled
    out = capsys.readouterr().out
    assert "search: 10 trials started, 6 stopped at a rung" in out
    assert "(the member with the best train/episode_return)" in out
    best_row = out.split("the best by fitness:\n")[1].splitlines()[1].split()
    run = tmp_path / "version_0"
    assert run_kind.of_run(run).kind == "search (asha) of 4 members"
    png = tmp_path / "search.png"
    assert cli.main(["plot", str(run), "-o", str(png)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {png}: 10 trials of a search (6 stopped at a rung) against lr")
    assert f"the best trial by fitness: {best_row[0]} (lr=" in said  # the table's first
    draws = np.random.default_rng(0)
    assert _log_axis(10 ** draws.uniform(-5, -2, 64)) and not _log_axis(draws.uniform(0, 0.05, 64))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["eval", str(run), "--member", "best"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "(step 8, env steps 128 per member x 4 members); seed 0" in lines[0]
    assert lines[1].startswith("member ") and ", trial " in lines[1] and "lr=" in lines[1]
    assert lines[1].split(", trial ")[1].split(":")[0] == best_row[0]  # the table's first trial
    mean = float(lines[3].split("mean=")[1].split()[0])
    assert mean == pytest.approx(result["eval/episode_return"])
