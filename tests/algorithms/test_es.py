"""Evolution strategies through the evosax adapter: convergence, shaping, errors, neuroevolution."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms.es import (
    FITNESS_SHAPING,
    EvosaxES,
    FunctionES,
    NeuroES,
    rastrigin,
    resolve_algorithm,
    sphere,
)
from jaxtrainer.population import PopulationTrainer

QUIET = dict(compile_evaluation_ahead=False, logger=False, enable_checkpointing=False, enable_progress_bar=False)


def evolve(module, population_size, generations, strategy="shard_map", seed=0, **kw):
    trainer = PopulationTrainer(population_size, strategy=strategy, max_generations=generations,
                                log_every_n_generations=generations, seed=seed, **QUIET, **kw)
    trainer.fit(module)
    return trainer


# ------------------------------------------------------------- optimisation
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["CMA_ES", "Sep_CMA_ES"])
def test_solves_10d_sphere_to_1e_minus_6(algorithm):
    es = FunctionES(sphere, 10, algorithm, init_mean=3.0, std=1.0)
    trainer = evolve(es, population_size=16, generations=250)
    result = trainer.evaluate(es)
    assert result["eval/fitness"] < 1e-6
    assert result["eval/distance_to_origin"] < 1e-3


@pytest.mark.slow
def test_cma_es_reaches_rastrigin_global_optimum_region_in_fixed_budget():
    # 10-d Rastrigin from a random start in [-4, 4]^10: every local minimum but the
    # global one has f >= 0.99 (a coordinate near +-1); 150 generations of 512.
    es = FunctionES(rastrigin, 10, "CMA_ES", init_range=4.0, std=3.0)
    trainer = evolve(es, population_size=512, generations=150)
    mean = np.asarray(es.mean(trainer.state))
    assert np.abs(es.init_mean_value).max() == 0.0
    assert np.abs(mean).max() < 1e-3  # in the global basin, at the optimum
    assert float(rastrigin(jnp.asarray(mean))) < 1e-3


# ------------------------------------------------------------ fitness shaping
def one_open_es_step(fitness, shaping, maximize=False, weight_decay=0.0):
    es = FunctionES(sphere, 1, "Open_ES", init_mean=0.5, std=1.0, learning_rate=1.0,
                    optimizer="sgd", fitness_shaping=shaping, maximize=maximize,
                    weight_decay=weight_decay, population_size=2)
    state = es.init_state(jax.random.key(0))
    population, state = es.ask(state, jax.random.key(1))
    state, metrics = es.tell(state, population, jnp.asarray(fitness, jnp.float32))
    return float(population[0, 0]), float(es.mean(state)[0]), metrics


def test_fitness_shaping_options_change_the_update_as_evosax_defines_them():
    # OpenAI-ES with sgd(lr=1), std=1, 2 antithetic members x = 0.5 +- z:
    # mean' = 0.5 - dot(shaped, x - 0.5) / 2.
    x0, mean, _ = one_open_es_step([3.0, 1.0], "identity")
    z = x0 - 0.5
    assert mean == pytest.approx(0.5 - (3.0 * z + 1.0 * -z) / 2, rel=1e-6)
    _, mean, _ = one_open_es_step([3.0, 1.0], "centered_rank")  # ranks -> [+0.5, -0.5]
    assert mean == pytest.approx(0.5 - (0.5 * z - 0.5 * -z) / 2, rel=1e-6)
    _, mean, _ = one_open_es_step([3.0, 1.0], "standardize")  # -> [+1, -1]
    assert mean == pytest.approx(0.5 - (z + z) / 2, rel=1e-4)
    _, mean, metrics = one_open_es_step([3.0, 1.0], "identity", maximize=True)  # negated
    assert mean == pytest.approx(0.5 + (3.0 * z - 1.0 * z) / 2, rel=1e-6)
    assert metrics["es/best_fitness"].reduce_fx == "max"  # maximised: the interval's best
    assert float(metrics["es/best_fitness"].value) == pytest.approx(3.0)  # user's sign
    _, mean, _ = one_open_es_step([3.0, 1.0], "identity", weight_decay=0.5)
    x = np.array([0.5 + z, 0.5 - z])
    f = np.array([3.0, 1.0]) + 0.5 * x**2
    assert mean == pytest.approx(0.5 - (f[0] * z - f[1] * z) / 2, rel=1e-5)
    assert set(FITNESS_SHAPING) == {"identity", "standardize", "normalize", "centered_rank", "weights"}


# -------------------------------------------------------------- bad input
def test_unknown_algorithm_lists_evosax_algorithms():
    with pytest.raises(ValueError, match=r"unknown evosax algorithm 'NotAnES'.*CMA_ES.*Open_ES"):
        FunctionES(sphere, 3, "NotAnES")
    assert resolve_algorithm("OpenES") == "Open_ES"
    assert resolve_algorithm("cma_es") == "CMA_ES"
    assert resolve_algorithm("SNES") == "SNES"


def test_bad_options_are_clear_errors_before_compiling():
    with pytest.raises(ValueError, match="fitness_shaping='rank'"):
        FunctionES(sphere, 3, fitness_shaping="rank")
    with pytest.raises(ValueError, match="CMA_ES has no optimizer"):
        FunctionES(sphere, 3, "CMA_ES", learning_rate=0.1)
    with pytest.raises(ValueError, match=r"does not take \['bogus'\]"):
        FunctionES(sphere, 3, "CMA_ES", algorithm_kwargs={"bogus": 1})
    with pytest.raises(ValueError, match=r"no field\(s\) \['nope'\]"):
        FunctionES(sphere, 3, "CMA_ES", es_params={"nope": 1.0}, population_size=4)
    with pytest.raises(ValueError, match="population size is not known"):
        FunctionES(sphere, 3, "CMA_ES").init_state(jax.random.key(0))
    with pytest.raises(ValueError, match="num_dims"):
        FunctionES(sphere, 0)
    trainer = PopulationTrainer(0 + 3, max_generations=1, **QUIET)
    with pytest.raises(ValueError, match="Open_ES rejects population_size=3"):
        trainer.fit(FunctionES(sphere, 3, "Open_ES"))
    assert trainer.compile_seconds == {}


@pytest.mark.slow
def test_any_evosax_algorithm_runs_including_population_based():
    for name in ("SNES", "SimpleGA"):  # distribution-based and population-based
        es = FunctionES(sphere, 4, name, init_mean=2.0)
        trainer = evolve(es, population_size=8, generations=20, strategy="pmap")
        assert np.isfinite(trainer.callback_metrics["fitness/min"]), name
        assert float(sphere(es.mean(trainer.state))) < 16.0, name  # improved on the start
    assert isinstance(es, EvosaxES) and isinstance(es, jt.PopulationModule)


# ------------------------------------------------------------ neuroevolution
@pytest.mark.slow
def test_neuroevolution_evaluates_the_mean_policy_on_fresh_episodes():
    es = NeuroES("CartPole-v1", "Open_ES", hidden_sizes=(4,), eval_episodes=8, population_size=4)
    trainer = PopulationTrainer(4, strategy="pmap", devices=2, max_generations=1, **QUIET)
    result = trainer.evaluate(es)  # fresh init_state: the network's initial mean policy
    assert 8.0 <= result["eval/episode_return"] <= 500.0
    assert result["eval/episode_return"] == pytest.approx(result["eval/episode_length"])
    direct = es._rollout(es.mean(trainer.state), jax.random.key(0), 8)["episode_return"]
    assert float(direct.count) == 8.0  # every episode ends within max_episode_steps


@pytest.mark.slow
def test_neuroevolution_is_device_count_independent_and_maximises_return():
    def run(devices):
        es = NeuroES("CartPole-v1", "Open_ES", hidden_sizes=(), learning_rate=0.05, std=0.5,
                     eval_episodes=4)
        trainer = PopulationTrainer(6, strategy="shard_map", devices=devices, max_generations=2,
                                    log_every_n_generations=2, **QUIET)
        trainer.fit(es)
        return es, trainer

    (_, t1), (_, t4) = run(1), run(4)  # 6 members: padded to 8 on 4 devices
    for a, b in zip(jax.tree.leaves(t1.state.es), jax.tree.leaves(t4.state.es), strict=True):
        np.testing.assert_array_equal(a, b)
    m = t4.callback_metrics
    assert m["fitness/max"] >= m["fitness/mean"] >= m["fitness/min"] >= 8.0  # CartPole returns
    assert m["member/episode_length"] == pytest.approx(m["fitness/mean"])  # reward 1 per step
    assert m["es/best_fitness"] == pytest.approx(m["fitness/max"])  # user's sign, not evosax's
    assert t4.env_steps == 2 * 6 * 1 * 500
    with pytest.raises(ValueError, match="eval_episodes=6 cannot be split evenly over 4"):
        PopulationTrainer(6, strategy="shard_map", max_generations=1, **QUIET).fit(
            NeuroES("CartPole-v1", hidden_sizes=(), eval_episodes=6))
