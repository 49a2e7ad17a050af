"""Varying-manual-axes bookkeeping for loops traced inside ``jax.shard_map``.

With ``check_vma=True`` a ``lax.scan`` carry must vary over the same mesh axes on
the way in and out. An env's reset gives some leaves that do not depend on the
key (a step counter starting at 0) and so do not vary across devices, while
after one step they do. :func:`vary_like` casts a pytree up to the axes its
inputs vary over. Outside ``shard_map`` every value varies over no axis and these
are no-ops.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxtrainer.distributed import varying_axes


def tree_varying_axes(*trees: Any) -> frozenset[str]:
    """Union of :func:`varying_axes` over every leaf of ``trees``."""
    axes: frozenset[str] = frozenset()
    for leaf in jax.tree.leaves(trees):
        axes |= varying_axes(leaf)
    return axes


def vary_like(tree: Any, *refs: Any) -> Any:
    """Cast every leaf of ``tree`` to vary over all axes any leaf of ``refs`` varies over."""
    axes = tree_varying_axes(*refs)
    if not axes:
        return tree

    def cast(x):
        missing = tuple(sorted(axes - varying_axes(x)))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)
