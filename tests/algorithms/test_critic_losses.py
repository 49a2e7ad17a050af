"""The actor-critic losses (:mod:`jaxtrainer.algorithms.critic_losses`) on
values worked by hand, with TD3's target at its clipped smoothing noise."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.algorithms.critic_losses import (
    clipped_double_q_loss,
    clipped_double_q_target,
    critic_regression,
    deterministic_actor_loss,
    soft_actor_loss,
    temperature_loss,
)
from jaxtrainer.algorithms.exploration import smoothed_target_action
from jaxtrainer.algorithms.replay import Transition


class LinearCritics:
    """Two critics ``Q_i(s, a) = w_i * a`` (1-d actions): ``float32[2, B]``."""

    def apply(self, w, obs, action):
        del obs
        return w[:, None] * action[None, :, 0]


def test_clipped_double_q_target_takes_the_smaller_critic():
    q_next = jnp.asarray([[3.0, 1.0], [2.0, 5.0]])      # [critics, batch]
    reward, terminated = jnp.asarray([1.0, 1.0]), jnp.asarray([False, True])
    np.testing.assert_allclose(clipped_double_q_target(q_next, reward, terminated, 0.9),
                               [1.0 + 0.9 * 2.0, 1.0])
    # SAC's entropy term comes off the next value before discounting
    np.testing.assert_allclose(
        clipped_double_q_target(q_next, reward, terminated, 0.9, jnp.asarray([0.5, 0.5])),
        [1.0 + 0.9 * 1.5, 1.0], rtol=1e-6)


def test_critic_regression_sums_the_critics_mean_squared_errors():
    q = jnp.asarray([[1.0, 2.0], [3.0, 4.0]])
    # (0 + 1) / 2 + (4 + 9) / 2
    assert float(critic_regression(q, jnp.asarray([1.0, 1.0]))) == 7.0


def test_td3_target_with_the_smoothing_noise_at_its_clip_edge():
    # one action dimension with scale 2 and box [-2, 2]; policy_noise 0.2, noise_clip 0.5
    scale, low, high = jnp.asarray([2.0]), jnp.asarray([-2.0]), jnp.asarray([2.0])
    action = jnp.asarray([[0.9], [0.9], [1.8], [0.9]])
    normal = jnp.asarray([[3.0], [2.5], [3.0], [-0.25]])
    smoothed = smoothed_target_action(action, normal, 0.2, 0.5, scale, low, high)
    # 3 * 0.2 = 0.6 is clipped to 0.5, times the scale: +1.0; 2.5 * 0.2 sits on the edge:
    # the same +1.0; 1.8 + 1.0 leaves the box: 2.0; -0.25 * 0.2 = -0.05 passes: -0.1
    np.testing.assert_allclose(smoothed, [[1.9], [1.9], [2.0], [0.8]], rtol=1e-6)

    # the target of twin critics Q_1 = a, Q_2 = 3 a at the smoothed actions:
    # y = r + gamma * min(a', 3 a') = 1 + 0.5 * a' (all a' > 0 here)
    batch = Transition(obs=jnp.zeros((4, 1)), action=jnp.asarray([[1.0], [2.0], [0.0], [1.0]]),
                       reward=jnp.ones(4), next_obs=jnp.zeros((4, 1)),
                       terminated=jnp.asarray([False, False, False, True]))
    w = jnp.asarray([1.0, 3.0])
    loss, q = clipped_double_q_loss(LinearCritics(), w, w, batch, smoothed, 0.5)
    y = np.asarray([1.0 + 0.5 * 1.9, 1.0 + 0.5 * 1.9, 1.0 + 0.5 * 2.0, 1.0])
    q_hand = np.asarray([[1.0, 2.0, 0.0, 1.0], [3.0, 6.0, 0.0, 3.0]])
    np.testing.assert_allclose(q, q_hand)
    assert float(loss) == pytest.approx(np.sum(np.mean((q_hand - y) ** 2, axis=1)), rel=1e-6)
    # the target is a constant: the gradient is that of the squared errors in Q only
    grad = jax.grad(lambda w: clipped_double_q_loss(LinearCritics(), w, w, batch, smoothed,
                                                    0.5)[0])(w)
    a = np.asarray([1.0, 2.0, 0.0, 1.0])
    np.testing.assert_allclose(grad, [np.mean(2 * (q_hand[i] - y) * a) for i in range(2)],
                               rtol=1e-5)


def test_actor_and_temperature_losses():
    q = jnp.asarray([[1.0, 3.0], [2.0, 0.0]])
    assert float(deterministic_actor_loss(q)) == -2.0           # -mean Q_1
    # mean(alpha log pi - min_i Q_i) = mean(0.5 * [-1, -2] - [1, 0]) = (-1.5 - 1) / 2
    assert float(soft_actor_loss(q, jnp.asarray([-1.0, -2.0]), 0.5)) == -1.25
    # -exp(log 2) * (E[log pi] + target entropy) = -2 * (-1.5 + 1)
    assert float(temperature_loss(jnp.log(2.0), jnp.float32(-1.5), 1.0)) == pytest.approx(1.0)
