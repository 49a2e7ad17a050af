"""Metrics carry their reduction (mean, sum, max, min, last) over the steps of a log
interval and over devices, also in fused calls and in the PopulationTrainer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import distributed as jd
from jaxtrainer import metrics as metrics_lib
from jaxtrainer.algorithms import FunctionES, sphere

QUIET = dict(enable_progress_bar=False, enable_checkpointing=False, logger=False,
             compile_evaluation_ahead=False)
# the toy's value at the steps of each log interval of 4: 1, 5, 2, 3 (+10 per interval)
PATTERN = (1.0, 5.0, 2.0, 3.0)


def pattern_value(step: jax.Array) -> jax.Array:
    return jnp.asarray(PATTERN)[step % 4] + 10.0 * (step // 4)


class Record(jt.Callback):
    """Every interval's metrics; reads no state, so intervals may fuse."""

    def __init__(self):
        self.rows = []

    def needs_state(self, trainer, module, step):
        return False

    def on_train_steps_end(self, trainer, module, metrics):
        self.rows.append(dict(metrics))


class Pattern(jt.Module):
    """Reports the same per-step value under every reduction.

    ``per_device``: the value is ``pattern * 10 + device index`` (differs per device).
    ``mask_from``: the masked metrics (``*_masked``) have samples only from that
    step, under a float mask (as brax's ``done``); before it the sample is a ratio
    over the mask (``inf``), and beside it a ``nan`` is always masked out.
    """

    def __init__(self, per_device: bool = False, mask_from: int = 4):
        self.per_device = per_device
        self.mask_from = mask_from

    def init_state(self, key):
        return {"step": jnp.zeros((), jnp.int32)}

    def training_step(self, state, key):
        step = state["step"]
        x = pattern_value(step)
        if self.per_device:
            x = x * 10.0 + jd.axis_index().astype(jnp.float32)
        on = (step >= self.mask_from).astype(jnp.float32)
        metrics = {"mean": x, "max": jt.Max.of(x), "min": jt.Min.of(x), "last": jt.Last.of(x),
                   "sum": jt.Sum.of(x)}
        for cls in (jt.Mean, jt.Max, jt.Min, jt.Last, jt.Sum):
            metrics[f"{cls.__name__.lower()}_masked"] = cls.of(
                jnp.stack([x / on, jnp.sqrt(-x)]), jnp.stack([on, jnp.zeros_like(on)]))
        return {"step": step + 1}, metrics


def fit_rows(module, run_dir, devices, monkeypatch=None, guard=None, **kw):
    record = Record()
    calls = []
    if monkeypatch is not None:
        real = metrics_lib.rows_to_host
        monkeypatch.setattr(metrics_lib, "rows_to_host",
                            lambda m, n, *a: calls.append(n) or real(m, n, *a))
    trainer = jt.Trainer(strategy="pmap" if devices > 1 else "single", devices=devices,
                         default_root_dir=run_dir, callbacks=[record, *([guard] if guard else [])],
                         **{**QUIET, **kw})
    trainer.fit(module)
    return record.rows, calls


@pytest.mark.parametrize("devices", [1, 4])
def test_each_reduction_over_an_interval_of_4_steps_fused_or_not(run_dir, monkeypatch, devices):
    """Per-step values 1, 5, 2, 3 (then 11, 15, 12, 13; 21, 25, 22, 23), logged every
    4 steps: max 5, min 1, last 3, mean 2.75, sum 11 per device (psum: x4 on 4
    devices), in three intervals of which the last two run fused in one call."""
    rows, calls = fit_rows(Pattern(), run_dir, devices, monkeypatch, max_steps=12,
                           log_every_n_steps=4, sync_every_n_seconds=60.0)
    assert calls == [1, 2]  # 3 intervals in 2 calls: the last two fused
    assert [r["step"] for r in rows] == [4, 8, 12]
    for k, row in enumerate(rows):
        off = 10.0 * k
        assert row["max"] == 5.0 + off
        assert row["min"] == 1.0 + off
        assert row["last"] == 3.0 + off
        assert row["mean"] == pytest.approx(2.75 + off, rel=1e-7)
        assert row["sum"] == (11.0 + 4 * off) * devices
    # unfused (one call per interval): the same rows
    unfused, calls = fit_rows(Pattern(), run_dir, devices, monkeypatch, max_steps=12,
                              log_every_n_steps=4, sync_every_n_seconds=0)
    assert calls == [1, 1, 1]
    for u, r in zip(unfused, rows, strict=True):
        for name in ("max", "min", "last", "mean", "sum", "step"):
            assert u[name] == r[name], name


def test_device_dependent_values_reduce_over_devices_by_their_reduction(run_dir):
    """Value = pattern * 10 + device index on 4 devices: max pmax, min pmin, sum
    psum, last the mean of the devices' last values, mean pooled."""
    rows, _ = fit_rows(Pattern(per_device=True), run_dir, 4, max_steps=8, log_every_n_steps=4)
    for k, row in enumerate(rows):
        off = 100.0 * k
        values = np.array([[p * 10 + off + d for d in range(4)] for p in PATTERN])  # [step, dev]
        assert row["max"] == values.max() == 53.0 + off
        assert row["min"] == values.min() == 10.0 + off
        assert row["last"] == values[-1].mean() == 31.5 + off
        assert row["sum"] == values.sum() == 464.0 + 16 * off
        assert row["mean"] == pytest.approx(values.mean(), rel=1e-7)


@pytest.mark.parametrize("devices", [1, 4])
def test_an_interval_without_samples_reports_nothing_for_every_reduction(run_dir, devices):
    """An inf and a nan outside the mask at every step are left out: NaNGuard lets
    the run finish."""
    guard = jt.NaNGuard(raise_error=True)
    rows, _ = fit_rows(Pattern(mask_from=6), run_dir, devices, guard=guard, max_steps=8,
                       log_every_n_steps=4)
    assert guard.reason is None and len(rows) == 2
    names = [f"{n}_masked" for n in ("mean", "max", "min", "last", "sum")]
    assert not any(n in rows[0] for n in names)  # steps 0-3: all masked out
    second = rows[1]  # samples at steps 6, 7 only: 12, 13
    assert second["mean_masked"] == 12.5
    assert second["max_masked"] == 13.0 and second["min_masked"] == 12.0
    assert second["last_masked"] == 13.0
    assert second["sum_masked"] == 25.0 * devices


def test_of_reduces_an_array_where_the_mask_is_set():
    x = jnp.array([[1.0, 5.0], [2.0, 3.0]])
    mask = jnp.array([[True, False], [True, False]])
    got = metrics_lib.to_host({
        "max": jt.Max.of(x), "min": jt.Min.of(x), "last": jt.Last.of(x), "sum": jt.Sum.of(x),
        "mean": jt.Mean.of(x), "max_m": jt.Max.of(x, mask), "last_m": jt.Last.of(x, mask),
        "sum_m": jt.Sum.of(x, mask), "min_m": jt.Min.of(x, ~mask), "none": jt.Max.of(x, x > 9)})
    assert got == {"max": 5.0, "min": 1.0, "last": 3.0, "sum": 11.0, "mean": 2.75,
                   "max_m": 2.0, "last_m": 2.0, "sum_m": 3.0, "min_m": 3.0}
    # NaN propagates through max (NaNGuard sees it); masked-out NaN does not
    nan = jnp.array([1.0, jnp.nan])
    assert np.isnan(metrics_lib.to_host({"m": jt.Max.of(nan)})["m"])
    assert metrics_lib.to_host({"m": jt.Max.of(nan, jnp.array([True, False]))}) == {"m": 1.0}
    assert {c.reduce_fx for c in metrics_lib._REDUCTIONS.values()} == {
        "mean", "sum", "max", "min", "last"}


def test_log_probabilities_of_impossible_actions_outside_the_mask_are_left_out():
    """log pi of an action a mask forbids is -inf: the mean over the taken actions
    (and its gradient there) is that of the allowed ones alone."""
    logits = jnp.array([[0.0, -jnp.inf, 1.0], [2.0, 0.0, -jnp.inf]])
    logp = jax.nn.log_softmax(logits, axis=-1)
    taken = jnp.isfinite(logits)
    expected = np.asarray(logp)[np.asarray(taken)]
    for cls, want in ((jt.Mean, expected.mean()), (jt.Sum, expected.sum())):
        got = metrics_lib.to_host({"m": jax.jit(cls.of)(logp, taken.astype(jnp.float32))})["m"]
        assert got == pytest.approx(want, rel=1e-6), cls
    # a value per row broadcasts against a mask per row and action
    rows = jnp.array([[1.0], [jnp.inf]])
    assert metrics_lib.to_host({"m": jt.Mean.of(rows, taken & jnp.array([[True], [False]]))}
                               ) == {"m": 1.0}
    grad = jax.grad(lambda v: jt.Mean.of(v, taken).total)(logp)
    np.testing.assert_array_equal(grad, np.asarray(taken, np.float32))


def test_the_training_step_is_traced_once_per_program(run_dir):
    """The program's shape probe and its loop share one trace of the step, so a
    step cannot return one reduction to the probe and another to the loop."""
    class Fickle(jt.Module):
        def __init__(self):
            self.traces = 0

        def init_state(self, key):
            return {"x": jnp.zeros(()), "weak": 0.0, "n": 0}

        def training_step(self, state, key):
            self.traces += 1
            x = state["x"] + 1.0
            best = jt.Max.of(x) if self.traces == 1 else x
            return {"x": x, "weak": state["weak"] + 1, "n": state["n"] + 1}, {"best": best}

    trainer = jt.Trainer(strategy="single", max_steps=3, log_every_n_steps=1,
                         default_root_dir=run_dir, **QUIET)
    module = Fickle()
    trainer.fit(module)
    assert module.traces == 1
    assert trainer.callback_metrics["best"] == 3.0  # reduced as the one trace's Max


class PatternES(jt.PopulationModule):
    """4 members; member i's fitness at generation g is pattern(g) - i, so the
    generation's best is pattern(g); ``tell`` reports the generation's best under
    every reduction and the running best as a Max."""

    env_steps_per_generation = 0

    def init_state(self, key):
        return {"generation": jnp.zeros((), jnp.int32), "best": jnp.full((), -jnp.inf)}

    def ask(self, state, key):
        g = state["generation"]
        return jnp.stack([jnp.full((4,), g), jnp.arange(4)], axis=1), state

    def evaluate(self, member, key):
        return pattern_value(member[0]) - member[1].astype(jnp.float32), {}

    def tell(self, state, population, fitness):
        top = jnp.max(fitness)
        best = jnp.maximum(state["best"], top)
        return ({"generation": state["generation"] + 1, "best": best},
                {"gen/max": jt.Max.of(top), "gen/min": jt.Min.of(top), "gen/last": jt.Last.of(top),
                 "gen/sum": jt.Sum.of(top), "gen/mean": top, "running_best": jt.Max.of(best)})


@pytest.mark.parametrize("devices", [1, 4])
def test_population_trainer_reduces_over_generations_and_devices(run_dir, devices):
    record = Record()
    trainer = jt.PopulationTrainer(4, strategy="pmap" if devices > 1 else "single",
                                   devices=devices, max_generations=8, log_every_n_generations=4,
                                   sync_every_n_seconds=60.0, default_root_dir=run_dir,
                                   callbacks=[record], **QUIET)
    trainer.fit(PatternES())
    assert [r["step"] for r in record.rows] == [4, 8]
    for k, row in enumerate(record.rows):
        off = 10.0 * k
        # tell runs replicated: the same value on every device (a sum counts each device)
        assert (row["gen/max"], row["gen/min"], row["gen/last"]) == (5 + off, 1 + off, 3 + off)
        assert row["gen/mean"] == 2.75 + off and row["gen/sum"] == (11 + 4 * off) * devices
        assert row["running_best"] == 5.0 + off  # not the mean of the running bests (1, 5, 5, 5: 4.0)
        # the trainer's own fitness statistics: best and worst member of the interval
        assert row["fitness/max"] == 5.0 + off and row["fitness/min"] == 1.0 + off - 3
        assert row["fitness/mean"] == 2.75 + off - 1.5
        assert row["population_size"] == 4.0


def test_es_best_fitness_is_the_running_best_at_the_interval_end(run_dir):
    """A real ES (minimising): es/best_fitness is the best fitness seen so far, i.e.
    the min over the intervals' fitness/min, not the mean of 4 running bests."""
    record = Record()
    trainer = jt.PopulationTrainer(8, strategy="pmap", devices=4, max_generations=8,
                                   log_every_n_generations=4, default_root_dir=run_dir,
                                   callbacks=[record], **QUIET)
    trainer.fit(FunctionES(sphere, 3, "CMA_ES", init_mean=2.0, init_range=1.0))
    rows = record.rows
    assert len(rows) == 2
    for k, row in enumerate(rows):
        assert row["es/best_fitness"] == min(r["fitness/min"] for r in rows[:k + 1])
        assert row["es/generation_counter"] == 4 * k + 3  # the last generation's counter


def test_a_call_stops_at_the_first_zero_interval_length():
    """``lengths`` [2, 0, 3, 1]: two steps, one row; what follows the zero is not run."""
    from jaxtrainer.strategies import resolve

    class Steps(jt.Module):
        def init_state(self, key):
            return {"n": jnp.zeros((), jnp.int32)}

        def training_step(self, state, key):
            n = state["n"] + 1
            return {"n": n}, {"n": jt.Sum.of(n.astype(jnp.float32))}

    strategy, module, key = resolve("single", 1), Steps(), jax.random.key(0)
    state = strategy.init_state(module, key)
    program = strategy.compile_train(module, state, key)
    lengths = np.zeros(program.max_intervals, np.int32)
    lengths[:4] = [2, 0, 3, 1]
    state, packed = program.program(state, key, np.int32(0), lengths)
    assert int(state["n"]) == 2
    rows = metrics_lib.rows_to_host(packed, 4, program.metrics)
    assert rows[0] == {"n": 3.0} and rows[1:] == [{}, {}, {}]
