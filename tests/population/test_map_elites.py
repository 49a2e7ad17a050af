"""MAP-Elites: the repertoire's insertion rule and QD metrics worked by hand, the
Iso+LineDD emitter, the arm task, and runs that do not depend on the device count
or on a stop and resume."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.population import (
    MAPElites,
    QDTask,
    Repertoire,
    grid_centroids,
    isoline_variation,
    make_task,
)
from jaxtrainer.population.qd_tasks import arm
from tests._support import population
from tests.population.test_population import assert_bitwise_equal

ONE_GENE = jax.ShapeDtypeStruct((1,), jnp.float32)

# jitted: one program a call (op by op, each call compiled a program per operation)
cells = jax.jit(Repertoire.cells)
qd_metrics = jax.jit(Repertoire.metrics)
isoline = jax.jit(isoline_variation, static_argnums=(5, 6))
arm_jit = jax.jit(arm)


def grid_2x2():
    """Cells of [0, 1]^2 in grid_centroids' order: 0 (.25, .25), 1 (.75, .25),
    2 (.25, .75), 3 (.75, .75)."""
    return Repertoire.empty(ONE_GENE, grid_centroids((2, 2), 0.0, 1.0), 0.0, 1.0, (2, 2))


def add(rep, genes, descriptors, fitnesses):
    return jax.jit(Repertoire.add)(rep, jnp.asarray(genes, jnp.float32)[:, None],
                                   jnp.asarray(descriptors, jnp.float32),
                                   jnp.asarray(fitnesses, jnp.float32))


def test_grid_centroids_of_a_2x2_grid_first_coordinate_fastest():
    np.testing.assert_array_equal(grid_centroids((2, 2), 0.0, 1.0),
                                  [[.25, .25], [.75, .25], [.25, .75], [.75, .75]])
    np.testing.assert_allclose(grid_centroids((2,), -1.0, 3.0), [[0.0], [2.0]])


def test_insertion_into_a_2x2_grid_keeps_the_best_per_cell():
    rep = grid_2x2()
    assert np.all(np.asarray(rep.fitnesses) == -np.inf) and not np.any(rep.filled)
    # cells:              0           1           0           3
    rep = add(rep, [10, 11, 12, 13], [[.1, .1], [.9, .1], [.2, .3], [.6, .9]], [1, 2, 3, 4])
    np.testing.assert_array_equal(rep.fitnesses, [3, 2, -np.inf, 4])
    np.testing.assert_array_equal(rep.genotypes[:, 0], [12, 11, 0, 13])
    np.testing.assert_allclose(rep.descriptors, [[.2, .3], [.9, .1], [0, 0], [.6, .9]])
    # an equal fitness leaves the elite in place; a worse one too; any fitness fills cell 2
    rep = add(rep, [20, 21, 22], [[.3, .2], [.8, .2], [.1, .9]], [3, 1, -5])
    np.testing.assert_array_equal(rep.fitnesses, [3, 2, -5, 4])
    np.testing.assert_array_equal(rep.genotypes[:, 0], [12, 11, 22, 13])


def test_a_tie_within_a_batch_inserts_the_first_candidate():
    rep = add(grid_2x2(), [7, 8, 9], [[.9, .9], [.6, .6], [.7, .8]], [1.5, 1.5, 1.5])
    np.testing.assert_array_equal(rep.fitnesses, [-np.inf, -np.inf, -np.inf, 1.5])
    assert rep.genotypes[3, 0] == 7


def test_a_descriptor_outside_the_bounds_lands_in_the_border_cell():
    rep = grid_2x2()
    np.testing.assert_array_equal(cells(rep, jnp.array([[1.5, -0.2], [-3.0, 7.0], [2.0, 2.0]])),
                                  [1, 2, 3])
    rep = add(rep, [5], [[1.5, -0.2]], [0.5])
    np.testing.assert_array_equal(rep.fitnesses, [-np.inf, 0.5, -np.inf, -np.inf])
    np.testing.assert_allclose(rep.descriptors[1], [1.5, -0.2])  # kept as evaluated


def test_a_nan_fitness_or_descriptor_is_never_inserted():
    rep = add(grid_2x2(), [1, 2], [[.1, .1], [np.nan, .9]], [np.nan, 3.0])
    assert not np.any(rep.filled)


def test_qd_metrics_of_a_known_repertoire_with_qdax_offset():
    rep = add(grid_2x2(), [1, 2, 3], [[.1, .1], [.9, .1], [.9, .9]], [-0.5, -0.25, -1.0])
    metrics = jax.device_get(qd_metrics(rep, 0.0))
    assert metrics["qd_score"] == pytest.approx(-1.75)
    assert metrics["coverage"] == pytest.approx(75.0)
    assert metrics["max_fitness"] == pytest.approx(-0.25)
    # QDax: sum of fitnesses of the filled cells + qd_offset * filled cells
    assert float(qd_metrics(rep, 1.0)["qd_score"]) == pytest.approx(-1.75 + 3 * 1.0)
    empty = jax.device_get(qd_metrics(grid_2x2(), 2.0))
    assert empty["qd_score"] == 0.0 and empty["coverage"] == 0.0
    assert empty["max_fitness"] == -np.inf


def test_grid_cells_are_the_nearest_centroid_on_a_3d_grid():
    shape, low, high = (3, 4, 5), [-1.0, 0.0, 2.0], [1.0, 2.0, 7.0]
    centroids = grid_centroids(shape, low, high)
    grid = Repertoire.empty(ONE_GENE, centroids, low, high, shape)
    anywhere = Repertoire.empty(ONE_GENE, centroids, low, high)  # nearest of every centroid
    d = jax.random.uniform(jax.random.key(0), (500, 3), minval=-3.0, maxval=9.0)
    np.testing.assert_array_equal(cells(grid, d), cells(anywhere, d))


def test_isoline_variation_is_x_plus_iso_plus_line_noise():
    x = {"a": jnp.array([[0.2, 0.4], [0.6, 0.8]]), "b": jnp.array([[1.0], [2.0]])}
    y = {"a": jnp.array([[0.4, 0.0], [0.6, 1.0]]), "b": jnp.array([[3.0], [0.0]])}
    key = jax.random.key(3)
    out = isoline(x, y, key, 0.1, 0.5)
    rest, line_key = jax.random.split(key)
    line = jax.random.normal(line_key, (2,)) * 0.5
    keys = jax.random.split(rest, 2)
    for i, name in enumerate(["a", "b"]):  # leaves in jax.tree order
        iso = jax.random.normal(keys[i], x[name].shape) * 0.1
        np.testing.assert_allclose(out[name], x[name] + iso + (y[name] - x[name]) * line[:, None],
                                   rtol=1e-6)
    # no noise: the first parent, clipped
    same = isoline(x, y, key, 0.0, 0.0, 0.3, 0.7)
    np.testing.assert_allclose(same["a"], [[0.3, 0.4], [0.6, 0.7]])


def test_arm_fitness_and_end_effector_worked_by_hand():
    fitness, position = arm_jit(jnp.full((4,), 0.5))  # straight arm along +x
    assert float(fitness) == 0.0
    np.testing.assert_allclose(position, [1.0, 0.5], atol=1e-6)
    fitness, position = arm_jit(jnp.array([0.0, 1.0]))  # -pi then +pi: folded back to the centre
    assert float(fitness) == pytest.approx(-0.5)
    np.testing.assert_allclose(position, [0.5, 0.5], atol=1e-6)
    fitness, position = arm_jit(jnp.array([0.75, 0.5, 2.0]))  # clipped to [0, 1]; +pi/2, 0, +pi
    assert float(fitness) == pytest.approx(-float(np.std([0.75, 0.5, 1.0])), rel=1e-6)
    # cumulated angles pi/2, pi/2, 3pi/2: x = (0 + 0 + 0) / 6 + .5, y = (1 + 1 - 1) / 6 + .5
    np.testing.assert_allclose(position, [0.5, 0.5 + 1 / 6], atol=1e-6)


def test_tasks_by_name_and_bad_arguments():
    task = make_task("arm", num_dims=5)
    assert isinstance(task, QDTask) and task.num_dims == 5 and task.descriptor_size == 2
    with pytest.raises(ValueError, match="unknown quality-diversity task 'amr'; did you mean 'arm'"):
        make_task("amr")
    with pytest.raises(ValueError, match="grid_shape=\\[10, 10, 10\\]: the 'arm' task has 2"):
        MAPElites("arm", grid_shape=(10, 10, 10))
    with pytest.raises(ValueError, match="iso_sigma=-0.1: expected a non-negative number"):
        MAPElites(iso_sigma=-0.1)
    with pytest.raises(ValueError, match="num_dims=0"):
        MAPElites(num_dims=0)


def evolve(devices, generations=8, strategy="pmap", **kw):
    module = MAPElites("arm", grid_shape=(8, 8), iso_sigma=0.05, line_sigma=0.1, num_dims=6)
    trainer, seen = population.evolve(module, devices, generations, strategy, **kw)
    return trainer, module, seen


@pytest.mark.default_emitters
def test_one_and_four_devices_end_with_bitwise_equal_archives():
    one, module, seen = evolve(1)
    four, _, seen4 = evolve(4)  # 10 members padded to 12 over 4 devices
    assert_bitwise_equal(four.state, one.state)
    rep = one.state.repertoire
    metrics = jax.device_get(rep.metrics(0.0))
    assert 0 < metrics["coverage"] <= 100 and int(one.state.generation) == 8
    # the logged QD metrics are the repertoire's at the interval's end
    assert seen[-1]["qd/coverage"] == pytest.approx(float(metrics["coverage"]))
    assert seen[-1]["qd/score"] == pytest.approx(float(metrics["qd_score"]))
    assert seen[-1]["qd/max_fitness"] == pytest.approx(float(metrics["max_fitness"]))
    assert [m["qd/score"] for m in seen4] == [m["qd/score"] for m in seen]
    # every elite is where its descriptor says, and is its genotype's evaluation
    filled = np.asarray(rep.filled)
    fit, desc = jax.vmap(arm)(rep.genotypes)
    np.testing.assert_array_equal(np.asarray(fit)[filled], np.asarray(rep.fitnesses)[filled])
    np.testing.assert_array_equal(np.asarray(rep.cells(desc))[filled], np.flatnonzero(filled))
    assert one.evaluate(module)["eval/coverage"] == pytest.approx(float(metrics["coverage"]))


def test_a_stopped_and_resumed_run_equals_an_uninterrupted_one(run_dir):
    kw = dict(default_root_dir=run_dir, enable_checkpointing=True, strategy="shard_map")
    straight, _, _ = evolve(2, **kw)
    first, _, _ = evolve(2, generations=4, **kw)
    resumed, _, seen = evolve(2, ckpt_path=first.log_dir + "/checkpoints", **kw)
    assert resumed.generation == 8 and [m["generation"] for m in seen] == [8.0]  # 5-8 only
    assert_bitwise_equal(resumed.state, straight.state)
