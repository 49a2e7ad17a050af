"""PopulationTrainer: device-count independence, padding (padded members never count), hooks, resume, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms.es import FunctionES, sphere
from jaxtrainer.population import PopulationTrainer
from jaxtrainer.strategies import ShardMapStrategy

QUIET = dict(compile_evaluation_ahead=False, logger=False, enable_checkpointing=False, enable_progress_bar=False)
GENERATIONS = 6


def noisy_sphere(x, key):
    return sphere(x) + 0.1 * jax.random.normal(key)


class Recording(jt.PopulationModule):
    """Wraps a FunctionES on a noisy sphere (so member keys matter) and keeps every
    generation's fitness array in its state, to compare whole runs bit for bit.
    ``tell`` checks at trace time that padding never reaches it."""

    def __init__(self, algorithm="Open_ES", dims=5, **kw):
        self.inner = FunctionES(noisy_sphere, dims, algorithm, init_mean=1.0, std=0.5,
                                fn_takes_key=True, **kw)
        self.tell_sizes = []

    def configure_population(self, n):
        self.inner.configure_population(n)
        self.n = n

    def init_state(self, key):
        return {"es": self.inner.init_state(key), "gen": jnp.zeros((), jnp.int32),
                "history": jnp.zeros((GENERATIONS, self.n), jnp.float32)}

    def ask(self, state, key):
        population, es = self.inner.ask(state["es"], key)
        return population, {**state, "es": es}

    def evaluate(self, member, key):
        fitness, _ = self.inner.evaluate(member, key)
        return fitness, {"abs_x0": jnp.abs(member[0])}

    def tell(self, state, population, fitness):
        self.tell_sizes.append(fitness.shape)
        es, metrics = self.inner.tell(state["es"], population, fitness)
        history = state["history"].at[state["gen"]].set(fitness)
        return {"es": es, "gen": state["gen"] + 1, "history": history}, metrics


def evolve(module, devices=4, population_size=10, strategy="shard_map", **kw):
    kw = {**dict(max_generations=GENERATIONS, log_every_n_generations=3), **QUIET, **kw}
    if isinstance(strategy, str) and strategy != "single":
        strategy = ShardMapStrategy(devices=devices) if strategy == "shard_map" else strategy
        kw["devices"] = devices if isinstance(strategy, str) else "auto"
    trainer = PopulationTrainer(population_size, strategy=strategy, **kw)
    seen = []

    class Rec(jt.Callback):
        def on_generation_end(self, trainer, module, metrics):
            seen.append(metrics)

    trainer.callbacks.append(Rec())
    trainer.fit(module)
    return trainer, seen


def host_leaves(state):
    return [np.asarray(jax.random.key_data(x)) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
            else np.asarray(x) for x in jax.tree.leaves(jax.device_get(state))]


def assert_bitwise_equal(a, b):
    for x, y in zip(host_leaves(a), host_leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.atleast_1d(x).view(np.uint8), np.atleast_1d(y).view(np.uint8))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,population_size,devices",
                         [("Open_ES", 10, (1, 2, 4)), ("CMA_ES", 10, (1, 4))])
def test_fitness_and_final_state_bitwise_equal_on_1_2_4_devices(algorithm, population_size, devices):
    runs = {n: evolve(Recording(algorithm), n, population_size) for n in devices}
    ref = runs[1][0].state
    history = np.asarray(ref["history"])
    assert history.shape == (GENERATIONS, population_size)
    assert np.all(np.isfinite(history)) and len(np.unique(history)) == history.size
    for n in devices[1:]:
        assert_bitwise_equal(runs[n][0].state, ref)
        assert [m["fitness/mean"] for m in runs[n][1]] == [m["fitness/mean"] for m in runs[1][1]]


def test_padding_never_reaches_tell_or_logged_statistics():
    module = Recording("Open_ES")
    trainer, seen = evolve(module, devices=4, population_size=10)
    assert set(module.tell_sizes) == {(10,)}  # traced with 10 real members, never 12
    history = np.asarray(trainer.state["history"], np.float64)
    assert [m["generation"] for m in seen] == [3.0, 6.0]
    last = seen[-1]
    assert last["population_size"] == 10.0
    assert last["fitness/mean"] == pytest.approx(history[3:].mean(axis=1).mean(), rel=1e-6)
    # the best and worst member of the interval's generations, not means of per-generation ones
    assert last["fitness/max"] == pytest.approx(history[3:].max(), rel=1e-6)
    assert last["fitness/min"] == pytest.approx(history[3:].min(), rel=1e-6)
    assert "member/abs_x0" in last and last["step"] == 6


def test_population_on_a_2x2_mesh_equals_one_device():
    strategy = ShardMapStrategy(mesh_shape=(2, 2), axis_names=("hosts", "devices"))
    two_d, _ = evolve(Recording(), population_size=10, strategy=strategy)
    one, _ = evolve(Recording(), devices=1, population_size=10)
    assert_bitwise_equal(two_d.state, one.state)


@pytest.mark.slow
def test_lax_map_members_are_device_count_independent_too():
    a, _ = evolve(Recording(), 1, 10, member_map="map", map_batch_size=2)
    b, _ = evolve(Recording(), 4, 10, member_map="map", map_batch_size=2)
    assert_bitwise_equal(a.state, b.state)


@pytest.mark.slow
def test_on_generation_end_once_per_generation_with_interval_one():
    calls = []

    class Gen(jt.Callback):
        def on_generation_end(self, trainer, module, metrics):
            calls.append((metrics["generation"], trainer.generation, metrics["fitness/min"]))

    trainer = PopulationTrainer(8, strategy="pmap", max_generations=4, log_every_n_generations=1,
                                callbacks=[Gen()], **QUIET)
    trainer.fit(FunctionES(sphere, 3, "CMA_ES", init_mean=2.0))
    assert [c[0] for c in calls] == [1.0, 2.0, 3.0, 4.0]
    assert [c[1] for c in calls] == [1, 2, 3, 4]
    assert all(c[2] > 0 for c in calls)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, None])
def test_population_size_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match=r"population_size=.*expected an int >= 1"):
        PopulationTrainer(bad, max_generations=1, **QUIET)


def test_other_bad_arguments_fail_at_construction():
    with pytest.raises(ValueError, match="max_generations"):
        PopulationTrainer(4, **QUIET)
    with pytest.raises(ValueError, match="member_map"):
        PopulationTrainer(4, max_generations=1, member_map="pmap", **QUIET)
    with pytest.raises(TypeError, match="PopulationModule"):
        PopulationTrainer(4, max_generations=1, **QUIET).fit(object())


def test_ask_returning_another_size_fails_before_compiling():
    class Wrong(jt.PopulationModule):
        def init_state(self, key):
            return {"x": jnp.zeros(())}

        def ask(self, state, key):
            return jnp.zeros((3, 2)), state

        def evaluate(self, member, key):
            return jnp.sum(member), {}

        def tell(self, state, population, fitness):
            return state, {}

    trainer = PopulationTrainer(5, max_generations=1, **QUIET)
    with pytest.raises(ValueError, match=r"leading sizes \[3\], expected population_size=5"):
        trainer.fit(Wrong())
    assert trainer.compile_seconds == {}


def test_open_es_rejects_odd_population_before_compiling():
    trainer = PopulationTrainer(7, max_generations=1, **QUIET)
    with pytest.raises(ValueError, match="Open_ES rejects population_size=7"):
        trainer.fit(FunctionES(sphere, 3, "Open_ES"))


def test_resume_continues_exactly(run_dir):
    def trainer(gens):
        return PopulationTrainer(10, strategy="shard_map", max_generations=gens,
                                 log_every_n_generations=2, default_root_dir=run_dir,
                                 logger=False, enable_progress_bar=False)

    straight = trainer(GENERATIONS)
    straight.fit(Recording())
    first = trainer(GENERATIONS // 2)
    first.fit(Recording())
    resumed = trainer(GENERATIONS)
    resumed.fit(Recording(), ckpt_path=first.log_dir + "/checkpoints")
    assert resumed.generation == GENERATIONS
    assert_bitwise_equal(resumed.state, straight.state)


def test_evaluate_reports_the_mean_solution():
    module = FunctionES(sphere, 4, "CMA_ES", init_mean=2.0)
    trainer, _ = evolve(module, devices=2, population_size=8, eval_every_n_generations=3)
    mean = np.asarray(module.mean(trainer.state), np.float64)
    result = trainer.evaluate(module)
    assert result["eval/fitness"] == pytest.approx(float(np.sum(mean**2)), rel=1e-5)
    assert result["eval/distance_to_origin"] == pytest.approx(float(np.linalg.norm(mean)), rel=1e-5)
    assert result["eval/fitness"] < 4 * 2.0**2  # improved on the start (16)
