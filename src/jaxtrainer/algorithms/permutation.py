"""``jax.random.permutation(key, n)``, bit for bit, without a sort that carries a payload.

``jax.random.permutation`` draws 32-bit random keys and sorts ``arange(n)`` by
them (``lax.sort_key_val``: a stable sort of two operands; a shuffle by sorting,
with fresh keys for each of ``ceil(3 log n / log(2^32 - 1))`` rounds). XLA's CPU
backend runs a sort of two operands through a generic comparator called for
every comparison, and a sort of one ``uint32`` array without one: for PPO's
512-sample CartPole minibatch shuffle, ``jax.random.permutation`` took 310 us
and :func:`permutation` 113 us (2 CPU cores, random bits included); four of
them per PPO update had been about a tenth of the update.

:func:`permutation` computes the same stable argsort of the same keys with two
sorts of one ``uint32`` array each, the element's index packed in the low bits
(a least-significant-digit-first pair of passes): the result equals
``jax.random.permutation(key, n)`` exactly for every ``n <= 2**16``; larger
``n`` get ``jax.random.permutation`` itself.

Only XLA's CPU backend runs the packed sorts (``jax.lax.platform_dependent``,
resolved when the program is lowered): the generic comparator they avoid is
XLA:CPU's; on an accelerator they would be one more sort and two more gathers
than ``jax.random.permutation``'s single sort of keys and indices, each a
kernel of its own inside PPO's epoch loop. Both give the same permutation.

:func:`take_rows` applies a permutation to a batch of several leaves with one
gather for all of their 32-bit leaves.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer.distributed._axis import cast_varying, varying_axes

_MAX_SIZE = 2 ** 16
"""Largest ``n`` the packed sorts serve: both passes pack ``ceil(log2 n)`` index
bits beside key bits in 32 bits (``2 * 16 <= 32``)."""


def _rounds(n: int) -> int:
    """Sorting rounds of ``jax.random.permutation`` for ``n`` elements (its
    static rule: ``ceil(3 * log(n) / log(2**32 - 1))``)."""
    return int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))


def _stable_argsort_u32(keys: jax.Array) -> jax.Array:
    """Indices that sort ``keys`` (``uint32[n]``, ``2 <= n <= 2**16``) ascending,
    ties in index order: ``lax.sort_key_val(keys, arange(n))[1]`` as ``int32[n]``.

    Pass one sorts ``(low b bits of the key, index)`` packed in one ``uint32``
    (``b = ceil(log2 n)``); pass two sorts ``(high 32 - b bits, position after
    pass one)``, so elements end ordered by ``(high, low, index)``: the key, then
    the index.
    """
    n = keys.shape[0]
    b = max(1, math.ceil(math.log2(n)))
    mask = jnp.uint32((1 << b) - 1)
    index = jnp.arange(n, dtype=jnp.uint32)
    first = jnp.sort(((keys & mask) << b) | index)
    order = (first & mask).astype(jnp.int32)
    second = jnp.sort(((keys[order] >> b) << b) | index)
    return order[(second & mask).astype(jnp.int32)]


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A uniformly random permutation of ``arange(n)``: ``int32[n]`` (``int64``
    under ``jax_enable_x64``, as jax's), equal to
    ``jax.random.permutation(key, n)`` (same keys, same result). On CPU it is
    computed with single-operand sorts (see the module docstring); on other
    platforms, and for ``n < 2`` or ``n > _MAX_SIZE``, it is
    ``jax.random.permutation`` itself.

    Args:
      key: a PRNG key (typed or raw, as ``jax.random.permutation`` takes).
      n: a Python int, the number of elements.
    """
    n = int(n)
    if n < 2 or n > _MAX_SIZE:
        return jax.random.permutation(key, n)
    axes = varying_axes(key)  # both branches typed as varying as the key (shard_map)
    return jax.lax.platform_dependent(
        key, cpu=lambda k: cast_varying(_packed_permutation(k, n), axes),
        default=lambda k: cast_varying(jax.random.permutation(k, n), axes))


def _packed_permutation(key: jax.Array, n: int) -> jax.Array:
    """:func:`permutation` with the packed single-operand sorts (``2 <= n <= _MAX_SIZE``)."""
    x = jnp.arange(n)
    for _ in range(_rounds(n)):
        key, subkey = jax.random.split(key)
        x = x[_stable_argsort_u32(jax.random.bits(subkey, (n,), jnp.uint32))]
    return x


def take_rows(batch: Any, rows: jax.Array) -> Any:
    """``jax.tree.map(lambda x: jnp.take(x, rows, axis=0), batch)``, bit for bit
    (leaves ``[n, ...]``, ``rows``: ``int[m]``, indices into ``n``). Off the CPU,
    every 32-bit leaf (``float32``, ``int32``, ``uint32``) is bit-cast into one
    ``uint32[n, k]`` array gathered once and cut back, other leaves gathered on
    their own: on a TPU, PPO's minibatch shuffle at 983,040 rows was five
    gathers of its five leaves. On the CPU (where the packing copies cost three
    times the gathers) a gather a leaf, as ``jnp.take``."""
    leaves, treedef = jax.tree.flatten(batch)
    packed = [i for i, x in enumerate(leaves) if x.ndim and jnp.dtype(x.dtype).itemsize == 4]
    if len(packed) < 2:
        return jax.tree.map(lambda x: jnp.take(x, rows, axis=0), batch)
    out = jax.lax.platform_dependent(
        leaves, rows, cpu=lambda leaves, rows: [jnp.take(x, rows, axis=0) for x in leaves],
        default=lambda leaves, rows: _packed_take(leaves, rows, packed))
    return jax.tree.unflatten(treedef, out)


def _packed_take(leaves: list[jax.Array], rows: jax.Array, packed: list[int]) -> list[jax.Array]:
    """:func:`take_rows` of ``leaves`` with the leaves at ``packed`` (32-bit) in one gather."""
    out = [None if i in packed else jnp.take(x, rows, axis=0) for i, x in enumerate(leaves)]
    columns = [jax.lax.bitcast_convert_type(leaves[i], jnp.uint32).reshape(leaves[i].shape[0], -1)
               for i in packed]
    table = jnp.take(jnp.concatenate(columns, axis=1), rows, axis=0)
    bounds = np.cumsum([0] + [c.shape[1] for c in columns])
    for i, start, stop in zip(packed, bounds[:-1], bounds[1:], strict=True):
        out[i] = jax.lax.bitcast_convert_type(
            table[:, start:stop].reshape((rows.shape[0],) + leaves[i].shape[1:]), leaves[i].dtype)
    return out
