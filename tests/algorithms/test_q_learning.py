"""The Q-learning family's TD targets (:mod:`jaxtrainer.algorithms.q_learning`)
on values worked by hand."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxtrainer.algorithms.q_learning import (
    bootstrap,
    categorical_projection,
    greedy_next,
    q_lambda_returns,
    td_targets,
)

ATOMS = jnp.asarray([-1.0, 0.0, 1.0])  # C51's support: 3 atoms, spacing 1


def test_c51_projection_on_a_three_atom_support():
    next_pmf = jnp.asarray([[0.2, 0.3, 0.5]] * 3)
    reward = jnp.asarray([0.5, -0.25, 5.0])
    terminated = jnp.asarray([False, True, False])
    got = categorical_projection(next_pmf, reward, terminated, 0.5, ATOMS)
    # row 0: 0.5 + 0.5 z puts the atoms at 0, 0.5, 1: atom -1's mass lands on 0 whole,
    # atom 0's splits half-half between 0 and 1, atom 1's stays on 1
    # row 1: terminal, every atom moves to -0.25: 1/4 of the mass on -1, 3/4 on 0
    # row 2: 5 + 0.5 z lies above v_max = 1: all the mass on the last atom
    np.testing.assert_allclose(got, [[0.0, 0.2 + 0.15, 0.15 + 0.5],
                                     [0.25, 0.75, 0.0],
                                     [0.0, 0.0, 1.0]], atol=1e-7)
    np.testing.assert_allclose(jnp.sum(got, -1), 1.0, rtol=1e-6)


def test_c51_projection_takes_a_discount_per_sample():
    # n-step returns: each sample has its own bootstrap discount
    got = categorical_projection(jnp.asarray([[0.0, 0.0, 1.0]] * 2), jnp.zeros(2),
                                 jnp.asarray([False, False]), jnp.asarray([1.0, 0.25]), ATOMS)
    np.testing.assert_allclose(got, [[0.0, 0.0, 1.0], [0.0, 0.75, 0.25]], atol=1e-7)


def test_bootstrap_and_double_q_targets():
    np.testing.assert_allclose(bootstrap(jnp.asarray([1.0, 1.0]), jnp.asarray([False, True]),
                                         0.9, jnp.asarray([10.0, 10.0])), [10.0, 1.0])
    online = jnp.asarray([[1.0, 3.0]])       # the online network prefers action 1
    target = jnp.asarray([[10.0, 5.0]])      # the target network prefers action 0
    reward, terminated = jnp.asarray([1.0]), jnp.asarray([False])
    # double DQN: action 1 (online argmax) valued by the target: 1 + 0.9 * 5
    np.testing.assert_allclose(td_targets(online, target, reward, terminated, 0.9), [5.5])
    # DQN: max of the target network: 1 + 0.9 * 10
    np.testing.assert_allclose(td_targets(online, target, reward, terminated, 0.9,
                                          double=False), [10.0])


def test_greedy_next_picks_the_distribution_of_the_argmax_action():
    values = jnp.asarray([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    np.testing.assert_array_equal(greedy_next(jnp.asarray([[0.0, 1.0], [2.0, 1.0]]), values),
                                  [[3.0, 4.0], [5.0, 6.0]])


def test_q_lambda_returns_on_a_two_step_rollout():
    # G_1 = 1 + 0.5 * 4 (the rollout's last step bootstraps from max Q) = 3
    # G_0 = 1 + 0.5 * (0.5 * G_1 + 0.5 * 2) = 2.25; a terminal step: its reward only
    reward = jnp.asarray([[1.0, 1.0], [1.0, 1.0]])
    terminated = jnp.asarray([[False, True], [False, False]])
    done = terminated
    next_q = jnp.asarray([[2.0, 2.0], [4.0, 4.0]])
    got = q_lambda_returns(reward, terminated, done, next_q, jnp.float32(0.5), jnp.float32(0.5))
    np.testing.assert_allclose(got, [[2.25, 1.0], [3.0, 3.0]])
