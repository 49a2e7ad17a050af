"""Behaviour policies and schedules (:mod:`jaxtrainer.algorithms.exploration`)
on values worked by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer.algorithms.exploration import epsilon_greedy, linear_schedule, uniform_warmup


def test_linear_schedule_values():
    assert float(linear_schedule(1.0, 0.0, 10, 5)) == 0.5
    assert float(linear_schedule(1.0, 0.2, 10, 25)) == np.float32(0.2)   # held after the end
    assert float(linear_schedule(1.0, 0.2, 0, 0)) == np.float32(0.2)     # no duration: the end


def test_epsilon_greedy_at_its_two_ends():
    q = jnp.asarray([[0.0, 5.0, 1.0]] * 64)
    greedy = epsilon_greedy(jax.random.key(0), q, 0.0)
    np.testing.assert_array_equal(greedy, np.ones(64, np.int32))
    random = epsilon_greedy(jax.random.key(0), q, 1.0)
    assert set(np.asarray(random).tolist()) == {0, 1, 2}


def test_uniform_warmup_switches_on_the_flag():
    action = jnp.full((8, 2), 0.25)
    low, high = jnp.asarray([-1.0, 10.0]), jnp.asarray([1.0, 20.0])
    np.testing.assert_array_equal(
        uniform_warmup(action, jax.random.key(1), low, high, jnp.asarray(False)), action)
    random = np.asarray(uniform_warmup(action, jax.random.key(1), low, high, jnp.asarray(True)))
    assert (random >= np.asarray(low)).all() and (random < np.asarray(high)).all()
