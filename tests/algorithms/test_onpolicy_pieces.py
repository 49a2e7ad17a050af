"""The on-policy pieces on their own, with values worked by hand: GAE on a 3-step
trajectory with an episode end in the middle, PPO's clipped loss on both sides of
the clip edge, the shapes of the minibatches an epoch cuts."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.algorithms.advantages import compute_gae
from jaxtrainer.algorithms.ppo import ppo_loss
from jaxtrainer.algorithms.rollout import minibatch_epochs, trajectory_minibatch_epochs

# gamma = lambda = 0.5 keep every number exact in float32
REWARDS, VALUES, NEXT_VALUES = [1.0, 2.0, 3.0], [0.5, 1.0, 1.5], [1.0, 4.0, 2.0]


@pytest.mark.parametrize("terminated, advantages, targets", [
    # the episode is cut by the time limit after step 1: step 1 bootstraps from
    # V(final_obs) = 4, the recursion stops there.
    #   delta = [1 + .5*1 - .5, 2 + .5*4 - 1, 3 + .5*2 - 1.5] = [1, 3, 2.5]
    #   A_2 = 2.5, A_1 = 3 (done), A_0 = 1 + .25 * 3 = 1.75
    ([False, False, False], [1.75, 3.0, 2.5], [2.25, 4.0, 4.0]),
    # the episode terminates after step 1: no bootstrap there.
    #   delta_1 = 2 - 1 = 1, A_1 = 1, A_0 = 1 + .25 * 1 = 1.25
    ([False, True, False], [1.25, 1.0, 2.5], [1.75, 2.0, 4.0]),
])
def test_gae_on_three_steps_with_an_episode_end_in_the_middle(terminated, advantages, targets):
    done = jnp.asarray([False, True, False])
    adv, tgt = compute_gae(jnp.asarray(REWARDS), jnp.asarray(VALUES), jnp.asarray(NEXT_VALUES),
                           jnp.asarray(terminated), done, 0.5, 0.5)
    assert adv.dtype == tgt.dtype == jnp.float32 and adv.shape == (3,)
    np.testing.assert_array_equal(adv, advantages)
    np.testing.assert_array_equal(tgt, targets)


def test_gae_unroll_length_cuts_the_recursion_as_an_episode_end():
    # no episode end, segments of 2 steps: A_1 = delta_1 alone, as with done_1 above
    never = jnp.zeros(3, bool)
    adv, _ = compute_gae(jnp.asarray(REWARDS), jnp.asarray(VALUES), jnp.asarray(NEXT_VALUES),
                         never, never, 0.5, 0.5, unroll_length=2)
    np.testing.assert_array_equal(adv, [1.75, 3.0, 2.5])


class FixedPolicy:
    """A distribution whose log-probabilities are given (entropy 0)."""

    def __init__(self, log_prob):
        self.given = log_prob

    def log_prob(self, action):
        del action
        return self.given

    def entropy(self, key=None):
        return jnp.zeros_like(self.given)


def test_ppo_loss_clips_the_ratio_at_the_edge_and_stops_its_gradient_there():
    # clip_eps = 0.2; ratios 1.5 and 0.5 lie outside [0.8, 1.2]:
    #   r=1.5, A=+1: min(1.5, 1.2) = 1.2    clipped, no gradient
    #   r=1.5, A=-1: min(-1.5, -1.2) = -1.5 the pessimistic side: not clipped
    #   r=0.5, A=-1: min(-0.5, -0.8) = -0.8 clipped, no gradient
    #   r=0.5, A=+1: min(0.5, 0.8) = 0.5    not clipped
    # policy loss = -mean(1.2, -1.5, -0.8, 0.5) = 0.15
    # value: V = 1, V_old = 0, R = 2: max((1-2)^2, (0 + 0.2 - 2)^2) = 3.24 -> 0.5 * 3.24
    ratio = np.array([1.5, 1.5, 0.5, 0.5], np.float32)
    old = jnp.full(4, -1.0)
    batch = {"action": jnp.zeros(4, jnp.int32), "log_prob": old,
             "advantage": jnp.asarray([1.0, -1.0, -1.0, 1.0]), "value": jnp.zeros(4),
             "target": jnp.full(4, 2.0)}

    def loss(log_prob, clip_value_loss=True):
        return ppo_loss(FixedPolicy(log_prob), jnp.ones(4), batch, 0.2, 0.5, 0.01,
                        clip_value_loss)

    log_prob = old + jnp.log(ratio)
    total, aux = loss(log_prob)
    assert aux["policy"] == pytest.approx(0.15, abs=1e-6)
    assert aux["value"] == pytest.approx(1.62, rel=1e-6)
    assert aux["entropy"] == 0.0
    assert total == pytest.approx(0.15 + 0.5 * 1.62, rel=1e-6)
    assert aux["approx_kl"] == pytest.approx(
        np.mean([(r - 1) - math.log(r) for r in (1.5, 1.5, 0.5, 0.5)]), rel=1e-5)
    assert loss(log_prob, clip_value_loss=False)[1]["value"] == pytest.approx(0.5)

    # d policy / d log pi_i = -A_i r_i / 4 where not clipped, 0 beyond the edge
    grad = jax.grad(lambda lp: loss(lp)[1]["policy"])(log_prob)
    np.testing.assert_allclose(grad, [0.0, 1.5 / 4, 0.0, -0.5 / 4], rtol=1e-6, atol=1e-7)


def test_minibatch_epochs_cut_each_shuffled_epoch_into_equal_minibatches():
    batch = {"obs": jnp.arange(24.0).reshape(12, 2), "action": jnp.arange(12)}

    def step(count, minibatch):
        assert minibatch["obs"].shape == (3, 2) and minibatch["action"].shape == (3,)
        return count + 1, minibatch["action"]

    count, seen = jax.jit(lambda b: minibatch_epochs(step, 0, b, jax.random.key(0), 2, 4))(batch)
    assert int(count) == 8 and seen.shape == (2, 4, 3)  # [epochs, num_minibatches, size]
    for epoch in np.asarray(seen):  # every sample once an epoch, shuffled
        assert sorted(epoch.ravel()) == list(range(12))
    assert not np.array_equal(np.asarray(seen).reshape(2, 12), [np.arange(12)] * 2)


def test_trajectory_minibatches_keep_whole_trajectories():
    steps, envs = 5, 6
    env_id = jnp.broadcast_to(jnp.arange(envs), (steps, envs))
    batch = {"env": env_id, "t": jnp.broadcast_to(jnp.arange(steps)[:, None], (steps, envs))}

    def step(count, minibatch):
        assert minibatch["env"].shape == (steps, 2)  # [num_steps, envs / num_minibatches]
        return count + 1, minibatch

    count, seen = jax.jit(lambda b: trajectory_minibatch_epochs(
        step, 0, b, jax.random.key(1), 2, 3))(batch)
    assert int(count) == 6 and seen["env"].shape == (2, 3, steps, 2)
    for epoch in np.asarray(seen["env"]):
        assert sorted(epoch[:, 0, :].ravel()) == list(range(envs))  # every env once
        assert (epoch == epoch[:, :1, :]).all()  # an env's whole trajectory, no mixing
    np.testing.assert_array_equal(np.asarray(seen["t"])[0, 0, :, 0], np.arange(steps))


@pytest.mark.parametrize("old,new,name", [
    ("jaxtrainer.algorithms.onpolicy", "jaxtrainer.algorithms.rollout", "minibatch_epochs"),
    ("jaxtrainer.algorithms.onpolicy", "jaxtrainer.algorithms.advantages", "normalize_advantages"),
    ("jaxtrainer.algorithms.networks", "jaxtrainer.algorithms.distributions", "MultiCategorical"),
])
def test_a_moved_name_still_imports_from_its_old_module_with_a_warning(old, new, name):
    import importlib

    with pytest.warns(DeprecationWarning, match=rf"^{old}\.{name} moved to {new}\.{name}; "):
        found = getattr(importlib.import_module(old), name)
    assert found is getattr(importlib.import_module(new), name)
