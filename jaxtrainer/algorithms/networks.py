"""Actor-critic MLPs and the two action distributions PPO needs.

The distributions are written out (a few lines each) rather than taken from
distrax: a categorical over logits and a diagonal Gaussian with a
state-independent log standard deviation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from flax.linen.initializers import constant, orthogonal

_LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class Categorical:
    """Categorical distribution over the last axis of ``logits: float32[..., num_actions]``."""

    logits: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        """``int32[...]``."""
        return jax.random.categorical(key, self.logits).astype(jnp.int32)

    def mode(self) -> jax.Array:
        """Greedy action, ``int32[...]``."""
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``float32[...]`` for ``action: int32[...]``."""
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        """``float32[...]``: ``-sum p log p``."""
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


@struct.dataclass
class DiagGaussian:
    """Diagonal Gaussian: ``mean: float32[..., d]``, ``log_std: float32[d]`` (broadcast)."""

    mean: jax.Array
    log_std: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        """``float32[..., d]`` (unbounded: clip for the environment, not here)."""
        noise = jax.random.normal(key, self.mean.shape, self.mean.dtype)
        return self.mean + jnp.exp(self.log_std) * noise

    def mode(self) -> jax.Array:
        return self.mean

    def log_prob(self, action: jax.Array) -> jax.Array:
        """``float32[...]``: sum over the ``d`` action dimensions."""
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        """``float32[...]``: ``sum_d (log_std + (1 + log 2 pi) / 2)``."""
        ent = jnp.sum(self.log_std + 0.5 * (1.0 + _LOG_2PI))
        return jnp.broadcast_to(ent, self.mean.shape[:-1])


_ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


class MLP(nn.Module):
    """Dense layers with orthogonal(sqrt 2) init and an activation after each."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = _ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=orthogonal(math.sqrt(2)),
                             bias_init=constant(0.0))(x))
        return x


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (the PPO paper's and PureJaxRL's layout).

    ``__call__(obs) -> (dist, value)`` where ``obs`` has shape
    ``[..., *observation_shape]`` (flattened to ``[..., observation_size]`` and cast
    to float32), ``dist`` is a :class:`Categorical` or :class:`DiagGaussian` with
    batch shape ``[...]`` and ``value: float32[...]``. :meth:`value` runs the
    critic only.

    Attributes:
      action_dim: number of discrete actions, or of continuous action dimensions.
      discrete: categorical (True) or diagonal Gaussian (False) policy.
      obs_ndim: number of trailing observation axes to flatten.
      hidden_sizes: widths of the hidden layers of each tower.
      activation: ``"tanh"``, ``"relu"``, ``"gelu"`` or ``"silu"``.
    """

    action_dim: int
    discrete: bool
    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    def setup(self) -> None:
        if self.activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation={self.activation!r}: choose one of {sorted(_ACTIVATIONS)}")
        self.actor_body = MLP(self.hidden_sizes, self.activation)
        self.actor_head = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01),
                                   bias_init=constant(0.0))
        self.critic_body = MLP(self.hidden_sizes, self.activation)
        self.critic_head = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))

    def _flat(self, obs: jax.Array) -> jax.Array:
        batch = obs.shape[:obs.ndim - self.obs_ndim]
        return obs.reshape(batch + (-1,)).astype(jnp.float32)

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic_head(self.critic_body(self._flat(obs)))[..., 0]

    def __call__(self, obs: jax.Array) -> tuple[Categorical | DiagGaussian, jax.Array]:
        x = self._flat(obs)
        out = self.actor_head(self.actor_body(x))
        dist = Categorical(out) if self.discrete else DiagGaussian(out, self.log_std)
        return dist, self.critic_head(self.critic_body(x))[..., 0]
