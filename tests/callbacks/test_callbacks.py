"""Callbacks: hook order, error paths (the original exception surfaces), early
stopping, NaN guard, timer, learning-rate and throughput monitors, evaluation on
fresh episodes."""

import csv
import math
import os

import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import checkpoint as ckpt
from tests._support import toys

HOOKS = ["setup", "on_fit_start", "on_train_start", "on_train_steps_end", "on_evaluation_end",
         "on_save_checkpoint", "on_load_checkpoint", "on_train_end", "on_fit_end", "on_exception",
         "teardown"]


class Recorder(jt.Callback):
    def __init__(self, fail_at=None):
        self.calls, self.fail_at = [], fail_at

    def __getattribute__(self, name):
        if name in HOOKS:
            def hook(trainer, module, *args):
                self.calls.append((name, trainer.global_step))
                if name == "on_train_steps_end" and trainer.global_step == self.fail_at:
                    raise ValueError(f"original error at step {self.fail_at}")
            return hook
        return super().__getattribute__(name)


def test_hook_order_with_eval_and_checkpoints(run_dir):
    rec = Recorder()
    t = toys.trainer(run_dir, max_steps=4, log_every_n_steps=2, eval_every_n_steps=4,
                     callbacks=[rec, jt.ModelCheckpoint(every_n_steps=2, async_save=False)])
    t.fit(toys.Regression())
    assert rec.calls == [
        ("setup", 0), ("on_fit_start", 0), ("on_train_start", 0),
        ("on_train_steps_end", 2), ("on_save_checkpoint", 2),
        ("on_evaluation_end", 4), ("on_train_steps_end", 4), ("on_save_checkpoint", 4),
        ("on_train_end", 4), ("on_fit_end", 4), ("teardown", 4)]
    rec2 = Recorder()
    t2 = toys.trainer(run_dir, max_steps=6, log_every_n_steps=2, callbacks=[rec2])
    t2.fit(toys.Regression(), ckpt_path="last")
    assert rec2.calls[:4] == [("setup", 0), ("on_load_checkpoint", 4), ("on_fit_start", 4),
                              ("on_train_start", 4)]


def test_exception_at_step_3_with_unlogged_monitor_surfaces_original_error(run_dir):
    """An error in training: on_exception then teardown, the original exception unchanged."""
    rec = Recorder(fail_at=3)
    mc = jt.ModelCheckpoint(monitor="never_logged", mode="max", save_top_k=1,
                            save_on_exception=True, every_n_steps=1)
    t = toys.trainer(run_dir, max_steps=10, callbacks=[rec, mc, jt.CSVLogger(),
                                                       jt.TensorBoardLogger()])
    with pytest.raises(ValueError, match="original error at step 3") as info:
        t.fit(toys.Regression())
    assert type(info.value) is ValueError
    names = [n for n, _ in rec.calls]
    # save_on_exception writes step 3 between on_exception and teardown
    assert names[-3:] == ["on_exception", "on_save_checkpoint", "teardown"]
    assert "on_fit_end" not in names and "on_train_end" not in names
    # the checkpoints written before the error are complete; loggers closed
    assert ckpt.find_last(run_dir) is not None
    assert all(not cb._active for cb in t.callbacks if isinstance(cb, jt.loggers.Logger))


def test_a_failing_callback_on_the_error_path_does_not_hide_the_error(run_dir, capsys):
    class BadTeardown(jt.Callback):
        def on_exception(self, trainer, module, exc):
            raise KeyError("secondary")

    with pytest.raises(ValueError, match="original error"):
        toys.trainer(run_dir, max_steps=5, callbacks=[Recorder(fail_at=2), BadTeardown()]).fit(
            toys.Regression())
    assert "secondary" in capsys.readouterr().err


def test_early_stopping_at_step_4_calls_on_train_end_once(run_dir):
    # score improves at steps 1 and 2, then not: patience=2 stops at the second
    # check without improvement (step 4), as Lightning does
    class Metric(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            metrics["score"] = {1: 1.0, 2: 2.0}.get(trainer.global_step, 2.0)

    rec = Recorder()
    es = jt.EarlyStopping(monitor="score", mode="max", patience=2)
    mc = jt.ModelCheckpoint(async_save=False)
    t = toys.trainer(run_dir, max_steps=100, callbacks=[Metric(), es, rec, mc])
    t.fit(toys.Regression())
    assert t.global_step == 4 and es.stopped_step == 4 and es.wait_count == 2
    assert [n for n, _ in rec.calls].count("on_train_end") == 1
    assert t.stop_reason.startswith("EarlyStopping: score did not improve")
    assert ckpt.find_last(run_dir).name == "4"  # save_last
    meta = ckpt.read_meta(ckpt.find_last(run_dir))
    assert meta["callbacks"][es.state_key]["wait_count"] == 2


class Counter(jt.Callback):
    """Lightning's documented stateful callback: counts steps or evaluations; its
    ``state_key`` names what it counts (``verbose`` is left out on purpose)."""

    def __init__(self, what="steps", verbose=True):
        self.what, self.verbose, self.state = what, verbose, {"steps": 0, "evaluations": 0}

    @property
    def state_key(self):
        return f"Counter[what={self.what}]"

    def on_train_steps_end(self, trainer, module, metrics):
        self.state["steps"] += self.what == "steps"

    def on_evaluation_end(self, trainer, module, metrics):
        self.state["evaluations"] += self.what == "evaluations"

    def state_dict(self):
        return dict(self.state)

    def load_state_dict(self, state_dict):
        self.state.update(state_dict)


class Restored(jt.Callback):
    """Records ``[cb.state_dict() for cb in callbacks]`` when training starts."""

    def __init__(self, callbacks):
        self.callbacks, self.seen = callbacks, None

    def on_train_start(self, trainer, module):
        self.seen = [cb.state_dict() for cb in self.callbacks]


@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 4)])
def test_two_early_stoppings_with_another_patience_each_resume_their_own_state(
        run_dir, strategy, devices):
    # "score" does not improve after step 1: patience=2 stops at step 3, patience=5 waits on
    def make():
        return [jt.EarlyStopping("score", mode="min", patience=p) for p in (2, 5)]

    first = make()
    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=8,
                     callbacks=[toys.Scores({s: 1.0 + s for s in range(1, 9)}), *first,
                                jt.ModelCheckpoint(async_save=False)])
    t.fit(toys.Regression())
    assert t.global_step == 3 and [e.stopped_step for e in first] == [3, None]
    resumed = make()
    probe = Restored(resumed)
    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=4,
                     callbacks=[toys.Scores({4: 9.0}), *resumed, probe])
    t.fit(toys.Regression(), ckpt_path="last")
    assert probe.seen == [{"best_score": 2.0, "wait_count": 2, "stopped_step": 3},
                          {"best_score": 2.0, "wait_count": 1, "stopped_step": None}]


def test_lightnings_counter_example_resumes_each_counter_and_duplicates_are_refused(
        run_dir, monkeypatch):
    counters = [Counter("steps"), Counter("evaluations", verbose=False)]
    toys.trainer(run_dir, max_steps=4, eval_every_n_steps=2, callbacks=[
        *counters, jt.ModelCheckpoint(async_save=False)]).fit(toys.Regression())
    assert [c.state for c in counters] == [{"steps": 4, "evaluations": 0},
                                           {"steps": 0, "evaluations": 2}]
    resumed = [Counter("steps"), Counter("evaluations")]
    t = toys.trainer(run_dir, max_steps=6, eval_every_n_steps=2, callbacks=resumed)
    t.fit(toys.Regression(), ckpt_path="last")
    assert [c.state for c in resumed] == [{"steps": 6, "evaluations": 0},
                                          {"steps": 0, "evaluations": 3}]

    class Plain(Counter):  # the class name alone: two instances would share one entry
        state_key = jt.Callback.state_key

    t = toys.no_compile_trainer(monkeypatch)
    t.callbacks += [Plain("steps"), Plain("evaluations")]
    with pytest.raises(ValueError, match=r"share the checkpoint state key '[\w.<>]*Plain'.*state_key"):
        t.fit(toys.Regression())


@pytest.mark.parametrize("kw,values,stop", [
    (dict(mode="max", stopping_threshold=3.0), [1, 2, 3, 4], 3),
    (dict(mode="min", divergence_threshold=10.0), [1, 5, 11, 1], 3),
    (dict(mode="min", check_finite=True), [1, math.nan, 1, 1], 2),
    (dict(mode="min", min_delta=0.5, patience=1), [3, 2.8, 2.6, 1], 2),
    (dict(mode="min", min_delta=0.5, patience=2), [3, 2.8, 2.6, 1], 3),
    (dict(mode="min", patience=0), [3, 2, 2, 1], 3),
])
def test_early_stopping_thresholds(kw, values, stop):
    es = jt.EarlyStopping(monitor="m", **kw)

    class T:
        should_stop, stop_reason, global_step = False, None, 0

        def request_stop(self, reason, *, state_is_valid=True):
            self.should_stop, self.stop_reason = True, reason

    t = T()
    for i, v in enumerate(values, 1):
        t.global_step = i
        es.on_train_steps_end(t, None, {"m": float(v)})
        if t.should_stop:
            break
    assert t.should_stop and t.global_step == stop, t.stop_reason


def test_a_monitor_that_is_no_metric_name_and_callbacks_not_in_a_list_are_clear_errors():
    with pytest.raises(ValueError, match=r"^EarlyStopping: monitor=None: expected a metric name "
                                         r"such as 'eval/episode_return'$"):
        jt.EarlyStopping(monitor=None)  # was AttributeError: 'NoneType' has no attribute 'lower'
    with pytest.raises(ValueError, match=r"^EarlyStopping: monitor='': expected a metric name"):
        jt.EarlyStopping(monitor="", mode="max")
    one = jt.ModelCheckpoint()
    trainer = jt.Trainer(callbacks=one, logger=False, enable_progress_bar=False)  # as Lightning
    assert trainer.callbacks == [one]
    with pytest.raises(TypeError, match=r"^callbacks=5: expected a list of jaxtrainer.Callback "
                                        r"instances \(or one\)$"):
        jt.Trainer(callbacks=5)


def test_early_stopping_without_mode_warns():
    with pytest.warns(UserWarning, match="no mode"):
        assert jt.EarlyStopping(monitor="loss").mode == "min"


def test_nan_guard_stops_with_name_and_step_and_keeps_last_good_checkpoint(run_dir, capsys):
    mc = jt.ModelCheckpoint(every_n_steps=2, async_save=False, save_on_exception=True)
    guard = jt.NaNGuard()
    t = toys.trainer(run_dir, max_steps=20, callbacks=[mc, guard])  # guard runs first anyway
    t.fit(toys.Regression(nan_from_step=5))
    assert t.global_step == 6
    assert t.stop_reason == "NaNGuard: non-finite metric loss=nan at step 6"
    assert "non-finite metric loss=nan at step 6" in capsys.readouterr().out
    last = ckpt.find_last(run_dir)
    assert last.name == "4"
    restored = toys.trainer(run_dir, max_steps=20)
    restored._module = toys.Regression()
    restored.strategy.setup()
    restored.restore_checkpoint(restored._module, last)
    assert np.isfinite(toys.leaves(restored.state)["params"]["w"]).all()


def test_nan_guard_can_raise_and_checks_state(run_dir):
    t = toys.trainer(run_dir, max_steps=20, callbacks=[
        jt.NaNGuard(monitor=["not_a_metric"], check_state=True, raise_error=True),
        jt.ModelCheckpoint(every_n_steps=1, async_save=False, save_on_exception=True)])
    with pytest.raises(jt.NonFiniteError, match=r"state leaf \['params'\]\['b'\] at step 3"):
        t.fit(toys.Regression(nan_from_step=2))
    assert ckpt.find_last(run_dir).name == "2"


def test_timer_stops_and_counts_time_across_resume(run_dir):
    import time

    class Slow(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            time.sleep(0.2)

    timer = jt.Timer(0.5)
    t = toys.trainer(run_dir, max_steps=100, callbacks=[Slow(), timer])
    t.fit(toys.Regression())
    # 0.2 s per interval against 0.5 s: stops after about 3 intervals (fewer when
    # the background evaluation compile slows the first ones), far before 100
    assert 1 <= t.global_step <= 5 and t.stop_reason.startswith("Timer")
    assert timer.time_elapsed() >= 0.5
    again = jt.Timer("00:00:00:01")
    assert again.duration == 1.0
    t2 = toys.trainer(run_dir, max_steps=100, callbacks=[Slow(), again])
    t2.fit(toys.Regression(), ckpt_path="last")
    assert again.time_elapsed() >= 1.0 and t2.global_step < t.global_step + 5
    # a resume whose runs already reached the limit trains no step (it trained one interval)
    done = toys.trainer(run_dir, max_steps=100, callbacks=[Slow(), jt.Timer(1.0)])
    done.fit(toys.Regression(), ckpt_path="last")
    assert done.global_step == t2.global_step
    assert done.stop_reason.startswith("Timer: the run's ") and "before this fit" in done.stop_reason
    with pytest.raises(ValueError, match="duration"):
        jt.Timer("soon")


def test_lr_and_throughput_monitors_add_python_floats_to_logged_metrics(run_dir):
    tm = jt.ThroughputMonitor()
    t = toys.trainer(run_dir, max_steps=4, log_every_n_steps=2,
                     callbacks=[jt.CSVLogger(), jt.LearningRateMonitor(), tm])
    t.fit(toys.Regression(lr=0.025))
    with open(os.path.join(t.log_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [float(r["lr/learning_rate"]) for r in rows] == pytest.approx([0.025, 0.025])
    for name in ("throughput/env_steps_per_second", "throughput/updates_per_second",
                 "throughput/compile_seconds"):
        assert all(float(r[name]) > 0 for r in rows), name
    assert t.compile_seconds["train"] > 0
    assert tm.summary["throughput/mean_env_steps_per_second"] > 0


def test_lr_monitor_warns_without_injected_hyperparams(run_dir):
    class Plain(toys.Regression):
        def __init__(self):
            super().__init__()
            import optax
            self.optimizer = optax.adam(0.1)

    with pytest.warns(UserWarning, match="inject_hyperparams"):
        toys.trainer(run_dir, max_steps=1, callbacks=[jt.LearningRateMonitor()]).fit(Plain())


def test_evaluation_uses_fresh_episodes_and_counts_completed_ones_only(run_dir):
    """Training envs are mid-episode; evaluation episodes start fresh and
    only completed ones count, and evaluating does not change training."""
    with_eval = toys.trainer(run_dir, strategy="pmap", devices=2, max_steps=4, eval_every_n_steps=2,
                             callbacks=[jt.CSVLogger()])
    with_eval.fit(toys.EnvCounter(eval_steps=25))
    assert with_eval.callback_metrics["eval/episode_return"] == 10.0  # not a partial 2/5/8
    assert with_eval.callback_metrics["eval/episode_length"] == 10.0
    # training envs are 12 steps in (3 per step): mid-episode
    assert int(np.asarray(with_eval.state["env"].episode_length)[0]) == 2

    short = toys.trainer(run_dir, max_steps=2, eval_every_n_steps=2)
    short.fit(toys.EnvCounter(eval_steps=5))  # no evaluation episode can finish
    assert "eval/episode_return" not in short.callback_metrics

    without = toys.trainer(run_dir, strategy="pmap", devices=2, max_steps=4)
    without.fit(toys.EnvCounter())
    toys.assert_trees_equal(with_eval.state, without.state)
    metrics = jt.Trainer.evaluate(with_eval, toys.EnvCounter(eval_steps=25))
    assert metrics["eval/episode_return"] == 10.0


class FailsAt(jt.Callback):
    """A metrics-only callback (fusable) that raises at one step."""

    def __init__(self, step):
        self.step = step

    def needs_state(self, trainer, module, step):
        return False

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == self.step:
            raise OSError(28, "No space left on device")


@pytest.mark.parametrize("sync", [0, 60.0])
def test_save_on_exception_inside_a_fused_call_says_why_it_did_not_save(run_dir, capsys, sync):
    """With one call per interval the exception's step is saved; inside a fused
    call trainer.state is already further on, so nothing is saved and a message
    names the last checkpoint (never a checkpoint whose state is not its step)."""
    mc = jt.ModelCheckpoint(save_on_exception=True, every_n_steps=100, async_save=False)
    t = toys.trainer(run_dir, max_steps=40, log_every_n_steps=2, callbacks=[FailsAt(8), mc],
                     sync_every_n_seconds=sync)
    with pytest.raises(OSError, match="No space left"):
        t.fit(toys.Regression())
    saved = sorted(os.listdir(os.path.join(t.log_dir, "checkpoints"))) \
        if os.path.isdir(os.path.join(t.log_dir, "checkpoints")) else []
    if sync == 0:
        assert saved == ["8"]
    else:
        assert saved == [] and t.global_step == 8 and t.state_ahead
        assert "not saving on OSError at step 8" in capsys.readouterr().err


class RaisesOnce(jt.Callback):
    """Raises in ``hook`` at ``step`` (a user callback's bug, fixed before the resume)."""

    def __init__(self, hook, step):
        self.hook, self.step = hook, step

    def on_train_steps_end(self, trainer, module, metrics):
        if self.hook == "on_train_steps_end" and trainer.global_step == self.step:
            raise RuntimeError(f"bug at step {self.step}")

    def on_evaluation_end(self, trainer, module, metrics):
        if self.hook == "on_evaluation_end" and trainer.global_step == self.step:
            raise RuntimeError(f"bug at step {self.step}")


def _csv_steps(log_dir):
    with open(os.path.join(log_dir, "metrics.csv")) as f:
        return [int(float(r["step"])) for r in csv.DictReader(f) if r.get("loss")]


@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 4)])
def test_a_resume_from_the_checkpoint_of_a_callbacks_exception_runs_that_steps_hooks(
        run_dir, strategy, devices):
    """The bug at step 3 cut step 3's hooks before EarlyStopping and the CSV logger;
    the resume gives them step 3, so the run equals one without the bug: the
    metrics row of step 3 is there and patience=3 stops at step 4."""
    def callbacks(*first):
        return [toys.Scores({s: float(s) for s in range(1, 9)}), *first,
                jt.EarlyStopping("score", mode="min", patience=3), jt.CSVLogger(),
                jt.ModelCheckpoint(save_on_exception=True, async_save=False)]

    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=8,
                     callbacks=callbacks(RaisesOnce("on_train_steps_end", 3)))
    with pytest.raises(RuntimeError, match="bug at step 3"):
        t.fit(toys.Regression())
    resumed = callbacks()
    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=8, callbacks=resumed)
    t.fit(toys.Regression(), ckpt_path="last")
    assert t.global_step == 4 and resumed[1].stopped_step == 4
    assert _csv_steps(t.log_dir) == [1, 2, 3, 4]


def test_a_resume_after_an_exception_in_on_evaluation_end_runs_that_steps_hooks(run_dir):
    def callbacks(*first):
        return [*first, Counter("steps"), Counter("evaluations"), jt.CSVLogger(),
                jt.ModelCheckpoint(save_on_exception=True, async_save=False)]

    t = toys.trainer(run_dir, max_steps=4, eval_every_n_steps=2,
                     callbacks=callbacks(RaisesOnce("on_evaluation_end", 2)))
    with pytest.raises(RuntimeError, match="bug at step 2"):
        t.fit(toys.Regression())
    resumed = callbacks()
    t = toys.trainer(run_dir, max_steps=4, eval_every_n_steps=2, callbacks=resumed)
    t.fit(toys.Regression(), ckpt_path="last")
    assert [c.state for c in resumed[:2]] == [{"steps": 4, "evaluations": 0},
                                              {"steps": 0, "evaluations": 2}]
    assert _csv_steps(t.log_dir) == [1, 2, 3, 4]


class StopAt(jt.Callback):
    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == 4:
            trainer.should_stop = True


def test_stop_reason_is_set_for_a_user_stop_and_for_the_budget(run_dir):
    t = toys.trainer(run_dir, max_steps=np.int64(6), log_every_n_steps=np.int32(2),
                     callbacks=[StopAt()], sync_every_n_seconds=np.float32(0.5))
    t.fit(toys.Regression())
    assert t.global_step == 4 and t.stop_reason == "a callback set trainer.should_stop"
    t = toys.trainer(run_dir, max_steps=6, log_every_n_steps=2)
    t.fit(toys.Regression())
    assert t.global_step == 6 and t.stop_reason == "the budget of 6 training steps is done"


class SignalAtTheEnd(jt.Callback):
    """Simulates a SIGTERM that arrives while the last call runs."""

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == trainer.max_steps:
            import signal

            trainer.received_signal = int(signal.SIGTERM)


def test_a_signal_during_the_last_call_finishes_the_run_normally(run_dir, capsys):
    t = toys.trainer(run_dir, max_steps=6, log_every_n_steps=2, callbacks=[SignalAtTheEnd()])
    t.fit(toys.Regression())  # no Preempted: the budget is done
    assert t.global_step == 6
    assert os.listdir(os.path.join(t.log_dir, "checkpoints")) == ["6"]
    assert "budget of 6 steps is done, finishing normally" in capsys.readouterr().err


def test_guards_that_need_no_state_let_intervals_fuse(run_dir, monkeypatch, capsys):
    """NaNGuard on metrics, EarlyStopping on an eval/ metric and a Timer far from
    its limit answer needs_state False, so log intervals fuse into few calls; a
    NaN inside a fused call still marks the state invalid at its own step (no
    checkpoint of it) and training ends with that call."""
    from jaxtrainer import metrics as metrics_lib

    calls = []
    real = metrics_lib.rows_to_host
    monkeypatch.setattr(metrics_lib, "rows_to_host", lambda m, n, *a: calls.append(n) or real(m, n, *a))
    guard, timer = jt.NaNGuard(), jt.Timer(3600)
    es = jt.EarlyStopping(monitor="eval/loss", mode="min")
    csv_logger = jt.CSVLogger()
    t = toys.trainer(run_dir, max_steps=30, sync_every_n_seconds=60.0, eval_every_n_steps=1000,
                     callbacks=[guard, es, timer, csv_logger,
                                jt.ModelCheckpoint(save_last=True, async_save=False)])
    with pytest.warns(UserWarning, match=r"\['eval/loss'\] never appeared"):  # none within 30 steps
        t.fit(toys.Regression(nan_from_step=5))
    assert calls == [1, 29]                       # 30 log intervals in 2 host syncs
    assert t.stop_reason == "NaNGuard: non-finite metric loss=nan at step 6"
    assert not t.state_is_valid and ckpt.find_last(run_dir) is None
    with open(os.path.join(t.log_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(1, 31))
    assert math.isfinite(float(rows[4]["loss"])) and math.isnan(float(rows[5]["loss"]))
    out = capsys.readouterr().out
    assert "stopping at step 30: NaNGuard" in out
    assert out.count("not saving step 30: the state is not finite; the last good checkpoint: none") == 1
    # the other answers
    assert jt.NaNGuard(check_state=True).needs_state(t, None, 1)
    assert jt.EarlyStopping(monitor="loss", mode="min").needs_state(t, None, 1)


@pytest.mark.slow
def test_timer_asks_for_every_boundary_only_near_its_limit(run_dir):
    class T:
        sync_every_n_seconds = 1.0
        more_metrics_pending = False
        should_stop = False

    far, near = jt.Timer(3600), jt.Timer(1.5)
    for timer in (far, near):
        timer.on_train_start(T(), None)
    assert not far.needs_state(T(), None, 10) and near.needs_state(T(), None, 10)
    far._sync_gap = 2000.0    # a host sync took longer than half the time left
    assert far.needs_state(T(), None, 10)
    # end to end: the stop still comes at the first boundaries past the limit
    t = toys.trainer(run_dir, max_steps=10**9, sync_every_n_seconds=0.2,
                     callbacks=[jt.Timer(2.0)])
    t.fit(toys.Regression())
    assert t.stop_reason.startswith("Timer") and t.callbacks[0].time_elapsed() < 6.0


def test_a_monitor_that_never_appears_warns_at_the_end(run_dir):
    t = toys.trainer(run_dir, max_steps=3, callbacks=[
        jt.EarlyStopping(monitor="los", mode="min"), jt.NaNGuard(monitor=["loss", "other"])])
    with pytest.warns(UserWarning) as record:
        t.fit(toys.Regression())
    messages = [str(w.message) for w in record]
    assert any(m.startswith("EarlyStopping(monitor='los'): ['los'] never appeared in the metrics")
               and "the metrics were: " in m and "loss" in m for m in messages)
    assert any(m.startswith("NaNGuard(monitor=['loss', 'other']): ['other'] never appeared")
               for m in messages)
    assert t.global_step == 3


def test_guide_monitor_without_evaluation_is_refused_before_anything_is_written(run_dir):
    """The checkpoints guide's best-three callback in a fit that never evaluates:
    refused with the fix named, nothing written; with evaluations it ranks."""
    best = run_dir / "best"
    for cb in (jt.ModelCheckpoint(dirpath=best, monitor="eval/episode_return", mode="max",
                                  save_top_k=3, every_n_steps=100),
               jt.EarlyStopping(monitor="eval/episode_return", mode="max")):
        t = toys.trainer(run_dir, max_steps=4, callbacks=[cb, jt.CSVLogger()])
        with pytest.raises(ValueError, match=r"monitor='eval/episode_return'\): eval/ metrics are "
                                             r"logged only by evaluations .* eval_every_n_steps"):
            t.fit(toys.Regression())
        assert not run_dir.exists()
    mc = jt.ModelCheckpoint(dirpath=best, monitor="eval/mse", mode="min", save_top_k=1,
                            every_n_steps=2, async_save=False)
    toys.trainer(run_dir, max_steps=4, log_every_n_steps=2, eval_every_n_steps=2,
                 callbacks=[mc]).fit(toys.Regression())
    assert mc.best_model_score is not None and mc.best_model_path.startswith(str(best))


def test_a_monitor_without_mode_is_ranked_alike_by_every_callback():
    """EarlyStopping and ModelCheckpoint on the same metric without ``mode`` agree:
    a return is maximised, a loss minimised (each with a warning naming the choice)."""
    for monitor, want in (("eval/episode_return", "max"), ("loss/critic", "min")):
        with pytest.warns(UserWarning, match=f"assuming mode='{want}'"):
            stop = jt.EarlyStopping(monitor=monitor)
        with pytest.warns(UserWarning, match=f"assuming mode='{want}'"):
            keep = jt.ModelCheckpoint(monitor=monitor, save_top_k=2)
        assert stop.mode == keep.mode == want
