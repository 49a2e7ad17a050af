"""ME-ES: the novelty against an archive of three points and the exploit/explore
alternation worked by hand, one ES step against its formula, and runs that do
not depend on the device count or on a stop and resume."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import ModelCheckpoint
from jaxtrainer.population import MEES, me_es
from tests._support import population
from tests.population.test_population import assert_bitwise_equal

novelty = jax.jit(me_es.novelty, static_argnums=3)  # one program a call, not one an operation


def small(**kw):
    settings = dict(
        num_dims=6,
        grid_shape=(8, 8),
        num_optimizer_steps=2,
        learning_rate=0.05,
        novelty_nearest_neighbors=2,
        novelty_archive_size=8,
        last_updated_size=3,
        explore_num_cell_sample=2,
    )
    return MEES("arm", **{**settings, **kw})


def test_novelty_is_the_mean_distance_to_the_nearest_stored_descriptors():
    # three stored points and a fourth row not yet written (ignored)
    archive = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [5.0, 5.0]])
    out = novelty(jnp.array([[0.0, 1.0], [1.0, 1.0], [3.0, 0.0]]), archive, 3, 2)
    # (0, 1): 1 to (0, 0), sqrt 2 to (1, 0), 1 to (0, 2) -> (1 + 1) / 2
    # (1, 1): sqrt 2, 1, sqrt 2                          -> (1 + sqrt 2) / 2
    # (3, 0): 3, 2, sqrt 13                              -> (2 + 3) / 2
    np.testing.assert_allclose(out, [1.0, (1 + np.sqrt(2)) / 2, 2.5], rtol=1e-6)
    # one stored point, k = 2: the distance to it alone
    np.testing.assert_allclose(novelty(jnp.array([[3.0, 4.0]]), archive, 1, 2), [5.0])


def test_explore_and_exploit_alternate_every_num_optimizer_steps():
    steps = jnp.arange(8)
    both = [bool(small()._explores(s)) for s in steps]
    assert both == [True, True, False, False, True, True, False, False]
    assert not any(bool(small(use_explore=False)._explores(s)) for s in steps)
    assert all(bool(small(use_exploit=False)._explores(s)) for s in steps)


def test_generation_0_inserts_the_start_then_one_es_step_up_the_novelty():
    module = small()
    module.configure_population(8)
    # one program each for init, ask, tell and the task (op by op: about 190 programs)
    ask, tell, fn = jax.jit(module.ask), jax.jit(module.tell), jax.jit(module.task.fn)
    evaluate = jax.jit(jax.vmap(lambda g: module.task.fn(g, None)))
    state = jax.jit(module.init_state)(jax.random.key(0))
    start = state.es.es.mean
    gen0, state = ask(state, jax.random.key(1))
    np.testing.assert_array_equal(gen0, jnp.broadcast_to(start, (8, 6)))
    fit, desc = evaluate(gen0)
    state, metrics = tell(state, gen0, fit, {"descriptor": desc})
    assert int(state.archive_count) == 1 and float(metrics["qd/coverage"].value) == 100 / 64
    np.testing.assert_array_equal(state.archive[0], desc[0])
    np.testing.assert_array_equal(state.last_genotypes[0], start)  # it entered the repertoire
    assert float(metrics["es/explore"].value) == 0.0

    # generation 1 (ES step 0, exploring): the parent is the only elite, the start
    samples, asked = ask(state, jax.random.key(2))
    np.testing.assert_allclose(samples[:4] + samples[4:], jnp.tile(2 * start, (4, 1)), atol=1e-6)
    fit, desc = evaluate(samples)
    told, metrics = tell(asked, samples, fit, {"descriptor": desc})
    assert float(metrics["es/explore"].value) == 1.0
    # the step: centred ranks r of the novelties, gradient -sum r_j eps_j / (P sigma) plus
    # 0.02 * parent; Adam's first step moves each gene by -lr * sign(gradient)
    scores = novelty(desc, state.archive, 1, 2)
    ranks = jnp.argsort(jnp.argsort(scores)) / 7 - 0.5
    eps = (samples - start) / 0.02
    grad = -jnp.sum(ranks[:, None] * eps, axis=0) / (8 * 0.02) + 0.02 * start
    np.testing.assert_allclose(told.es.es.mean, start - 0.05 * jnp.sign(grad), atol=1e-5)
    assert int(told.archive_count) == 2 and int(told.generation) == 2
    child_fit, child_desc = fn(told.es.es.mean, None)
    np.testing.assert_allclose(told.archive[1], child_desc, rtol=1e-6)
    assert float(metrics["es/offspring_fitness"].value) == pytest.approx(float(child_fit))


def test_bad_arguments_are_named_before_anything_compiles():
    with pytest.raises(ValueError, match="use_explore=False and use_exploit=False"):
        small(use_explore=False, use_exploit=False)
    with pytest.raises(
        ValueError, match="novelty_nearest_neighbors=9: expected at most novelty_archive_size=8"
    ):
        small(novelty_nearest_neighbors=9)
    with pytest.raises(ValueError, match="sample_sigma=0: expected a number > 0"):
        small(sample_sigma=0)
    with pytest.raises(ValueError, match="population_size=7: ME-ES with sample_mirror"):
        small().configure_population(7)


def evolve(devices, generations=8, strategy="pmap", callbacks=(), **kw):
    return population.evolve(small(), devices, generations, strategy, callbacks=callbacks, **kw)


@pytest.mark.default_emitters
def test_one_and_four_devices_end_with_bitwise_equal_archives():
    one, seen = evolve(1)
    four, _ = evolve(4)  # 10 samples padded to 12 over 4 devices
    assert_bitwise_equal(four.state, one.state)
    state = one.state
    rep = state.repertoire
    assert int(state.generation) == 8 and int(state.archive_count) == 8
    assert seen[-1]["es/explore"] == 0.0  # ES steps 0-1 explore, 2-3 exploit, 4-5, 6: ...
    # every elite is its genotype's evaluation, in the cell its descriptor says
    filled = np.asarray(rep.filled)
    assert filled.sum() >= 2
    fit, desc = jax.jit(jax.vmap(lambda g: small().task.fn(g, None)))(rep.genotypes)
    np.testing.assert_allclose(
        np.asarray(fit)[filled], np.asarray(rep.fitnesses)[filled], rtol=1e-6
    )
    cells = jax.jit(type(rep).cells)(rep, desc)  # jitted: one program, not one an operation
    np.testing.assert_array_equal(np.asarray(cells)[filled], np.flatnonzero(filled))


def test_a_stopped_and_resumed_run_equals_an_uninterrupted_one(run_dir):
    """The run's own checkpoint at generation 4 of 8 (inside an exploit stretch), resumed
    in another Trainer, ends where the run does, bit for bit."""
    kw = dict(default_root_dir=run_dir, enable_checkpointing=True, strategy="shard_map")
    every = ModelCheckpoint(every_n_steps=4, async_save=False)
    straight, _ = evolve(2, callbacks=[every], **kw)
    assert (Path(straight.log_dir) / "checkpoints" / "4").is_dir()
    resumed, _ = evolve(2, ckpt_path=Path(straight.log_dir) / "checkpoints" / "4", **kw)
    assert resumed.generation == 8
    assert_bitwise_equal(resumed.state, straight.state)
