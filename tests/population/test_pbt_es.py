"""Population-based training over evolution strategies: an OpenAI-ES state
carries its learning rate and search std as traced hyperparameters (one
compiled generation for any values, bit for bit the constant program at the
given values), and PBT over OpenAI-ES runs on 2 devices compiles once, copies
whole ES states and perturbs the copies' learning rate and std."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxtrainer.algorithms.es import ESState, FunctionES, sphere
from jaxtrainer.algorithms.neuro_es import NeuroES
from jaxtrainer.distributed import AXIS_NAME
from jaxtrainer.population import PBT, GenerationModule
from tests._support import toys
from tests.population.test_pbt_offpolicy import assert_copied_and_perturbed, pbt_fit


def negative_sphere(x):
    return -sphere(x)


def openes(**kw):
    """OpenAI-ES maximising ``-|x|^2`` from ``x = 1`` (3 dims), 8 solutions a
    generation."""
    kw.setdefault("learning_rate", 0.1)
    kw.setdefault("std", 0.2)
    return FunctionES(negative_sphere, 3, "Open_ES", init_mean=1.0, maximize=True,
                      population_size=8, **kw)


def generations(es, n, state=None, hyperparams=None):
    """``n`` generations (keys 0..n-1), one jitted generation per call site."""
    module = GenerationModule(es, 8, (AXIS_NAME,))
    module.validate(1)
    step = jax.jit(module.training_step)
    state = jax.jit(module.init_state)(jax.random.key(0)) if state is None else state
    if hyperparams is not None:
        state = state.replace(hyperparams=hyperparams)
    for i in range(n):
        state, _ = step(state, jax.random.key(i))
    return state, step


@pytest.mark.slow
def test_learning_rate_and_std_are_traced_and_the_given_values_are_the_constant_program():
    es = openes()
    state, step = generations(es, 3)
    assert {k: float(v) for k, v in state.hyperparams.items()} == \
        {"learning_rate": np.float32(0.1), "std": np.float32(0.2)}
    # the constant program: a plain Adam and a constant std schedule, nothing traced
    constant, _ = generations(openes(learning_rate=None, std=None,
                                     optimizer=optax.adam(0.1),
                                     algorithm_kwargs={"std_schedule":
                                                       optax.constant_schedule(0.2)}), 3)
    assert constant.hyperparams is None
    np.testing.assert_array_equal(state.es.mean, constant.es.mean)
    np.testing.assert_array_equal(state.es.best_solution, constant.es.best_solution)
    toys.assert_trees_equal(state.es.opt_state.inner_state, constant.es.opt_state)
    assert float(state.es.std) == float(constant.es.std) == np.float32(0.2)

    # other numbers in the state: another search, the same compiled generation
    init = jax.jit(GenerationModule(es, 8, (AXIS_NAME,)).init_state)(jax.random.key(0))
    moved = {"learning_rate": jnp.float32(0.02), "std": jnp.float32(0.05)}
    programs = step._cache_size()
    other = init.replace(hyperparams=moved)
    for i in range(3):
        other, metrics = step(other, jax.random.key(i))
    assert step._cache_size() == programs
    assert float(other.es.std) == np.float32(0.05)
    assert float(other.es.opt_state.hyperparams["learning_rate"]) == np.float32(0.02)
    assert not np.array_equal(other.es.mean, state.es.mean)


def test_only_what_was_given_is_traced():
    cma = FunctionES(sphere, 3, "CMA_ES", std=0.5, population_size=8)
    assert jax.eval_shape(cma.init_state, jax.random.key(0)).hyperparams is None
    neuro = NeuroES("CartPole-v1", "Open_ES", hidden_sizes=(), learning_rate=0.05,
                    population_size=8)  # std not given: evosax's schedule, a constant
    assert set(jax.eval_shape(neuro.init_state, jax.random.key(0)).hyperparams) == \
        {"learning_rate"}
    with pytest.raises(ValueError, match=r"\['std'\] are not in .*choose from \['learning_rate'\]"):
        PBT(GenerationModule(neuro, 8, (AXIS_NAME,)), {"std": (0.01, 0.5)},
            population_size=2, fitness_metric="fitness/mean").validate(1)
    assert ESState.__dataclass_fields__["hyperparams"].default is None


@pytest.mark.slow
def test_pbt_over_openes_runs_compiles_once_and_copies_es_states(run_dir):
    """2 OpenAI-ES runs on 2 devices (each device ``lax.map``s its run: the
    centered-rank shaping cannot be vmapped inside shard_map), exploit at the
    4th generation: the loser's search distribution, optimizer state and keys
    are the winner's, its learning rate and std the winner's times 0.8 or 1.2."""
    space = {"learning_rate": (0.01, 0.3), "std": (0.02, 0.5)}
    trainer, state, compiles, lowered = pbt_fit(
        GenerationModule(openes(), 8, (AXIS_NAME,)), space, "fitness/mean", run_dir,
        vectorize=False)
    assert len(lowered) == 2, lowered  # the init program and the training program, once each
    assert compiles.events == []
    assert trainer.global_step == 4 and trainer.env_steps == 0
    assert_copied_and_perturbed(state, space, min_leaves=8)
    # the members' ES states moved toward the optimum 0 from 1
    assert np.all(np.linalg.norm(state.members.es.mean, axis=-1) < np.sqrt(3.0))
