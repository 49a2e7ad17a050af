"""Reductions over a device axis of one device leave no collective in the program.

XLA keeps an all-reduce of one participant and runs it through the collective
runtime: on one device, every gradient average and metric reduction of a training
step cost a collective for nothing (the Trainer's single-device program ran 4-7%
slower than the same module hand-fused), and PPO took its several-device path
for the advantage moments (an extra shuffle and gather per epoch). The check
that replicated state stays replicated still sees the reductions."""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxtrainer as jt
from jaxtrainer import distributed as jd
from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.strategies import resolve
from tests._support.modules import Regression
from tests._support.shipped import PPO_TINY

QUIET = dict(enable_progress_bar=False, enable_checkpointing=False, logger=False)


def _on_mesh(fn, devices: int):
    mesh = jax.make_mesh((devices,), (jd.AXIS_NAME,), devices=jax.devices()[:devices])
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False))


def _all_reduces(hlo: str) -> list[str]:
    return [line.strip() for line in hlo.splitlines() if " all-reduce(" in line]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("op", ["pmean", "psum", "pmax", "pmin"])
def test_a_reduction_over_one_device_is_the_identity_and_no_all_reduce(op):
    tree = {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) / 7.0, "b": jnp.float32(0.3)}
    reduce = getattr(jd, op)
    one = _on_mesh(reduce, 1)
    got = one(tree)
    for key in ("w", "b"):
        np.testing.assert_array_equal(got[key], tree[key])
        assert got[key].dtype == tree[key].dtype
    assert _all_reduces(one.lower(tree).compile().as_text()) == []
    two = _on_mesh(reduce, 2)
    assert _all_reduces(two.lower(tree).compile().as_text())  # two devices do reduce


@pytest.mark.timeout(60)
def test_a_mean_of_integers_over_one_device_is_jaxs_float_mean():
    """``jax.lax.pmean`` of an integer gives a float: kept, so one device and
    several give the same dtype."""
    x = jnp.arange(3, dtype=jnp.int32)
    got = _on_mesh(jd.pmean, 1)(x)
    want = _on_mesh(lambda v: jax.lax.pmean(v, jd.AXIS_NAME), 1)(x)
    assert got.dtype == want.dtype == jnp.float32
    np.testing.assert_array_equal(got, want)
    assert _all_reduces(_on_mesh(jd.psum, 1).lower(x).compile().as_text()) == []


@pytest.mark.timeout(120)
def test_the_one_device_ppo_program_has_no_all_reduce_and_two_devices_do():
    module = PPO(PPOConfig(**PPO_TINY, total_updates=4))
    counts = {}
    for name, devices in (("single", 1), ("pmap", 2)):
        strategy = resolve(name, devices=devices)
        state = strategy.init_state(module, jax.random.key(0))
        program = strategy.compile_train(module, state, jax.random.key(1))
        counts[name] = len(_all_reduces(program.program.as_text()))
    assert counts["single"] == 0
    assert counts["pmap"] >= 2  # the gradient average and the metrics, at least


@pytest.mark.timeout(120)
def test_ppo_on_a_mesh_of_one_device_steps_as_without_a_device_axis():
    """The advantage moments on one device are the single-device two-pass ones,
    whether or not a device axis of size 1 is bound: the same bits."""
    module = PPO(PPOConfig(**{**PPO_TINY, "num_minibatches": 2, "update_epochs": 2,
                                  "total_updates": 4}))
    state = jax.jit(module.init_state)(jax.random.key(0))
    key = jax.random.key(1)
    plain = jax.jit(module.training_step)(state, key)
    on_mesh = _on_mesh(module.training_step, 1)(state, key)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(on_mesh), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the same computation: no extra shuffle (sorts, gathers, random bits) on the mesh
    kinds = ("sort", "gather", "random_bits")
    assert (_primitives(jax.make_jaxpr(module.training_step)(state, key).jaxpr, kinds)
            == _primitives(jax.make_jaxpr(_on_mesh(module.training_step, 1))(state, key).jaxpr,
                           kinds))


def _primitives(jaxpr, kinds) -> dict[str, int]:
    counts = dict.fromkeys(kinds, 0)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in counts:
            counts[eqn.primitive.name] += 1
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            for k, n in _primitives(sub, kinds).items():
                counts[k] += n
    return counts


@pytest.mark.timeout(120)
def test_a_missing_average_is_still_caught_on_one_device(tmp_path):
    """The code is wrong whatever the device count: the single-device run says so
    (its reductions leave no collective but are still seen), and the averaging
    module trains there."""
    for jit in (True, False):  # eager too: there the reductions stay collectives
        with pytest.raises(ValueError, match=r"\['x_mean'\].*differ between devices"):
            jt.Trainer(strategy="single", max_steps=2, default_root_dir=tmp_path, jit=jit,
                       **QUIET).fit(Regression(average_stats=False))
    trainer = jt.Trainer(strategy="single", max_steps=30, default_root_dir=tmp_path, **QUIET)
    trainer.fit(Regression())
    w = np.asarray(trainer.state["params"]["w"])
    assert np.abs(w - np.array([1.0, -2.0, 0.5])).max() < 0.5, w
