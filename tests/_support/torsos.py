"""A user's own torso for the network tests, importable as ``tests.torsos.TinyTorso``."""

from __future__ import annotations

import flax.linen as nn
import jax


class TinyTorso(nn.Module):
    """``float32[batch, *observation_shape] -> float32[batch, features]``: one tanh
    Dense layer (parameters ``tiny/kernel``, ``tiny/bias``) on the flattened observation."""

    features: int = 8

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.tanh(nn.Dense(self.features, name="tiny")(x.reshape((x.shape[0], -1))))
