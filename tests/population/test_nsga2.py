"""NSGA-II: non-dominated ranks, crowding distances and hypervolume worked by
hand, the variation operators, the ZDT tasks, and runs that do not depend on the
device count or on a stop and resume."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.population import NSGA2, PopulationTrainer, make_mo_task, mo_tasks, nsga2
from jaxtrainer.population.mo_tasks import true_front
from tests._support import population
from tests._support.modules import GenerationLog
from tests._support.population import QUIET
from tests.population.test_population import assert_bitwise_equal

# the functions under test, jitted: one program a call (op by op, each test compiled dozens)
non_dominated_ranks = jax.jit(nsga2.non_dominated_ranks)
crowding_distances = jax.jit(nsga2.crowding_distances)
hypervolume = jax.jit(nsga2.hypervolume, static_argnums=1)
dominance = jax.jit(nsga2.dominance)
sbx_crossover = jax.jit(nsga2.sbx_crossover, static_argnums=(3, 4, 5, 6))
polynomial_mutation = jax.jit(nsga2.polynomial_mutation, static_argnums=(2, 3, 4, 5))
zdt1, zdt2, zdt3 = (jax.jit(f) for f in (mo_tasks.zdt1, mo_tasks.zdt2, mo_tasks.zdt3))


def test_non_dominated_ranks_of_five_points_worked_by_hand():
    # maximised: (3, 3) dominates (2, 2), which dominates (1, 1); (1, 5), (3, 3), (5, 1)
    # trade off, so they are front 0
    points = jnp.array([[1.0, 5.0], [3.0, 3.0], [2.0, 2.0], [5.0, 1.0], [1.0, 1.0]])
    np.testing.assert_array_equal(non_dominated_ranks(points), [0, 0, 1, 0, 2])
    dom = np.asarray(dominance(points))
    assert dom[1, 2] and dom[2, 4] and dom[0, 4] and not dom[0, 1] and not dom[4, 4]


def test_equal_points_share_a_front_and_nan_is_the_worst():
    points = jnp.array([[1.0, 1.0], [1.0, 1.0], [np.nan, 2.0], [0.0, 0.0]])
    # NaN counts as -inf: (-inf, 2) is worst in x but best in y, so no point dominates it
    np.testing.assert_array_equal(non_dominated_ranks(points), [0, 0, 0, 1])


def test_crowding_distance_of_a_four_point_front_with_infinite_ends():
    # one front (x rises, y falls); x spans 6, y spans 10
    points = jnp.array([[0.0, 10.0], [1.0, 6.0], [3.0, 5.0], [6.0, 0.0]])
    ranks = non_dominated_ranks(points)
    np.testing.assert_array_equal(ranks, [0, 0, 0, 0])
    d = np.asarray(crowding_distances(points, ranks))
    assert d[0] == np.inf and d[3] == np.inf
    # (1, 6): x neighbours 0 and 3 -> 3/6; y neighbours 5 and 10 -> 5/10
    assert d[1] == pytest.approx(3 / 6 + 5 / 10)
    # (3, 5): x neighbours 1 and 6 -> 5/6; y neighbours 0 and 6 -> 6/10
    assert d[2] == pytest.approx(5 / 6 + 6 / 10)


def test_crowding_distances_are_per_front():
    # front 0: the four points above; front 1: three points shifted down, their own ranges
    points = jnp.array(
        [[0.0, 10.0], [1.0, 6.0], [3.0, 5.0], [6.0, 0.0], [0.0, 4.0], [1.0, 2.0], [2.0, -4.0]]
    )
    ranks = non_dominated_ranks(points)
    np.testing.assert_array_equal(ranks, [0, 0, 0, 0, 1, 1, 1])
    d = np.asarray(crowding_distances(points, ranks))
    assert d[1] == pytest.approx(1.0) and d[2] == pytest.approx(5 / 6 + 0.6)
    assert d[4] == np.inf and d[6] == np.inf
    assert d[5] == pytest.approx(2 / 2 + 8 / 8)  # x: 0..2 over 2; y: -4..4 over 8


def test_two_dimensional_hypervolume_of_a_three_point_front():
    # staircase from (0, 0): (3, 1) adds 3 * 1, (2, 2) adds 2 * 1, (1, 3) adds 1 * 1
    front = jnp.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    assert float(hypervolume(front, (0.0, 0.0))) == pytest.approx(6.0)
    # a dominated point, a point not beating the reference and NaN add nothing
    more = jnp.concatenate([front, jnp.array([[1.0, 1.0], [-1.0, 9.0], [np.nan, 9.0]])])
    assert float(hypervolume(more, (0.0, 0.0))) == pytest.approx(6.0)
    # from (0.5, 1.5), (3, 1) no longer beats the reference and adds nothing;
    # (2, 2) adds (2 - .5) * (2 - 1.5) = .75, (1, 3) adds (1 - .5) * (3 - 2) = .5
    assert float(hypervolume(front, (0.5, 1.5))) == pytest.approx(1.25)
    assert float(hypervolume(front[:0], (0.0, 0.0))) == 0.0


def test_three_objective_hypervolume_is_a_monte_carlo_estimate():
    # one point (1, 2, 3) from the origin: a box of volume 6; two points overlapping
    assert float(hypervolume(jnp.array([[1.0, 2.0, 3.0]]), (0.0, 0.0, 0.0))) == pytest.approx(6.0)
    two = jnp.array([[1.0, 1.0, 1.0], [2.0, 0.5, 0.5]])  # 1 + 0.5 - 0.25 = 1.25 in a 2x1x1 box
    assert float(hypervolume(two, (0.0, 0.0, 0.0))) == pytest.approx(1.25, abs=0.02)


def test_sbx_and_polynomial_mutation_stay_in_bounds_and_keep_equal_parents():
    key = jax.random.key(0)
    x1 = jax.random.uniform(jax.random.key(1), (64, 5))
    x2 = jax.random.uniform(jax.random.key(2), (64, 5))
    c1, c2 = sbx_crossover(x1, x2, key, 20.0, 0.0, 1.0, 1.0)
    assert c1.shape == (64, 5) and bool(jnp.all((c1 >= 0) & (c1 <= 1) & (c2 >= 0) & (c2 <= 1)))
    # each variable is either copied or crossed around the parents' mean
    copied = (c1 == x1) & (c2 == x2)
    assert 0.3 < float(jnp.mean(copied)) < 0.7
    # far from the bounds both children share one spread: SBX keeps the parents' mean
    f1, f2 = sbx_crossover(x1, x2, key, 20.0, -1e6, 1e6, 1.0)
    np.testing.assert_allclose(f1 + f2, x1 + x2, rtol=1e-5)
    assert float(jnp.mean((f1 == x1) & (f2 == x2))) == float(jnp.mean(copied))
    same1, same2 = sbx_crossover(x1, x1, key, 20.0, 0.0, 1.0, 1.0)
    np.testing.assert_array_equal(same1, x1)
    np.testing.assert_array_equal(same2, x1)
    none1, _ = sbx_crossover(x1, x2, key, 20.0, 0.0, 1.0, 0.0)  # p_c = 0: copies
    np.testing.assert_array_equal(none1, x1)
    m = polynomial_mutation(x1, key, 20.0, 0.2, 0.0, 1.0)
    assert bool(jnp.all((m >= 0) & (m <= 1)))
    assert 0.1 < float(jnp.mean(m != x1)) < 0.3
    np.testing.assert_array_equal(polynomial_mutation(x1, key, 20.0, 0.0, 0.0, 1.0), x1)


def test_zdt_objectives_on_their_pareto_sets_and_off_them():
    x = jnp.zeros(30).at[0].set(0.25)  # on the Pareto set: g = 1
    np.testing.assert_allclose(zdt1(x), [-0.25, -(1 - 0.5)], rtol=1e-6)
    np.testing.assert_allclose(zdt2(x), [-0.25, -(1 - 0.0625)], rtol=1e-6)
    np.testing.assert_allclose(zdt3(x), [-0.25, -(1 - 0.5 - 0.25 * np.sin(2.5 * np.pi))], rtol=1e-6)
    y = jnp.full(30, 0.5).at[0].set(0.0)  # g = 1 + 9 * 0.5 = 5.5, f1 = 0: f2 = g
    np.testing.assert_allclose(zdt1(y), [0.0, -5.5], rtol=1e-6)
    # the true fronts' hypervolumes from (1, 1): 2/3 and 1/3
    ref = (-1.0, -1.0)
    assert float(hypervolume(-jnp.asarray(true_front("zdt1")), ref)) == pytest.approx(
        2 / 3, abs=1e-4
    )
    assert float(hypervolume(-jnp.asarray(true_front("zdt2")), ref)) == pytest.approx(
        1 / 3, abs=1e-4
    )


def test_tasks_by_name_and_bad_arguments():
    task = make_mo_task("zdt2", num_dims=10)
    assert (task.num_dims, task.num_objectives, task.reference_point) == (10, 2, (-1.0, -1.0))
    with pytest.raises(ValueError, match="unknown multi-objective task 'zdt7'; did you mean"):
        make_mo_task("zdt7")
    with pytest.raises(ValueError, match="crossover_prob=1.5: expected a number in \\[0, 1\\]"):
        NSGA2(crossover_prob=1.5)
    with pytest.raises(ValueError, match="mutation_eta=0: expected a number > 0"):
        NSGA2(mutation_eta=0)
    with pytest.raises(ValueError, match="reference_point=\\[1.0\\]: the 'zdt1' task has 2"):
        NSGA2(reference_point=[1.0])
    assert NSGA2(num_dims=20).mutation_prob == pytest.approx(1 / 20)
    with pytest.raises(ValueError, match="population_size=11: expected an even number"):
        PopulationTrainer(11, max_generations=1, **QUIET).fit(NSGA2())


def evolve(devices, generations=8, strategy="pmap", **kw):
    module = NSGA2("zdt1", num_dims=6)
    trainer, seen = population.evolve(module, devices, generations, strategy, **kw)
    return trainer, module, seen


@pytest.mark.default_emitters
def test_one_and_four_devices_end_with_bitwise_equal_populations():
    one, module, seen = evolve(1)
    four, _, seen4 = evolve(4)  # 10 members padded to 12 over 4 devices
    assert_bitwise_equal(four.state, one.state)
    state = one.state
    assert int(state.generation) == 8
    # the survivors are their genotypes' evaluations (to an ulp: another program), ranked
    np.testing.assert_allclose(jax.jit(jax.vmap(mo_tasks.zdt1))(state.genotypes),
                               state.objectives, rtol=1e-6)
    np.testing.assert_array_equal(non_dominated_ranks(state.objectives), state.ranks)
    hv = float(hypervolume(state.objectives, (-1.0, -1.0)))
    assert seen[-1]["moo/hypervolume"] == pytest.approx(hv)
    assert seen[-1]["moo/front_size"] == float(np.sum(np.asarray(state.ranks) == 0))
    assert [m["moo/hypervolume"] for m in seen4] == [m["moo/hypervolume"] for m in seen]
    # two objectives: fitness statistics per objective
    assert {"fitness/0/mean", "fitness/1/max", "fitness/1/min"} <= set(seen[-1])
    assert one.evaluate(module)["eval/hypervolume"] == pytest.approx(hv)


def test_a_stopped_and_resumed_run_equals_an_uninterrupted_one(run_dir):
    kw = dict(default_root_dir=run_dir, enable_checkpointing=True, strategy="shard_map")
    straight, _, _ = evolve(2, **kw)
    first, _, _ = evolve(2, generations=4, **kw)
    resumed, _, _ = evolve(2, ckpt_path=first.log_dir + "/checkpoints", **kw)
    assert resumed.generation == 8
    assert_bitwise_equal(resumed.state, straight.state)


def test_nsga2_approaches_the_zdt1_front_in_a_small_budget():
    trainer = PopulationTrainer(
        40,
        strategy="single",
        devices=1,
        max_generations=60,
        log_every_n_generations=60,
        seed=0,
        **QUIET,
    )
    trainer.fit(NSGA2("zdt1", num_dims=10))
    hv = float(hypervolume(trainer.state.objectives, (-1.0, -1.0)))
    assert 0.6 < hv < 2 / 3  # the true front: 2/3


def test_three_objectives_from_an_own_task():
    """An MOTask of three objectives: fitness [P, 3] reaches tell, each objective is logged,
    the hypervolume is the Monte-Carlo estimate (a fixed key: the same every call)."""
    from jaxtrainer.population import MOTask

    def three(x, key):  # the plane x0 + x1 + x2 = 1 (x2 = 1 - x0 - x1 at best), maximised
        return -jnp.stack([x[0], x[1], 1.0 - x[0] - x[1] + jnp.sum(x[2:])])

    task = MOTask("plane", three, 4, (0.0, 1.0), 3, (-1.0, -1.0, -1.0))
    with pytest.raises(TypeError, match="task keywords \\['num_dims'\\] are given with an MOTask"):
        NSGA2(task, num_dims=3)
    log = GenerationLog()
    seen = log.metrics

    trainer = PopulationTrainer(
        8,
        strategy="single",
        devices=1,
        max_generations=3,
        log_every_n_generations=3,
        callbacks=[log],
        **QUIET,
    )
    trainer.fit(NSGA2(task))
    objectives = trainer.state.objectives
    assert objectives.shape == (8, 3) and bool(jnp.all(jnp.isfinite(objectives)))
    assert {f"fitness/{j}/mean" for j in range(3)} <= set(seen[-1])
    hv = float(hypervolume(objectives, (-1.0, -1.0, -1.0)))
    assert seen[-1]["moo/hypervolume"] == pytest.approx(hv) and 0 < hv < 1


def test_a_front_report_on_a_run_without_fronts_is_refused_before_anything_compiles(tmp_path):
    from jaxtrainer.population import FrontReport, MAPElites

    trainer = PopulationTrainer(8, strategy="single", devices=1, max_generations=1,
                                callbacks=[FrontReport()], default_root_dir=str(tmp_path), **QUIET)
    with pytest.raises(TypeError, match="^FrontReport writes an NSGA2 run's fronts; this run "
                                        "trains MAPElites$"):
        trainer.fit(MAPElites("arm"))
    assert trainer.state is None  # nothing initialised
