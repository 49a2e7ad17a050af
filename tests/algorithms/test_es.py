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
    rastrigin,
    resolve_algorithm,
    sphere,
)
from jaxtrainer.algorithms.neuro_es import NeuroES
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


# ------------------------------------- evosax's reinforcement learning example's settings
def test_scan_episode_loop_gives_the_while_loops_fitness_bit_for_bit():
    """``episode_loop="scan"`` runs every step of the time limit (evosax's rollout) and
    records the same first episodes as the loop that stops once they have all ended."""
    def fitness(loop):
        es = NeuroES("CartPole-v1", hidden_sizes=(4,), num_episodes=3, population_size=6,
                     std=0.5, episode_loop=loop)
        population, _ = es.ask(es.init_state(jax.random.key(0)), jax.random.key(1))
        return jax.jit(jax.vmap(es.evaluate))(population, jax.random.split(jax.random.key(2), 6))

    (f_while, x_while), (f_scan, x_scan) = fitness("while"), fitness("scan")
    np.testing.assert_array_equal(f_while, f_scan)
    np.testing.assert_array_equal(x_while["episode_length"], x_scan["episode_length"])
    assert float(jnp.min(f_scan)) >= 8.0  # CartPole pays 1 a step
    with pytest.raises(ValueError, match="episode_loop='until_done': choose one of while, scan"):
        NeuroES("CartPole-v1", episode_loop="until_done")


def test_normalized_observations_count_every_observation_acted_on_and_reach_the_policy():
    """One generation: the statistics count each member's steps of its counted episodes
    (CartPole's return is its length), their mean is the observations' (CartPole starts
    near 0), the next generation's members carry them and the mean's policy uses them."""
    es = NeuroES("CartPole-v1", hidden_sizes=(4,), num_episodes=2, population_size=4, std=0.5,
                 normalize_observations=True)
    assert es.tell_extras
    state = es.init_state(jax.random.key(0))
    assert float(state.obs_stats.count) == 0.0
    (params, stats), state = es.ask(state, jax.random.key(1))
    assert stats.mean.shape == (4, 4) and float(jnp.max(jnp.abs(stats.mean))) == 0.0
    fitness, extras = jax.vmap(es.evaluate)((params, stats), jax.random.split(jax.random.key(2), 4))
    state, _ = es.tell(state, (params, stats), fitness, extras)
    # every episode ended (CartPole's limit is 500): count = the steps of all 4 x 2 episodes
    assert float(state.obs_stats.count) == pytest.approx(float(jnp.sum(fitness)) * 2)
    assert float(jnp.sum(extras["obs_moments"][0])) == float(state.obs_stats.count)
    assert float(jnp.max(jnp.abs(state.obs_stats.mean))) < 0.5  # a pole near upright
    assert float(jnp.min(state.obs_stats.var)) > 0.0
    (_, stats), _ = es.ask(state, jax.random.key(3))
    np.testing.assert_array_equal(stats.mean[3], state.obs_stats.mean)
    mean, policy_stats = es.policy_params(state)
    assert policy_stats is state.obs_stats
    obs = jnp.ones((2, 4))
    np.testing.assert_array_equal(
        es.greedy_policy()((mean, policy_stats), obs, None),
        es.act(mean, jt.algorithms.normalization.normalize_obs(state.obs_stats, obs)))


def test_shifted_sums_merge_as_the_two_pass_update():
    from jaxtrainer.algorithms import normalization

    x = jax.random.normal(jax.random.key(0), (50, 3)) * 2.0 + 5.0
    stats = normalization.update(normalization.init((3,)), x[:20])
    shifted = x[20:] - stats.mean
    merged = normalization.merge_shifted(stats, 30.0, shifted.sum(0), jnp.square(shifted).sum(0))
    direct = normalization.update(stats, x[20:])
    for a, b in zip(jax.tree.leaves(merged), jax.tree.leaves(direct), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    empty = normalization.merge_shifted(stats, 0.0, jnp.zeros(3), jnp.zeros(3))
    for a, b in zip(jax.tree.leaves(empty), jax.tree.leaves(stats), strict=True):
        np.testing.assert_array_equal(a, b)


def test_decayed_learning_rate_and_std_follow_evosaxs_exponential_schedules():
    """Ours with ``learning_rate_decay=0.1, std_decay=0.2`` over 4 generations against
    evosax's ``Open_ES`` with ``optax.exponential_decay`` schedules (its example's), on
    the same keys and fitness: the same means and stds every generation."""
    import optax
    from evosax.algorithms import Open_ES

    gens, pop = 4, 8
    ours = EvosaxES("Open_ES", jnp.zeros(5), learning_rate=0.05, std=0.5,
                    learning_rate_decay=0.1, std_decay=0.2, decay_generations=gens,
                    fitness_shaping="centered_rank", population_size=pop)
    theirs = Open_ES(pop, jnp.zeros(5), optimizer=optax.adam(optax.exponential_decay(0.05, gens, 0.1)),
                     std_schedule=optax.exponential_decay(0.5, gens, 0.2))
    state = ours.init_state(jax.random.key(0))
    mean0 = ours.mean(state) + 1.0
    state = state.replace(es=state.es.replace(mean=mean0))
    peer = theirs.init(jax.random.key(0), mean0, theirs.default_params)
    for g in range(gens):
        key = jax.random.key(10 + g)
        population, state = ours.ask(state, key)
        theirs_pop, peer = theirs.ask(jax.random.split(key)[0], peer, theirs.default_params)
        np.testing.assert_allclose(population, theirs_pop, rtol=1e-6)
        fitness = jax.vmap(sphere)(population)
        state, _ = ours.tell(state, population, fitness)
        peer, _ = theirs.tell(jax.random.key(0), theirs_pop, fitness, peer, theirs.default_params)
        np.testing.assert_allclose(state.es.mean, peer.mean, rtol=1e-6)
        np.testing.assert_allclose(state.es.std, peer.std, rtol=1e-6)
    assert float(state.es.std) == pytest.approx(0.5 * 0.2 ** ((gens - 1) / gens), rel=1e-6)


def test_decays_span_the_trainers_budget_and_bad_decays_are_clear_errors():
    from jaxtrainer.distributed import AXIS_NAME
    from jaxtrainer.population import GenerationModule

    es = EvosaxES("Open_ES", jnp.zeros(3), learning_rate=0.1, std=1.0, std_decay=0.5,
                  population_size=4)
    state = es.init_state(jax.random.key(0))
    with pytest.raises(ValueError, match="std_decay needs decay_generations= or the run's budget"):
        es.ask(state, jax.random.key(1))
    GenerationModule(es, 4, (AXIS_NAME,)).configure_budget(3)  # the PopulationTrainer's call
    state = state.replace(es=state.es.replace(generation_counter=3))
    _, asked = es.ask(state, jax.random.key(1))
    assert float(asked.es.std) == pytest.approx(0.5 ** (2 / 3))
    with pytest.raises(ValueError, match="learning_rate_decay=0.0: expected a positive factor"):
        EvosaxES("Open_ES", jnp.zeros(3), learning_rate=0.1, learning_rate_decay=0.0)
    with pytest.raises(ValueError, match="std_decay=0.5 with CMA_ES: needs a constant std="):
        EvosaxES("CMA_ES", jnp.zeros(3), std=1.0, std_decay=0.5)
    with pytest.raises(ValueError, match="decay_generations=0: expected a positive int"):
        EvosaxES("Open_ES", jnp.zeros(3), learning_rate=0.1, decay_generations=0)
