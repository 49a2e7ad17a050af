"""CrossQ (Bhatt et al. 2024) and its batch renormalisation: the layer against
flax's BatchNorm before its warm-up and against the renormalisation formula
after it, its statistics global over 4 devices, exact resume on 4 devices with
the replicas equal, and a discrete env refused in one line. Learning Pendulum
at RL Zoo's budget is a benchmark (``benchmarks/published.py --rows
crossq-pendulum``), too slow for a test."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec

from jaxtrainer.algorithms import CrossQ, CrossQConfig
from jaxtrainer.algorithms.batch_renorm import D_MAX, R_MAX, BatchRenorm
from jaxtrainer.distributed import AXIS_NAME
from tests._support import toys

X = np.random.default_rng(0).normal(2.0, 3.0, (16, 5)).astype(np.float32)


def _train(layer: nn.Module, variables: dict, x) -> tuple[jax.Array, dict]:
    return layer.apply(variables, x, True, mutable=["batch_stats"]) \
        if isinstance(layer, BatchRenorm) else \
        layer.apply(variables, x, use_running_average=False, mutable=["batch_stats"])


def test_before_its_warm_up_the_layer_is_flax_batch_norm():
    ours = BatchRenorm(momentum=0.9, warmup_steps=3)
    flax_bn = nn.BatchNorm(momentum=0.9, epsilon=0.001)
    v_ours = ours.init(jax.random.key(0), X[:2])
    v_flax = flax_bn.init(jax.random.key(0), X[:2], use_running_average=False)
    for _ in range(3):  # calls 0, 1, 2: steps < warmup_steps
        y_ours, new_ours = _train(ours, v_ours, X)
        y_flax, new_flax = _train(flax_bn, v_flax, X)
        np.testing.assert_allclose(y_ours, y_flax, atol=1e-5)
        v_ours = {**v_ours, **new_ours}
        v_flax = {**v_flax, **new_flax}
        np.testing.assert_allclose(v_ours["batch_stats"]["mean"],
                                   v_flax["batch_stats"]["mean"], rtol=1e-6)
        np.testing.assert_allclose(v_ours["batch_stats"]["var"],
                                   v_flax["batch_stats"]["var"], rtol=1e-5)
    assert float(v_ours["batch_stats"]["steps"]) == 3.0
    # inference: the running statistics, as flax's use_running_average
    np.testing.assert_allclose(ours.apply(v_ours, X), flax_bn.apply(
        v_flax, X, use_running_average=True), atol=1e-5)


def test_after_its_warm_up_the_batch_statistics_are_corrected_toward_the_running_ones():
    layer = BatchRenorm(warmup_steps=0)
    running_mean = np.array([0.0, 1.0, 2.0, 30.0, -1.0], np.float32)
    running_var = np.array([1.0, 4.0, 9.0, 0.01, 400.0], np.float32)
    variables = {"params": {"scale": np.full(5, 2.0, np.float32),
                            "bias": np.full(5, 0.5, np.float32)},
                 "batch_stats": {"mean": running_mean, "var": running_var,
                                 "steps": np.float32(0.0)}}
    y, _ = _train(layer, variables, X)
    eps = 0.001
    mean, var = X.mean(0), X.var(0)
    std, running_std = np.sqrt(var + eps), np.sqrt(running_var + eps)
    r = np.clip(std / running_std, 1 / R_MAX, R_MAX)
    d = np.clip((mean - running_mean) / running_std, -D_MAX, D_MAX)
    assert (r == R_MAX).any() and (r == 1 / R_MAX).any() and (np.abs(d) == D_MAX).any()
    want = (X - (mean - d * np.sqrt(var) / r)) / np.sqrt(var / r ** 2 + eps) * 2.0 + 0.5
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.timeout(120)
def test_on_four_devices_each_shard_is_normalised_by_the_global_batch():
    layer = BatchRenorm(warmup_steps=0)
    variables = layer.init(jax.random.key(0), X[:2])
    whole, whole_stats = _train(layer, variables, X)
    mesh = Mesh(np.array(jax.devices()[:4]), (AXIS_NAME,))
    rows, same = PartitionSpec(AXIS_NAME), PartitionSpec()
    sharded = jax.jit(jax.shard_map(lambda x: _train(layer, variables, x), mesh=mesh,
                                    in_specs=rows, out_specs=(rows, same), check_vma=False))
    parts, part_stats = sharded(X)
    np.testing.assert_allclose(parts, whole, atol=1e-5)
    for a, b in zip(jax.tree.leaves(part_stats), jax.tree.leaves(whole_stats), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_a_discrete_env_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"CartPole-v1"):
        CrossQ(env="CartPole-v1")


TINY = dict(num_envs=4, buffer_size=64, batch_size=8, learning_starts=8, gradient_steps=2,
            hidden_sizes=(8,), critic_hidden_sizes=(8,), policy_delay=3,
            renorm_warmup_steps=4, eval_episodes=4)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_plus_two_steps_equal_four_on_four_devices_with_the_replicas_equal(tmp_path):
    """Steps 2-4 learn, 2 critic updates each: the actor's delay (every 3rd
    update) falls across the checkpoint, and the renormalisation starts after 4
    calls."""
    straight = toys.two_plus_two_on_four_devices(tmp_path, lambda: CrossQ(CrossQConfig(**TINY)))
    assert int(straight.state.updates) == 6  # steps 2-4 learn (learning_starts = 8 env steps)
    state = straight.state
    toys.replicas_equal((state.actor_params, state.critic_params, state.actor_stats,
                         state.critic_stats))

    def counts(stats):
        return {float(np.asarray(leaf)) for path, leaf in
                jax.tree_util.tree_flatten_with_path(stats)[0] if path[-1].key == "steps"}
    assert counts(state.critic_stats) == {6.0}  # one training pass per critic update
    assert counts(state.actor_stats) == {2.0}  # updates 3 and 6
    assert float(jnp.exp(state.log_alpha)) != 1.0  # the delayed temperature update ran
