"""ERL with a search distribution instead of the GA (EvoRL's ERL-ES and
ERL-EDA): the vanilla ES recombination and the mean's move by hand, the
population and search equal bit for bit on 1 and 4 devices, the RL actor
injected as a sample (ERL-ES) or as the mean (ERL-EDA), config errors, and the
recipes learning Pendulum at a small budget."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import flatten_util

from jaxtrainer.algorithms.erl import ERLConfig
from jaxtrainer.algorithms.evolution import ParamsSearch, elite_weights, move_mean_toward
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy
from tests._support import toys
from tests.algorithms.test_erl import TINY, TrainOnly, fit


def _init(key):
    return {"w": jax.random.normal(key, (2, 3)), "b": jnp.zeros(3)}


def test_vanilla_es_takes_the_log_weighted_elites_and_keeps_its_std():
    search = ParamsSearch("SimpleES", _init, 4, std=0.1, num_elites=2)
    state = jax.jit(search.init_state)(jax.random.key(0))  # jitted: a program, not one an op
    population, state = jax.jit(search.ask)(state, jax.random.key(1))
    state, _ = jax.jit(search.tell)(state, population, jnp.array([1.0, 4.0, 2.0, 3.0]))
    w = np.log(2.5) - np.log([1.0, 2.0])
    w /= w.sum()
    np.testing.assert_allclose(elite_weights(2, shift=0.5), w, rtol=1e-6)
    want = jax.tree.map(lambda x: w[0] * x[1] + w[1] * x[3], population)  # fitness 4, then 3
    for a, b in zip(jax.tree.leaves(search.mean(state)), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.es.std, 0.1)


def test_the_mean_moves_a_stepsize_of_the_way_to_the_actor():
    search = ParamsSearch("Open_ES", _init, 4, std=0.1, learning_rate=0.05)
    state = search.init_state(jax.random.key(0))
    actor = _init(jax.random.key(5))
    moved = move_mean_toward(state, actor, 0.25)
    flat = flatten_util.ravel_pytree(actor)[0]
    np.testing.assert_allclose(moved.es.mean, 0.75 * state.es.mean + 0.25 * flat, rtol=1e-6)
    np.testing.assert_array_equal(move_mean_toward(state, actor, 1.0).es.mean, flat)


def test_a_population_based_algorithm_or_a_mean_injection_without_a_search_is_refused():
    with pytest.raises(ValueError, match=r"algorithm='SimpleGA' .* use evolution='ga'"):
        ParamsSearch("SimpleGA", _init, 4, std=0.1)
    with pytest.raises(ValueError, match=r"^ERLConfig.rl_injection='mean' .* evolution='ga'"):
        ERLConfig(rl_injection="mean")
    with pytest.raises(ValueError, match=r"^ERLConfig.rl_injection='worst'"):
        ERLConfig(rl_injection="worst", evolution="Open_ES")


# 4 members + 4 RL episodes (one per device) of 20 steps: 160 env steps a generation
ES = dict(evolution="SimpleES", rl_injection="member", es_std=0.05, rl_episodes=4)
EDA = dict(evolution="Open_ES", rl_injection="mean", es_std=0.05, es_learning_rate=0.05,
           rl_episodes=4)


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("variant", [ES, EDA], ids=["erl_es", "erl_eda"])
def test_one_and_four_devices_sample_the_same_population_and_inject_the_rl_actor(variant):
    four, states4 = fit(PmapStrategy(devices=4), variant, max_env_steps=480)  # 3 generations
    one, states1 = fit(SingleDeviceStrategy(), variant, max_steps=1)
    # generation 0 does not learn: the search's update (by fitness ranks, gathered bit
    # for bit) and its next samples (replicated keys) are the same on 1 and 4 devices
    for a, b in zip(jax.tree.leaves(states1[0][0]), jax.tree.leaves(states4[0][0]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert states1[0][1]["es/best_fitness"] == states4[0][1]["es/best_fitness"]
    state = four.state
    toys.replicas_equal((state.population, state.rl, state.search))
    actor = flatten_util.ravel_pytree(jax.tree.map(np.asarray, state.rl.actor_params))[0]
    last = flatten_util.ravel_pytree(jax.tree.map(lambda x: np.asarray(x)[3],
                                                  state.population))[0]
    mean = np.asarray(state.search.es.mean)
    if variant is ES:  # the RL actor is the next generation's last sample
        assert int(state.injected) == 3
        np.testing.assert_array_equal(last, actor)
        assert not np.array_equal(mean, actor)
    else:  # the RL actor is the mean the next generation is sampled around
        assert int(state.injected) == -1
        np.testing.assert_array_equal(mean, actor)
        assert not np.array_equal(last, actor)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_plus_two_generations_equal_four_on_four_devices(tmp_path):
    """ERL-EDA (its search has Adam moments; ERL-ES's differs only in where the
    actor goes, tested above): generations 2-4 learn (learning_starts: 240 env
    steps, 160 a generation); the search's state (mean, Adam moments, std,
    generation counter) resumes too."""
    straight = toys.two_plus_two_on_four_devices(
        tmp_path, lambda: TrainOnly(ERLConfig(**{**TINY, **EDA})))
    state = straight.state
    assert int(state.generation) == 4 and int(state.search.es.generation_counter) == 4
    toys.replicas_equal((state.population, state.rl, state.search))
