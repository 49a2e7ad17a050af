"""The data-flow pass that tells which traced values differ between devices."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxtrainer.distributed import AXIS_NAME, per_device
from jaxtrainer.strategies.dependence import tree_dependence

D = frozenset({AXIS_NAME})
NONE = frozenset()


def deps(fn, *args, inputs):
    """``tree_dependence`` of ``fn(*args)`` traced inside shard_map over 4 devices."""
    found = []
    mesh = jax.make_mesh((4,), (AXIS_NAME,), axis_types=(jax.sharding.AxisType.Explicit,))

    def body(*a):
        found.append(tree_dependence(jax.jit(fn).trace(*a), inputs))
        return jnp.zeros(())

    jax.eval_shape(jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P(),
                                 check_vma=False), *args)
    return found[0]


def test_device_index_and_collectives():
    def fn(x):
        i = jax.lax.axis_index(AXIS_NAME)
        y = x * i
        return y, jax.lax.psum(y, AXIS_NAME), jax.lax.pmean(y, AXIS_NAME), x + 1.0, \
            jax.lax.all_gather(y, AXIS_NAME), jax.lax.ppermute(x, AXIS_NAME, [(0, 1), (1, 0)])

    assert deps(fn, jnp.ones(3), inputs=(NONE,)) == (D, NONE, NONE, NONE, NONE, D)
    assert deps(fn, jnp.ones(3), inputs=(D,))[3] == D


def test_a_scan_carry_that_starts_replicated_and_picks_up_a_per_device_value():
    def fn(x, noise):
        def body(carry, n):
            total, count = carry
            return (total + n, count + 1), n * 2
        (total, count), ys = jax.lax.scan(body, (jnp.zeros(()), jnp.zeros((), jnp.int32)), noise)
        return total, count, ys, x

    assert deps(fn, jnp.ones(()), jnp.ones(5), inputs=(NONE, D)) == (D, NONE, D, NONE)


def test_while_loop_with_a_per_device_condition_and_cond_with_a_per_device_predicate():
    def fn(x, limit):
        a, b, unchanged = jax.lax.while_loop(lambda c: c[0] < limit, lambda c: (c[0] + 1.0, c[1] * 2.0, c[2]),
                                             (x, x, x))
        picked = jax.lax.cond(limit > 0, lambda v: v + 1.0, lambda v: v - 1.0, x)
        same = jax.lax.cond(x > 0, lambda v: v + 1.0, lambda v: v - 1.0, x)
        return a, b, unchanged, picked, same

    assert deps(fn, jnp.ones(()), jnp.ones(()), inputs=(NONE, D)) == (D, D, NONE, D, NONE)


def test_gradients_and_marks_follow_their_inputs():
    def fn(params, data):
        grads = jax.grad(lambda p: jnp.sum((data @ p) ** 2))(params)
        return grads, jax.lax.pmean(grads, AXIS_NAME), per_device(jnp.zeros(3)), \
            jax.checkpoint(lambda p: jnp.sin(p))(params)

    out = deps(fn, jnp.ones(3), jnp.ones((2, 3)), inputs=(NONE, D))
    assert out == (D, NONE, D, NONE)
