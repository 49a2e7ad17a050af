"""MemberLayout, the one member layout of every population: sizes, ids, masks,
keys, the bitwise gather, ranking and fitness metrics (10 members on 4 devices:
two padding members)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxtrainer.distributed as jd
from jaxtrainer.distributed._members import MemberLayout, rank
from jaxtrainer.metrics import Max, Mean, Min

BY_DEVICE = P(jd.AXIS_NAME)


def on_devices(fn, n, *args, out_specs=BY_DEVICE):
    """``fn(*args)`` on an ``n``-device mesh (replicated inputs); with the default
    ``out_specs`` each device's output rows are stacked in device order."""
    mesh = jax.make_mesh((n,), (jd.AXIS_NAME,), axis_types=(jax.sharding.AxisType.Explicit,),
                         devices=jax.devices()[:n])
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P(),) * len(args), out_specs=out_specs,
                                 check_vma=True))(*args)


def test_sizes():
    layout = MemberLayout(10, 4)
    assert (layout.padded_size, layout.local_count, layout.axis_names) == (12, 3, (jd.AXIS_NAME,))
    assert (MemberLayout(8, 4).padded_size, MemberLayout(8, 4).local_count) == (8, 2)
    assert (MemberLayout(10).padded_size, MemberLayout(10).local_count) == (10, 10)
    for bad in (dict(size=0), dict(size=10, num_devices=True), dict(size=2.0)):
        with pytest.raises(ValueError, match="expected an int >= 1"):
            MemberLayout(**bad)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_ids_mask_and_keys_do_not_depend_on_the_device_count(n):
    layout, key = MemberLayout(10, n), jax.random.key(7)

    def body(key):
        ids = layout.ids()
        return ids, layout.mask(), jax.random.key_data(layout.keys(key))

    ids, mask, keys = on_devices(body, n, key)
    padded = layout.padded_size
    np.testing.assert_array_equal(ids, np.arange(padded))  # device d: d*L .. d*L+L-1
    assert ids.dtype == jnp.int32
    np.testing.assert_array_equal(mask, np.arange(padded) < 10)
    expected = [jax.random.key_data(jax.random.fold_in(key, i)) for i in range(padded)]
    np.testing.assert_array_equal(keys, np.stack(expected))  # member i: fold_in(key, i)


def test_holds_and_slot_name_where_a_member_lives():
    layout = MemberLayout(10, 4)
    held = on_devices(lambda: jnp.stack([layout.holds(i) for i in range(10)])[None], 4)
    np.testing.assert_array_equal(np.argmax(held, axis=0), [i // 3 for i in range(10)])
    assert held.sum() == 10 and [layout.slot(i) for i in (0, 4, 9)] == [0, 1, 0]


def test_pad_local_gather_unpad_move_exact_bits_and_typed_keys():
    layout = MemberLayout(10, 4)
    bits = np.array([0x80000000, 0x7FC01234, 1, 0xFF800000, 0x40600000] * 2, np.uint32)
    population = {"f": jnp.asarray(bits.view(np.float32)),  # -0.0, a NaN payload, a denormal, -inf
                  "b": jnp.arange(10) % 3 == 0,
                  "k": jax.random.split(jax.random.key(3), 10)}
    padded = layout.pad(population)
    np.testing.assert_array_equal(padded["b"], np.r_[np.asarray(population["b"]), [True, True]])
    assert jax.random.key_data(padded["k"]).shape == (12, 2)  # copies of member 9

    def body(population):
        local = layout.local(layout.pad(population))
        assert local["f"].shape == (3,) and local["k"].shape == (3,)
        return layout.unpad(layout.gather(local))

    got = on_devices(body, 4, population, out_specs=P())
    np.testing.assert_array_equal(np.asarray(got["f"]).view(np.uint32), bits)
    np.testing.assert_array_equal(got["b"], population["b"])
    assert jax.dtypes.issubdtype(got["k"].dtype, jax.dtypes.prng_key)
    assert jax.random.key_impl(got["k"]) == jax.random.key_impl(population["k"])
    np.testing.assert_array_equal(jax.random.key_data(got["k"]),
                                  jax.random.key_data(population["k"]))
    with pytest.raises(ValueError, match="expected 10 members, got 9"):
        layout.pad({"f": jnp.zeros(9)})


def test_a_layout_traced_on_another_device_count_is_refused():
    with pytest.raises(ValueError, match="MemberLayout over 4 devices is used where 2 device"):
        on_devices(lambda: MemberLayout(10, 4).ids(), 2)


def test_rank_puts_nan_last_keeps_ties_in_member_order_and_leaves_out_padding():
    fitness = jnp.array([3.0, jnp.nan, 5.0, 3.0, 1.0])
    np.testing.assert_array_equal(rank(fitness), [2, 0, 3, 4, 1])
    np.testing.assert_array_equal(rank(fitness, worst_first=True), [1, 4, 0, 3, 2])
    np.testing.assert_array_equal(rank(fitness, maximize=False), [4, 0, 3, 2, 1])
    np.testing.assert_array_equal(rank(fitness, maximize=False, worst_first=True), [1, 2, 0, 3, 4])
    layout = MemberLayout(10, 4)
    padded = jnp.array([0.0, 9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, jnp.nan, 5.0, 100.0, 100.0])
    np.testing.assert_array_equal(layout.rank(padded), [1, 3, 5, 7, 9, 6, 4, 2, 0, 8])
    np.testing.assert_array_equal(layout.rank(padded[:10]), layout.rank(padded))
    with pytest.raises(ValueError, match="expected 10 or 12 fitness values"):
        layout.rank(padded[:11])


def test_fitness_metrics_count_real_members_only():
    layout = MemberLayout(10, 4)
    replicated = layout.fitness_metrics(jnp.r_[jnp.arange(10.0), 100.0, 100.0])
    assert float(replicated["fitness/mean"]) == 4.5
    assert isinstance(replicated["fitness/max"], Max) and isinstance(replicated["fitness/min"], Min)
    assert (float(replicated["fitness/max"].value), float(replicated["fitness/min"].value)) == (9, 0)

    def body():  # each device: its members' fitness = their ids; member 4 is not finite
        fitness = layout.ids().astype(jnp.float32)
        fitness = jnp.where(fitness == 4, -jnp.inf, fitness)
        metrics = layout.fitness_metrics(fitness, jnp.isfinite(fitness))
        return jax.tree.map(lambda x: x[None], metrics)

    per_device = on_devices(body, 4)
    mean, high, low = (per_device[k] for k in ("fitness/mean", "fitness/max", "fitness/min"))
    assert isinstance(mean, Mean) and isinstance(high, Max) and isinstance(low, Min)
    np.testing.assert_array_equal(mean.count, [3, 2, 3, 1])  # padding (10, 11) and -inf left out
    assert float(mean.total.sum() / mean.count.sum()) == pytest.approx((45 - 4) / 9)
    assert (float(high.value.max()), float(low.value.min())) == (9, 0)
