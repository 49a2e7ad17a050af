"""Running observation statistics: equal to numpy's over everything seen, on 1 and
4 devices, with bitwise-equal replicas; PPO keeps them in its state and resumes
them exactly."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import jaxtrainer as jt
from jaxtrainer.algorithms import PPO, PPOConfig, normalization
from jaxtrainer.distributed._axis import to_varying
from tests._support import shipped, toys

OBS_DIM = 3


def _batches():
    rng = np.random.default_rng(0)
    return [rng.normal(loc=10.0 * (k + 1), scale=k + 1.0, size=(8, OBS_DIM)).astype(np.float32)
            for k in range(3)]


def _check_against_numpy(stats, seen):
    seen = np.concatenate(seen).astype(np.float64)
    assert float(stats.count) == len(seen)
    np.testing.assert_allclose(np.asarray(stats.mean), seen.mean(0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(stats.var), seen.var(0), rtol=1e-5)


def test_statistics_equal_numpy_on_one_device():
    stats = normalization.init((OBS_DIM,))
    batches = _batches()
    update = jax.jit(normalization.update)
    for batch in batches:
        stats = update(stats, jnp.asarray(batch))
    _check_against_numpy(stats, batches)
    x = jnp.asarray(batches[0])
    want = np.clip((batches[0] - np.asarray(stats.mean)) / np.sqrt(np.asarray(stats.var) + 1e-8),
                   -10, 10)
    np.testing.assert_allclose(np.asarray(normalization.normalize(stats, x)), want, rtol=1e-6)


def test_statistics_over_4_devices_equal_numpy_and_replicas_are_bitwise_equal():
    mesh = Mesh(np.array(jax.devices()[:4]), ("devices",))

    def run(batches):  # batches: [3, 2 rows of this device, OBS_DIM]
        stats = normalization.init((OBS_DIM,))
        for k in range(batches.shape[0]):
            stats = normalization.update(stats, batches[k], axis_name="devices")
        # one row per device, to look at every replica
        return to_varying(jax.tree.map(lambda x: x[None], stats), "devices")

    batches = _batches()
    f = jax.jit(jax.shard_map(run, mesh=mesh, in_specs=P(None, "devices"),
                              out_specs=P("devices")))
    out = f(jnp.asarray(np.stack(batches)))
    replicas = [jax.tree.map(lambda x, i=i: np.asarray(x[i]), out) for i in range(4)]
    for replica in replicas[1:]:
        toys.assert_trees_equal(replica, replicas[0])
    _check_against_numpy(normalization.RunningStatistics(*(jnp.asarray(v) for v in (
        replicas[0].count, replicas[0].mean, replicas[0].m2))), batches)


def _ppo():
    return PPO(PPOConfig(env="CartPole-v1", normalize_observations=True, reward_scaling=0.5,
                         **shipped.PPO_TINY))


def _trainer(root, max_steps, save=False):
    callbacks = [jt.ModelCheckpoint(every_n_steps=1, save_last=False, async_save=False)] \
        if save else []
    return jt.Trainer(strategy="pmap", devices=4, max_steps=max_steps, log_every_n_steps=1,
                      default_root_dir=root, callbacks=callbacks, logger=False,
                      enable_checkpointing=save, enable_progress_bar=False,
                      compile_evaluation_ahead=False)


@pytest.mark.slow
def test_ppo_keeps_statistics_in_state_and_resumes_them_exactly(tmp_path):
    straight = _trainer(tmp_path, 2, save=True)
    straight.fit(_ppo())
    stats = straight.state.obs_stats
    cfg = shipped.PPO_TINY
    assert float(stats.count) == 2 * cfg["num_envs"] * cfg["num_steps"]
    for leaf in jax.tree.leaves(stats):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4
        for shard in shards[1:]:
            np.testing.assert_array_equal(shard, shards[0])
    assert np.all(np.asarray(stats.var) > 0)
    want = toys.leaves(straight.state)

    resumed = _trainer(tmp_path, 2)
    resumed.fit(_ppo(), ckpt_path=os.path.join(straight.log_dir, "checkpoints", "1"))
    assert resumed.global_step == 2
    toys.assert_trees_equal(resumed.state, want)

    metrics = resumed.evaluate(_ppo())  # evaluation normalises with the restored statistics
    assert np.isfinite(metrics["eval/episode_return"])
