"""The action distributions of the on-policy networks, written out (a few
lines each, rather than taken from distrax): :class:`Categorical` over logits,
:class:`MultiCategorical` (independent :class:`Categorical` components, for
multi-discrete actions), :class:`DiagGaussian` with a state-independent log
standard deviation (the PPO paper's and PureJaxRL's) and :class:`TanhNormal`
(Brax's ``NormalTanhDistribution``).

Each is a pytree with ``noise(key)`` / ``sample_with(noise)`` (a sample's
random draw apart from its use, so a rollout draws every step's noise before
its loop), ``sample(key)``, ``mode()``, ``log_prob(action)`` and
``entropy(key=None)``, batch shape the leading axes of its parameters.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import struct

LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class Categorical:
    """Categorical distribution over the last axis of ``logits: float32[..., num_actions]``."""

    logits: jax.Array

    def noise(self, key: jax.Array) -> jax.Array:
        """The Gumbel noise ``float32[..., num_actions]`` a sample draws from ``key``
        (only the shape and dtype of ``logits`` are read, so a
        ``jax.eval_shape`` of the distribution draws it too)."""
        return jax.random.gumbel(key, self.logits.shape, self.logits.dtype)

    def sample_with(self, noise: jax.Array) -> jax.Array:
        """``int32[...]``: the Gumbel-max sample for :meth:`noise`'s draw,
        ``argmax(noise + logits)``, as ``jax.random.categorical`` computes it."""
        return jnp.argmax(noise + self.logits, axis=-1).astype(jnp.int32)

    def sample(self, key: jax.Array) -> jax.Array:
        """``int32[...]``; the same bits as ``jax.random.categorical(key, logits)``."""
        return self.sample_with(self.noise(key))

    def mode(self) -> jax.Array:
        """Greedy action, ``int32[...]``."""
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``float32[...]`` for ``action: int32[...]``.

        The action's entry is picked with a one-hot select and a sum (the entry
        plus zeros: exactly the entry), not a gather, whose gradient is a
        scatter-add: an accelerator runs a scatter's updates one after another,
        a select and sum in one fused kernel."""
        logp = jax.nn.log_softmax(self.logits)
        picked = action[..., None].astype(jnp.int32) == jnp.arange(logp.shape[-1], dtype=jnp.int32)
        return jnp.sum(jnp.where(picked, logp, 0.0), axis=-1)

    def entropy(self, key: jax.Array | None = None) -> jax.Array:
        """``float32[...]``: ``-sum p log p`` (``key`` unused: exact)."""
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


@struct.dataclass
class MultiCategorical:
    """Factorised categorical over action vectors ``int32[..., k]``: independent
    :class:`Categorical` components, component ``i`` over ``nvec[i]`` values.

    ``logits: float32[..., sum(nvec)]`` holds the components' logits one after
    the other (component ``i``'s are ``logits[..., o_i:o_i + nvec[i]]`` with
    ``o_i = sum(nvec[:i])``); every method is the components' :class:`Categorical`
    ones, stacked on a last axis (actions) or summed over it (log-probabilities
    and entropies, the components being independent). ``nvec`` is static.
    """

    logits: jax.Array
    nvec: tuple[int, ...] = struct.field(pytree_node=False)

    def components(self, values: jax.Array | None = None) -> list[jax.Array]:
        """``values`` (default :attr:`logits`), ``[..., sum(nvec)]``, split into the
        components' ``[..., nvec[i]]`` parts."""
        values = self.logits if values is None else values
        return jnp.split(values, list(itertools.accumulate(self.nvec))[:-1], axis=-1)

    def categoricals(self) -> list[Categorical]:
        """The components as :class:`Categorical` distributions, batch shape ``[...]``."""
        return [Categorical(logits) for logits in self.components()]

    def noise(self, key: jax.Array) -> jax.Array:
        """The Gumbel noise ``float32[..., sum(nvec)]`` a sample draws from ``key``
        (only the shape and dtype of ``logits`` are read)."""
        return jax.random.gumbel(key, self.logits.shape, self.logits.dtype)

    def sample_with(self, noise: jax.Array) -> jax.Array:
        """``int32[..., k]``: each component's Gumbel-max sample for its part of
        :meth:`noise`'s draw."""
        return jnp.stack([c.sample_with(n) for c, n in
                          zip(self.categoricals(), self.components(noise), strict=True)], -1)

    def sample(self, key: jax.Array) -> jax.Array:
        """``int32[..., k]``, :meth:`sample_with` of :meth:`noise`."""
        return self.sample_with(self.noise(key))

    def mode(self) -> jax.Array:
        """Greedy action, ``int32[..., k]``: each component's argmax."""
        return jnp.stack([c.mode() for c in self.categoricals()], -1)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``float32[...]`` for ``action: int32[..., k]``: the components' log-probabilities summed."""
        return sum(c.log_prob(action[..., i]) for i, c in enumerate(self.categoricals()))

    def entropy(self, key: jax.Array | None = None) -> jax.Array:
        """``float32[...]``: the components' entropies summed (``key`` unused: exact)."""
        return sum(c.entropy() for c in self.categoricals())


def categorical(logits: jax.Array, nvec: Sequence[int] = ()) -> Categorical | MultiCategorical:
    """The categorical policy of a discrete env over ``logits``, ``float32[...,
    num_actions]``: a :class:`Categorical` (``nvec=()``, one action ``int32[...]``)
    or, for a multi-discrete env (``nvec``: its ``action_nvec``, ``sum(nvec) ==
    num_actions``), a :class:`MultiCategorical` (actions ``int32[..., len(nvec)]``).

    Raises:
      ValueError: ``logits``' last axis is not ``sum(nvec)`` wide (naming both).
    """
    if not nvec:
        return Categorical(logits)
    if logits.shape[-1] != sum(nvec):
        raise ValueError(f"logits of shape {tuple(logits.shape)}: a MultiCategorical of "
                         f"nvec={tuple(nvec)} needs a last axis of sum(nvec)={sum(nvec)}")
    return MultiCategorical(logits, tuple(int(n) for n in nvec))


@struct.dataclass
class DiagGaussian:
    """Diagonal Gaussian: ``mean: float32[..., d]``, ``log_std: float32[d]`` (broadcast)."""

    mean: jax.Array
    log_std: jax.Array

    def noise(self, key: jax.Array) -> jax.Array:
        """The standard normal noise ``float32[..., d]`` a sample draws from ``key``
        (only the shape and dtype of ``mean`` are read)."""
        return jax.random.normal(key, self.mean.shape, self.mean.dtype)

    def sample_with(self, noise: jax.Array) -> jax.Array:
        """``float32[..., d]``: ``mean + exp(log_std) * noise`` (unbounded: clip for
        the environment, not here)."""
        return self.mean + jnp.exp(self.log_std) * noise

    def sample(self, key: jax.Array) -> jax.Array:
        """``float32[..., d]``, :meth:`sample_with` of :meth:`noise`."""
        return self.sample_with(self.noise(key))

    def mode(self) -> jax.Array:
        return self.mean

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``float32[...]``: sum over the ``d`` action dimensions."""
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z * z - self.log_std - 0.5 * LOG_2PI, axis=-1)

    def entropy(self, key: jax.Array | None = None) -> jax.Array:
        """``float32[...]``: ``sum_d (log_std + (1 + log 2 pi) / 2)`` (``key`` unused: exact)."""
        ent = jnp.sum(self.log_std + 0.5 * (1.0 + LOG_2PI))
        return jnp.broadcast_to(ent, self.mean.shape[:-1])


@struct.dataclass
class TanhNormal:
    """Brax's ``NormalTanhDistribution`` (``brax/training/distribution.py``): a
    normal over pre-tanh actions, ``loc, scale: float32[..., d]``; the
    environment gets ``tanh`` of a sample (:meth:`squash`).

    As Brax's PPO, samples and log-probabilities are of the pre-tanh action
    (a rollout stores it), with the tanh's Jacobian in :meth:`log_prob`, and
    the entropy is the normal's plus the log-Jacobian at one sample (Brax's
    ``ParametricDistribution.entropy``).
    """

    loc: jax.Array
    scale: jax.Array

    def noise(self, key: jax.Array) -> jax.Array:
        """Standard normal noise ``float32[..., d]`` (only ``loc``'s shape is read)."""
        return jax.random.normal(key, self.loc.shape, self.loc.dtype)

    def sample_with(self, noise: jax.Array) -> jax.Array:
        """The pre-tanh action ``loc + scale * noise``, ``float32[..., d]``."""
        return self.loc + self.scale * noise

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_with(self.noise(key))

    def mode(self) -> jax.Array:
        """The pre-tanh mode, ``loc`` (the action is its tanh)."""
        return self.loc

    @staticmethod
    def squash(raw: jax.Array) -> jax.Array:
        """The action in ``[-1, 1]``: ``tanh(raw)``."""
        return jnp.tanh(raw)

    @staticmethod
    def _log_det_jacobian(raw: jax.Array) -> jax.Array:
        """``log(1 - tanh(x)^2)``, stably: ``2 (log 2 - x - softplus(-2x))``."""
        return 2.0 * (math.log(2.0) - raw - jax.nn.softplus(-2.0 * raw))

    def log_prob(self, raw: jax.Array) -> jax.Array:
        """``float32[...]``: the squashed action's log-density at pre-tanh ``raw``
        (the normal's, minus the log-Jacobian, summed over ``d``)."""
        z = (raw - self.loc) / self.scale
        normal = -0.5 * z * z - jnp.log(self.scale) - 0.5 * LOG_2PI
        return jnp.sum(normal - self._log_det_jacobian(raw), axis=-1)

    def entropy(self, key: jax.Array | None = None) -> jax.Array:
        """``float32[...]``: the normal's entropy plus the log-Jacobian at a
        sample drawn with ``key`` (at ``loc`` without one)."""
        normal = 0.5 + 0.5 * LOG_2PI + jnp.log(self.scale)
        at = self.loc if key is None else self.sample(key)
        return jnp.sum(normal + self._log_det_jacobian(at), axis=-1)


Distribution = Categorical | MultiCategorical | DiagGaussian | TanhNormal
"""An action distribution of the on-policy networks."""
