"""PBT with the competitive swarm optimiser (``exploit="cso"``, EvoRL's PBT-CSO):
losers copy their pair's winner and move their hyperparameters toward the
winner's by a velocity kept in the state; the same population on 1 and 4
devices; the population learns."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.population import PBT, Hyperparam
from tests._support import toys
from tests.population.test_pbt import Regression, _data, fit, pbt


def cso(**kw):
    return pbt(exploit="cso", **kw)


def test_the_swarm_step_moves_toward_the_winner_in_log_or_linear_space():
    module = PBT(Regression(), {"lr": Hyperparam(1e-3, 0.3), "noise": Hyperparam(0.0, 1.0, log=False)},
                 population_size=4, exploit="cso")
    keys = jax.random.split(jax.random.key(0), 512)
    own = {"lr": jnp.float32(1e-2), "noise": jnp.float32(0.2)}
    winner = {"lr": jnp.float32(1e-1), "noise": jnp.float32(0.6)}
    still = {"lr": jnp.float32(0.0), "noise": jnp.float32(0.0)}
    step = jax.jit(jax.vmap(module.swarm_step, in_axes=(None, None, None, 0)))
    x, v = jax.device_get(step(own, winner, still, keys))
    # from rest: v' = r2 (x_w - x_l), r2 ~ U[0, 1): log space for lr, linear for noise
    r_lr = v["lr"] / np.log(10.0)
    r_noise = v["noise"] / np.float32(0.4)
    for r in (r_lr, r_noise):
        assert r.min() >= 0 and r.max() < 1 and 0.4 < r.mean() < 0.6
    np.testing.assert_allclose(x["lr"], 1e-2 * np.exp(v["lr"]), rtol=1e-5)
    np.testing.assert_allclose(x["noise"], 0.2 + v["noise"], rtol=1e-6)
    assert not np.allclose(r_lr, r_noise)            # each hyperparameter draws its own r
    # a winner at the same place: v' = r1 v shrinks the velocity; moves are clipped
    fast = {"lr": jnp.float32(10.0), "noise": jnp.float32(-5.0)}
    x, v = jax.device_get(step(own, own, fast, keys))
    assert (v["lr"] <= 10.0).all() and (v["lr"] >= 0).all()
    assert (x["lr"] <= 0.3).all() and np.isclose(x["lr"], 0.3).any()
    assert (x["noise"] >= 0.0).all() and np.isclose(x["noise"], 0.0).any()


def test_an_odd_population_is_refused():
    with pytest.raises(ValueError, match=r"exploit='cso' meets members in pairs: "
                                         r"population_size=5 is odd"):
        cso(size=5)


@pytest.mark.slow
def test_losers_copy_their_winner_and_take_a_step_toward_its_hyperparameters(run_dir):
    """4 members on 4 devices, one CSO round at step 4 against the same run
    without one (identical keys): two pairs, every copy across devices."""
    ready = 4
    _, before = fit(cso(ready=10**6), run_dir / "a", ready)
    trainer, after = fit(cso(ready=ready), run_dir / "b", ready)
    fitness = before.window_total / before.window_count
    losers = np.flatnonzero(after.parent != np.arange(4))
    winners = after.parent[losers]
    assert len(losers) == 2 and after.exploits == 2
    assert sorted([*losers, *winners]) == [0, 1, 2, 3]         # two disjoint pairs
    assert (fitness[winners] >= fitness[losers]).all()
    b_leaves = jax.tree_util.tree_leaves_with_path(before.members)
    for (path, b), a in zip(b_leaves, jax.tree.leaves(after.members), strict=True):
        name = jax.tree_util.keystr(path)
        if name != "['hyperparams']['lr']":   # weights, optimizer state, keys: the winner's
            np.testing.assert_array_equal(_data(a)[losers], _data(b)[winners], err_msg=name)
            np.testing.assert_array_equal(_data(a)[winners], _data(b)[winners], err_msg=name)
    lr_b = np.log(before.members["hyperparams"]["lr"])
    lr_a = np.log(after.members["hyperparams"]["lr"])
    np.testing.assert_array_equal(lr_a[winners], lr_b[winners])
    # from rest, each loser moved r2 of the way to its winner, in log space
    r2 = (lr_a[losers] - lr_b[losers]) / (lr_b[winners] - lr_b[losers])
    assert ((r2 >= 0) & (r2 < 1)).all(), r2
    velocity = after.velocity["lr"]
    np.testing.assert_allclose(velocity[losers], lr_a[losers] - lr_b[losers], rtol=1e-5)
    np.testing.assert_array_equal(velocity[winners], 0.0)
    np.testing.assert_array_equal(after.fitness[losers], fitness[winners])
    assert trainer.global_step == ready


@pytest.mark.default_emitters
@pytest.mark.slow
def test_the_same_population_on_1_and_4_devices_and_it_learns(run_dir):
    trainers, states = zip(*(fit(cso(size=4, ready=2), run_dir / str(n), 12, devices=n)
                             for n in (1, 4)), strict=True)
    leaves = [jax.tree.leaves(s) for s in states]
    assert len(leaves[0]) == len(leaves[1])
    for a, b in zip(*leaves, strict=True):
        np.testing.assert_array_equal(_data(a), _data(b))
    state = states[1]
    assert state.exploits == 12 and np.abs(state.velocity["lr"]).max() > 0   # 6 rounds x 2
    # the regression's squared weight error falls from its random start
    start = fit(cso(size=4, ready=2), run_dir / "start", 1, devices=4)[1]
    error = ((state.members["params"]["w"] - np.asarray([1.0, -2.0, 0.5])) ** 2).sum(axis=1)
    first = ((start.members["params"]["w"] - np.asarray([1.0, -2.0, 0.5])) ** 2).sum(axis=1)
    assert error.min() < 0.5 * first.min(), (error, first)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_plus_two_steps_equal_four_with_the_velocities(tmp_path):
    straight = toys.two_plus_two_on_four_devices(tmp_path, lambda: cso(ready=1))
    state = straight.state
    assert int(state.exploits) == 8 and np.abs(np.asarray(state.velocity["lr"])).max() > 0
