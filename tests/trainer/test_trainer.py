"""Trainer loop semantics: budgets, host syncs, determinism, bad input."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import metrics as metrics_lib
from tests._support.modules import Draws, Regression

QUIET = dict(compile_evaluation_ahead=False, enable_progress_bar=False, enable_checkpointing=False, logger=False)


class Recorder(jt.Callback):
    def __init__(self):
        self.steps, self.evals = [], []

    def on_train_steps_end(self, trainer, module, metrics):
        self.steps.append(dict(metrics))

    def on_evaluation_end(self, trainer, module, metrics):
        self.evals.append(dict(metrics))


@pytest.mark.parametrize("strategy", ["single", "pmap"])
def test_max_env_steps_stops_after_the_last_whole_step(run_dir, strategy):
    module = Regression(num_samples=512)
    trainer = jt.Trainer(strategy=strategy, max_env_steps=500_000, log_every_n_steps=100,
                         default_root_dir=run_dir, **QUIET)
    trainer.fit(module)
    assert trainer.global_step == 976
    assert trainer.env_steps == 976 * 512 == 499_712


def test_metrics_are_fetched_once_per_log_interval(run_dir, monkeypatch):
    """100 steps with log_every_n_steps=10 fetch metrics 10 times (a callback
    that may read the state at every boundary: one call per interval), and no
    implicit device-to-host transfer happens anywhere else."""
    calls = []
    real = metrics_lib.rows_to_host
    monkeypatch.setattr(metrics_lib, "rows_to_host", lambda m, n, *a: calls.append(n) or real(m, n, *a))
    rec = Recorder()
    trainer = jt.Trainer(strategy="pmap", max_steps=100, log_every_n_steps=10,
                         default_root_dir=run_dir, callbacks=[rec], **QUIET)
    with jax.transfer_guard_device_to_host("disallow"):
        trainer.fit(Regression())
    assert calls == [1] * 10
    assert [m["step"] for m in rec.steps] == list(range(10, 101, 10))
    assert all(isinstance(v, float | int) for m in rec.steps for v in m.values())


class MetricsOnly(Recorder):
    def needs_state(self, trainer, module, step):
        return False


def test_log_intervals_are_fused_when_no_callback_needs_the_state(run_dir, monkeypatch):
    """With metric-only callbacks: 100 steps with log_every_n_steps=10 fetch
    metrics fewer than 10 times (intervals fused into one call up to
    sync_every_n_seconds), callbacks still get every interval at its own step,
    and the run is bit for bit the one-call-per-interval run."""
    calls = []
    real = metrics_lib.rows_to_host
    monkeypatch.setattr(metrics_lib, "rows_to_host", lambda m, n, *a: calls.append(n) or real(m, n, *a))
    runs = {}
    for sync in (0, 60.0):
        calls.clear()
        rec = MetricsOnly()
        trainer = jt.Trainer(strategy="pmap", max_steps=100, log_every_n_steps=10,
                             default_root_dir=run_dir, callbacks=[rec], sync_every_n_seconds=sync,
                             **QUIET)
        with jax.transfer_guard_device_to_host("disallow"):
            trainer.fit(Regression())
        runs[sync] = (list(calls), rec.steps, jax.device_get(trainer.state))
    assert runs[0][0] == [1] * 10
    assert runs[60.0][0] == [1, 9]            # the first call measures the speed
    assert [m["step"] for m in runs[60.0][1]] == list(range(10, 101, 10))
    for a, b in zip(runs[0][1], runs[60.0][1], strict=True):
        assert a["loss"] == b["loss"] and a["step"] == b["step"]
    for a, b in zip(jax.tree.leaves(runs[0][2]), jax.tree.leaves(runs[60.0][2]), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="sync_every_n_seconds=-1"):
        jt.Trainer(max_steps=1, sync_every_n_seconds=-1)


def test_one_compilation_serves_intervals_of_every_length(run_dir, monkeypatch):
    """An odd budget leaves a short last interval and the evaluation at 15 a
    segment of 5 steps; nothing recompiles (the strategy compiles ahead of
    time, so a call needing another program raises). The evaluation cuts no
    log interval: rows at 10, 20 and the budget's end."""
    compiles = []
    real = jt.SingleDeviceStrategy._compile
    monkeypatch.setattr(jt.SingleDeviceStrategy, "_compile",
                        lambda self, fn, *a, **k: compiles.append(1) or real(self, fn, *a, **k))
    rec = Recorder()
    trainer = jt.Trainer(strategy="single", max_steps=25, log_every_n_steps=10,
                         eval_every_n_steps=15, default_root_dir=run_dir, callbacks=[rec], **QUIET)
    trainer.fit(Regression())
    assert len(compiles) == 2  # one training program, one evaluation program
    assert [m["step"] for m in rec.steps] == [10, 20, 25]
    assert [m["step"] for m in rec.evals] == [15]
    assert set(trainer.compile_seconds) == {"train", "eval"}


def test_same_seed_same_run_different_seed_different_run(run_dir):
    def run(seed):
        t = jt.Trainer(strategy="pmap", max_steps=6, seed=seed, default_root_dir=run_dir, **QUIET)
        t.fit(Draws())
        return np.asarray(t.state["draws"]), t.callback_metrics["u"]

    a, b, c = run(1), run(1), run(2)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]
    assert not np.array_equal(a[0], c[0])


@pytest.mark.slow
def test_eager_mode_matches_compiled(run_dir):
    compiled = jt.Trainer(strategy="single", max_steps=1, default_root_dir=run_dir, **QUIET)
    compiled.fit(Regression(optimizer="sgd"))
    eager = jt.Trainer(strategy="single", max_steps=1, jit=False, default_root_dir=run_dir, **QUIET)
    eager.fit(Regression(optimizer="sgd"))
    np.testing.assert_allclose(np.asarray(eager.state["params"]["w"]),
                               np.asarray(compiled.state["params"]["w"]), rtol=1e-6)


def test_masked_mean_with_no_samples_is_not_reported(run_dir):
    class NoEpisodes(Regression):
        def training_step(self, state, key):
            state, m = super().training_step(state, key)
            return state, {**m, "train/episode_return": jt.Mean.of(jax.numpy.ones(4),
                                                                    jax.numpy.zeros(4, bool))}

    rec = Recorder()
    jt.Trainer(strategy="pmap", max_steps=2, default_root_dir=run_dir, callbacks=[rec],
               **QUIET).fit(NoEpisodes())
    assert "train/episode_return" not in rec.steps[-1]
    assert "loss" in rec.steps[-1]


@pytest.mark.parametrize("kwargs,match", [
    (dict(max_steps=0), r"max_steps=0: expected a positive int"),
    (dict(max_steps=-3), r"max_steps=-3"),
    (dict(max_steps=5, log_every_n_steps=0), r"log_every_n_steps=0"),
    (dict(max_steps=5, strategy="tpu_pod"), r"unknown strategy 'tpu_pod'; choose one of: .*pmap"),
    (dict(max_env_steps=2.5e3 + 0.5), r"max_env_steps=2500.5: expected a positive int"),
])
def test_bad_trainer_arguments_fail_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jt.Trainer(**{**QUIET, **kwargs})


def test_whole_number_floats_are_budgets():
    # YAML reads 5e5 as a float
    assert jt.Trainer(max_env_steps=5e5, **QUIET).budget.max_env_steps == 500_000


def test_sizes_that_do_not_split_fail_before_compiling(run_dir, monkeypatch):
    compiled = []
    monkeypatch.setattr(jt.PmapStrategy, "compile_train",
                        lambda *a, **k: compiled.append(1))
    trainer = jt.Trainer(strategy="pmap", max_steps=2, default_root_dir=run_dir, **QUIET)
    with pytest.raises(ValueError, match=r"num_samples=6 cannot be split evenly over 4 devices"):
        trainer.fit(Regression(num_samples=6))
    assert not compiled


def test_max_env_steps_below_one_step_is_rejected(run_dir):
    trainer = jt.Trainer(max_env_steps=10, default_root_dir=run_dir, **QUIET)
    with pytest.raises(ValueError, match=r"max_env_steps=10 is less than one training step"):
        trainer.fit(Regression(num_samples=16))


def test_resume_from_a_relative_default_root_dir(tmp_path, monkeypatch):
    """ckpt_path="last" and a relative checkpoint path work with a relative
    default_root_dir (orbax itself wants absolute paths)."""
    monkeypatch.chdir(tmp_path)
    kw = dict(enable_progress_bar=False, logger=False, default_root_dir="runs")
    straight = jt.Trainer(max_steps=4, **kw)
    straight.fit(Regression())
    jt.Trainer(max_steps=2, **kw).fit(Regression())
    resumed = jt.Trainer(max_steps=4, **kw)
    resumed.fit(Regression(), ckpt_path="last")
    assert resumed.global_step == 4 and resumed.log_dir == "runs/version_1"
    np.testing.assert_array_equal(np.asarray(resumed.state["params"]["w"]),
                                  np.asarray(straight.state["params"]["w"]))
    again = jt.Trainer(max_steps=4, **kw)
    again.evaluate(Regression(), ckpt_path="runs/version_1/checkpoints/4")
    assert again.global_step == 4


class BadStep(jt.Module):
    """training_step returns something other than (state, dict of scalar metrics)."""

    def __init__(self, mode):
        self.mode = mode

    def init_state(self, key):
        return {"x": jax.numpy.zeros(3)}

    def training_step(self, state, key):
        return {"state": state, "list": (state, [1.0]), "vec": (state, {"vec": state["x"]}),
                "key": (state, {"k": key}), "str": (state, {"name": "run-1"}),
                "object": object()}[self.mode]


@pytest.mark.parametrize("mode,error,match", [
    ("state", TypeError, r"BadStep.training_step must return \(state, metrics.*got dict"),
    ("list", TypeError, r"got \(state, list\)"),
    ("vec", ValueError, r"metric 'vec': a metric must be a scalar.*shape \(3,\)"),
    ("key", ValueError, r"metric 'k': a PRNG key is not a metric"),
    # not JAX types: the step is traced under jit, whose own output check must not come first
    ("str", TypeError, r"BadStep.training_step metric 'name'"),
    ("object", TypeError, r"BadStep.training_step must return \(state, metrics.*got object"),
])
def test_a_bad_training_step_output_names_the_problem(run_dir, mode, error, match):
    with pytest.raises(error, match=match):
        jt.Trainer(strategy="single", max_steps=2, default_root_dir=run_dir, **QUIET).fit(BadStep(mode))


@pytest.mark.parametrize("ahead", [True, False])
def test_evaluation_compiles_ahead_in_the_background_or_when_first_needed(run_dir, monkeypatch,
                                                                           ahead):
    import threading

    compiled_in = []
    real = jt.SingleDeviceStrategy.compile_eval
    monkeypatch.setattr(jt.SingleDeviceStrategy, "compile_eval", lambda self, *a: compiled_in.append(
        threading.current_thread() is threading.main_thread()) or real(self, *a))
    trainer = jt.Trainer(strategy="single", max_steps=2, default_root_dir=run_dir,
                         **{**QUIET, "compile_evaluation_ahead": ahead})
    module = Regression()
    trainer.fit(module)
    trainer.wait_for_compilation()
    assert compiled_in == ([False] if ahead else [])   # background thread / not yet
    result = trainer.evaluate(module)
    assert compiled_in == ([False] if ahead else [True]) and "eval/mse" in result
    with pytest.raises(ValueError, match="compile_evaluation_ahead='no'"):
        jt.Trainer(max_steps=1, compile_evaluation_ahead="no")


def test_evaluate_runs_the_module_it_is_given(run_dir):
    """The evaluation compiled ahead for the fitted module is not reused for
    another module (it used to be: trainer.evaluate(other) returned the fitted
    module's result)."""
    class Scaled(Regression):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def evaluation_step(self, state, key):
            return {"eval/scaled": jax.numpy.asarray(self.factor, jax.numpy.float32)}

    trainer = jt.Trainer(strategy="single", max_steps=2, default_root_dir=run_dir,
                         **{**QUIET, "compile_evaluation_ahead": True})
    fitted = Scaled(1.0)
    trainer.fit(fitted)
    assert trainer.evaluate(Scaled(2.0))["eval/scaled"] == 2.0
    assert trainer.evaluate(fitted)["eval/scaled"] == 1.0
    assert [trainer.evaluate(Scaled(float(k)))["eval/scaled"] for k in (3, 4)] == [3.0, 4.0]


class KeyDraw(Regression):
    """:class:`Regression` (whose training uses no key) evaluating one uniform draw
    of its evaluation key."""

    def evaluation_step(self, state, key):
        return {"eval/draw": jax.random.uniform(key)}


def test_evaluate_with_a_seed_draws_that_seeds_keys_and_keeps_the_runs(run_dir):
    """``evaluate(module, seed=5)`` (``jaxtrainer eval --seed 5``) evaluates as a
    run of seed 5 at that step would; the run's own root key stays."""
    trainer = jt.Trainer(strategy="single", max_steps=2, seed=0, default_root_dir=run_dir, **QUIET)
    module = KeyDraw()
    trainer.fit(module)
    root = np.asarray(jax.random.key_data(trainer.root_key))
    own = trainer.evaluate(module)["eval/draw"]
    assert trainer.evaluate(module, seed=0)["eval/draw"] == own  # seed 0: the run's own key
    seeded = trainer.evaluate(module, seed=5)["eval/draw"]
    five = jt.Trainer(strategy="single", max_steps=2, seed=5, default_root_dir=run_dir / "5", **QUIET)
    five.fit(KeyDraw())
    assert seeded == five.evaluate(KeyDraw())["eval/draw"] and seeded != own
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(trainer.root_key)), root)
    with pytest.raises(ValueError, match=r"^seed='5': expected an int$"):
        trainer.evaluate(module, seed="5")


class Jump(jt.Callback):
    """At step 2, adds 100 to the state's step counter through ``update_state``."""

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == 2:
            trainer.update_state(lambda state: {**state, "step": state["step"] + 100})


def test_a_hook_changes_the_state_through_update_state_and_training_goes_on_from_it(run_dir):
    from tests._support import toys

    jump = Jump()
    trainer = jt.Trainer(strategy="single", max_steps=4, log_every_n_steps=1, callbacks=[jump],
                         default_root_dir=run_dir, **QUIET)
    trainer.fit(toys.Regression(per_device=False))
    assert int(trainer.state["step"]) == 104  # 2 steps, +100, 2 steps
    trainer.remove_callback(jump)
    assert jump not in trainer.callbacks
    with pytest.raises(ValueError):
        trainer.remove_callback(jump)
