"""The replay buffer: uniform sampling over written slots only, the whole buffer
once full, per-device shares under shard_map with global sizes split."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxtrainer.algorithms.replay import ReplayBuffer, Transition
from jaxtrainer.distributed import AXIS_NAME, axis_index, fold_in_device


def transitions(ids: jax.Array) -> Transition:
    """One transition per env whose obs/reward carry a unique id (unwritten slots hold 0)."""
    ids = jnp.asarray(ids, jnp.float32)
    return Transition(obs=ids[:, None], action=jnp.zeros(ids.shape, jnp.int32), reward=ids,
                      next_obs=ids[:, None] + 0.5, terminated=jnp.zeros(ids.shape, bool))


def example() -> Transition:
    return jax.tree.map(lambda x: x[0], transitions(jnp.zeros((1,))))


def sampled_ids(buffer, state, draws: int) -> np.ndarray:
    keys = jax.random.split(jax.random.key(0), draws)
    batch = jax.jit(jax.vmap(buffer.sample, in_axes=(None, 0)))(state, keys)
    np.testing.assert_array_equal(batch.next_obs, batch.obs + 0.5)  # rows stay whole
    return np.asarray(batch.reward).ravel()


@pytest.mark.slow
def test_sampling_never_returns_unwritten_slots_and_covers_what_was_written():
    buffer = ReplayBuffer(capacity=12, batch_size=16, num_envs=3)   # 3 rows of 4 slots
    state = buffer.init(example())
    add = jax.jit(buffer.add)
    for t in range(2):                                              # 6 of 12 slots written
        state = add(state, transitions(jnp.arange(3) + 3 * t + 1))
    assert int(buffer.size(state)) == 2
    ids = sampled_ids(buffer, state, 500)
    assert set(ids.tolist()) == {1, 2, 3, 4, 5, 6}                  # never 0 (unwritten)
    counts = np.bincount(ids.astype(int), minlength=7)[1:]
    np.testing.assert_allclose(counts / counts.sum(), 1 / 6, atol=0.02)  # uniform


def test_full_buffer_covers_every_slot_and_forgets_the_oldest():
    buffer = ReplayBuffer(capacity=12, batch_size=16, num_envs=3)
    state = buffer.init(example())
    add = jax.jit(buffer.add)
    for t in range(7):                                              # 21 adds into 12 slots
        state = add(state, transitions(jnp.arange(3) + 3 * t + 1))
    assert int(buffer.size(state)) == 4 and bool(state.is_full)
    ids = sampled_ids(buffer, state, 1000)
    assert set(ids.tolist()) == set(range(10, 22))                  # the last 4 steps, all 12
    counts = np.bincount(ids.astype(int), minlength=22)[10:]
    np.testing.assert_allclose(counts / counts.sum(), 1 / 12, atol=0.015)


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="capacity=10 must be a positive multiple of num_envs=4"):
        ReplayBuffer(capacity=10, batch_size=8, num_envs=4)
    with pytest.raises(ValueError, match=r"DQN: batch_size=6 is not divisible by the 4 devices"):
        ReplayBuffer(capacity=8, batch_size=6, num_envs=4).validate(4, "DQN")
    with pytest.raises(ValueError, match=r"num_envs=2 is not divisible by the 4 devices"):
        ReplayBuffer(capacity=8, batch_size=8, num_envs=2).validate(4)


def test_each_device_keeps_and_samples_its_own_envs_under_shard_map():
    # Global sizes: 8 envs, capacity 32 (4 slots per env), batch 16 -> 2 envs, 4 samples
    # per device. Transitions are stored sharded on the env axis, the write index replicated.
    buffer = ReplayBuffer(capacity=32, batch_size=16, num_envs=8)
    mesh = jax.make_mesh((4,), (AXIS_NAME,), axis_types=(jax.sharding.AxisType.Explicit,))

    def run(key):
        state = buffer.init(example(), like=fold_in_device(key))
        first_env = axis_index() * 2
        for t in range(3):                                           # 3 of 4 slots per env
            state = buffer.add(state, transitions(100 * t + first_env + jnp.arange(2) + 1))
        keys = jax.random.split(fold_in_device(key), 200)
        ids = jax.vmap(buffer.sample, in_axes=(None, 0))(state, keys).reward
        return state, ids[None]

    state_specs = buffer.init(example()).replace(
        experience=jax.tree.map(lambda _: P(AXIS_NAME), example()),
        current_index=P(), is_full=P())
    fn = jax.jit(jax.shard_map(run, mesh=mesh, in_specs=P(), out_specs=(state_specs, P(AXIS_NAME)),
                               check_vma=True))
    state, ids = fn(jax.random.key(0))
    assert state.experience.obs.shape == (8, 4, 1)                  # [num_envs, slots, ...]
    assert int(state.current_index) == 3
    ids = np.asarray(ids)
    assert ids.shape == (4, 200, 4)                                  # 4 samples per device
    for d in range(4):
        envs = {2 * d + 1, 2 * d + 2}
        want = {100 * t + e for t in range(3) for e in envs}
        assert set(ids[d].ravel().astype(int).tolist()) == want     # own envs, written slots


def test_a_replicated_buffer_keeps_everything_on_every_device_and_adds_steps():
    # 3 rows of 4 slots on each of 4 devices: sizes are not split, each device samples the
    # whole batch, and every device holds (and draws) the same
    buffer = ReplayBuffer(capacity=12, batch_size=5, num_envs=3, replicated=True)
    mesh = jax.make_mesh((4,), (AXIS_NAME,), axis_types=(jax.sharding.AxisType.Explicit,))
    steps = jax.tree.map(lambda a, b: jnp.stack([a, b], 1),            # [3 envs, 2 steps]
                         transitions(jnp.arange(3) + 1), transitions(jnp.arange(3) + 11))

    def run(key):
        state = buffer.add_steps(buffer.init(example()), steps)
        return state, buffer.sample(state, key).reward[None]

    fn = jax.jit(jax.shard_map(run, mesh=mesh, in_specs=P(), out_specs=(P(), P(AXIS_NAME)),
                               check_vma=False))
    state, ids = fn(jax.random.key(0))
    assert state.experience.obs.shape == (3, 4, 1) and int(state.current_index) == 2
    ids = np.asarray(ids)
    assert ids.shape == (4, 5) and np.all(ids == ids[0])
    assert set(ids.ravel().astype(int).tolist()) <= {1, 2, 3, 11, 12, 13}
    # add_steps is the steps' add calls in time order
    one_by_one = buffer.init(example())
    for t in range(2):
        one_by_one = buffer.add(one_by_one, jax.tree.map(lambda x, t=t: x[:, t], steps))
    np.testing.assert_array_equal(buffer.add_steps(buffer.init(example()), steps).experience.reward,
                                  one_by_one.experience.reward)
