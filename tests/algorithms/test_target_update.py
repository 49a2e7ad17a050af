"""Polyak target updates (:mod:`jaxtrainer.algorithms.target_update`) on values
worked by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer.algorithms.target_update import periodic_soft_update, soft_update


def test_soft_update_averages_leaf_by_leaf():
    target = {"w": jnp.asarray([0.0, 10.0]), "b": jnp.asarray(4.0)}
    online = {"w": jnp.asarray([1.0, 20.0]), "b": jnp.asarray(8.0)}
    # 0.25 * online + 0.75 * target
    hand = {"w": [0.25, 12.5], "b": 5.0}
    for tau in (0.25, jnp.float32(0.25)):                     # a constant or a traced rate
        got = jax.jit(soft_update)(target, online, tau) if not isinstance(tau, float) \
            else soft_update(target, online, tau)
        np.testing.assert_allclose(got["w"], hand["w"])
        assert float(got["b"]) == hand["b"]


def test_tau_one_copies_even_where_the_average_would_not():
    # 1 * 3 + 0 * inf is NaN; a hard update copies the online value
    target, online = {"w": jnp.asarray([jnp.inf])}, {"w": jnp.asarray([3.0])}
    assert float(soft_update(target, online, 1.0)["w"][0]) == 3.0
    assert float(jax.jit(soft_update)(target, online, jnp.float32(1.0))["w"][0]) == 3.0


def test_periodic_soft_update_moves_on_multiples_only():
    target, online = {"b": jnp.asarray(2.0)}, {"b": jnp.asarray(6.0)}
    assert float(periodic_soft_update(target, online, 0.5, jnp.int32(3), 2)["b"]) == 2.0
    assert float(periodic_soft_update(target, online, 0.5, jnp.int32(4), 2)["b"]) == 4.0
