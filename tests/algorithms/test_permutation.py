"""The minibatch shuffle's permutation equals jax.random.permutation bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxtrainer.algorithms.permutation import (
    _MAX_SIZE,
    _packed_take,
    _stable_argsort_u32,
    permutation,
    take_rows,
)


# 1625 is the last size jax.random.permutation shuffles in one sorting round, 1626 the
# first of two; 2 and 2**16 are the ends of the packed-sort path, beyond it jax's own
@pytest.mark.parametrize("n", [1, 2, 3, 7, 128, 512, 1000, 1625, 1626, 4096, _MAX_SIZE,
                               _MAX_SIZE + 1])
def test_equals_jax_random_permutation(n):
    fast = jax.jit(permutation, static_argnums=1)
    for seed in range(3):
        key = jax.random.key(1000 * n + seed)
        got, want = fast(key, n), jax.random.permutation(key, n)
        assert got.dtype == want.dtype and got.shape == (n,)
        np.testing.assert_array_equal(got, want)
    raw = jax.random.PRNGKey(n)  # raw uint32 keys as well
    np.testing.assert_array_equal(fast(raw, n), jax.random.permutation(raw, n))


def test_stable_argsort_breaks_ties_by_index():
    keys = jnp.array([5, 3, 5, 0, 3, 0xFFFFFFFF, 0, 5], jnp.uint32)
    np.testing.assert_array_equal(_stable_argsort_u32(keys), np.argsort(np.asarray(keys),
                                                                       kind="stable"))
    rng = np.random.default_rng(0)
    many = rng.integers(0, 50, size=3000).astype(np.uint32)  # ties everywhere
    np.testing.assert_array_equal(_stable_argsort_u32(jnp.asarray(many)),
                                  np.argsort(many, kind="stable"))


def test_per_device_keys_inside_shard_map():
    """Each device shuffles with its own key under check_vma, as PPO's epochs do."""
    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))

    def body(key):
        key = jax.random.fold_in(key, jax.lax.axis_index("d"))
        return permutation(key, 512)[None]

    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P("d"), check_vma=True))
    key = jax.random.key(3)
    got = np.asarray(fn(key))
    for d in range(n):
        np.testing.assert_array_equal(got[d], jax.random.permutation(jax.random.fold_in(key, d), 512))


def test_packed_sorts_on_cpu_only():
    """The packed pair of one-operand sorts is CPU's; a program lowered for another
    platform sorts once, jax.random.permutation's sort of key and index together."""
    fn = jax.jit(permutation, static_argnums=1)
    traced = fn.trace(jax.random.key(0), 512)

    def sorts(platform):  # how many operands each sort in the lowered program takes
        text = traced.lower(lowering_platforms=(platform,)).as_text()
        return {2 if line.split("=")[0].strip().endswith(":2") else 1
                for line in text.splitlines() if '"stablehlo.sort"' in line}

    assert sorts("cpu") == {1}
    assert sorts("tpu") == {2}


def test_take_rows_equals_a_take_per_leaf_bit_for_bit_with_one_gather_for_32_bit_leaves():
    n = 6
    nan_payload = np.array([0x7FC00001] * n, np.uint32).view(np.float32)  # a NaN with payload
    batch = {"obs": jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3) - 7.5,
             "nan": jnp.asarray(nan_payload), "action": jnp.arange(n, dtype=jnp.int32) - 3,
             "key": jnp.full((n, 2), 0xFFFFFFFF, jnp.uint32), "done": jnp.arange(n) % 2 == 0,
             "frame": jnp.arange(n * 4, dtype=jnp.uint8).reshape(n, 2, 2)}
    rows = jnp.array([5, 0, 3, 3, 1])
    leaves, treedef = jax.tree.flatten(batch)
    packed = [i for i, x in enumerate(leaves) if x.dtype.itemsize == 4]
    runs = {"take_rows": jax.jit(take_rows)(batch, rows),  # the CPU's: a gather a leaf
            "packed": jax.tree.unflatten(treedef, jax.jit(
                lambda leaves, rows: _packed_take(leaves, rows, packed))(leaves, rows))}
    for run, out in runs.items():
        for name, x in batch.items():
            want = np.asarray(x)[np.asarray(rows)]
            assert out[name].dtype == x.dtype and out[name].shape == want.shape, (run, name)
            assert out[name].tobytes() == want.tobytes(), (run, name)  # NaN payloads included
    gathers = {platform: jax.export.export(jax.jit(take_rows), platforms=[platform])(
        batch, rows).mlir_module().count('"stablehlo.gather"') for platform in ("cpu", "tpu")}
    assert gathers == {"cpu": 6, "tpu": 3}  # on a TPU: the four 32-bit leaves at once
