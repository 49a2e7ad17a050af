"""Recurrent cores: memory between a torso and the hidden layers of an on-policy network.

``network.core`` (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`) names
one of :data:`CORES`: flax's ``GRUCell`` (Cho et al. 2014, arXiv:1406.1078) or
``OptimizedLSTMCell`` (Hochreiter & Schmidhuber 1997) of ``network.core_size``
units. The carry is what the cell keeps between steps:

* ``gru``: ``float32[batch, core_size]``;
* ``lstm``: a pair ``(c, h)`` of ``float32[batch, core_size]``.

It starts at zeros (:func:`initial_carry`) and returns to zeros wherever an
episode starts (:class:`ResetCell`), so that a sequence never sees the episode
before it: the rule of PureJaxRL's ``purejaxrl/ppo_rnn.py`` (``ScannedRNN``)
and of sb3-contrib's ``RecurrentPPO``, which reset on the previous step's done.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

CORES = ("gru", "lstm")
"""The recurrent cores by name (``network.core``)."""

Carry = Any
"""A core's carry: ``float32[batch, core_size]`` (gru) or a pair of them (lstm)."""


def initial_carry(core: str, size: int, batch: int) -> Carry:
    """The zero carry of ``batch`` sequences: what a sequence starts from and
    what an episode start resets to.

    Raises:
      ValueError: ``core`` not in :data:`CORES` (listing them).
    """
    if core not in CORES:
        raise ValueError(f"network.core={core!r}: choose one of {', '.join(map(repr, CORES))}, "
                         "or null for none")
    zeros = jnp.zeros((batch, size), jnp.float32)
    return zeros if core == "gru" else (zeros, zeros)


class ResetCell(nn.Module):
    """One step of a recurrent cell over a batch, the carry reset where an episode starts.

    ``__call__(carry, (x, start)) -> (carry, (out, carry))`` with ``x:
    float32[batch, features]``, ``start: bool[batch]`` (this step's observation
    is the first of an episode: the carry going in is replaced by zeros first),
    ``out: float32[batch, size]``; the carry after the step is also an output,
    so a sequence yields every step's carry (unused ones cost nothing under jit). Wrapped in ``flax.linen.scan`` over a leading time
    axis by :class:`Core`; parameters are the cell's (``cell``).

    Attributes:
      core: ``"gru"`` or ``"lstm"``. size: units.
    """

    core: str
    size: int

    @nn.compact
    def __call__(self, carry: Carry, inputs: tuple[jax.Array, jax.Array]) -> tuple[Carry, jax.Array]:
        x, start = inputs
        carry = jax.tree.map(lambda c: jnp.where(start[:, None], jnp.zeros_like(c), c), carry)
        cell = (nn.GRUCell(self.size, name="cell") if self.core == "gru"
                else nn.OptimizedLSTMCell(self.size, name="cell"))
        carry, out = cell(carry, x)
        return carry, (out, carry)


Core = nn.scan(ResetCell, variable_broadcast="params", split_rngs={"params": False},
               in_axes=0, out_axes=0)
"""``Core(core, size)(carry, (x[T, batch, F], start[T, batch])) -> (carry,
(out[T, batch, size], carries))``: :class:`ResetCell` over a leading time axis
(one set of parameters for every step; ``T = 1`` is a single step); ``carries``
is each step's carry after it, leading axes ``[T, batch]``."""
