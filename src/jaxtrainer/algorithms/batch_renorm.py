"""Batch renormalisation, the layer CrossQ's networks are built of.

Ioffe 2017, "Batch Renormalization: Towards Reducing Minibatch Dependence in
Batch-Normalized Models", arXiv:1702.03275: batch normalisation whose
statistics are corrected toward the running ones (factors ``r`` and ``d``,
clipped to ``r_max = 3`` and ``d_max = 5``) once ``warmup_steps`` training
calls have passed; before that it is batch normalisation. flax ships
``BatchNorm`` only; this layer follows the one of sbx (``araffin/sbx``,
``sbx/common/jax_layers.py``) that CrossQ's reference uses, with the batch
statistics averaged over the devices when the data-parallel axis is bound
(synchronised batch normalisation: every replica normalises with the global
batch's statistics and keeps the same running ones).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrainer.distributed import AXIS_NAME, pmean

R_MAX = 3.0
D_MAX = 5.0


class BatchRenorm(nn.Module):
    """``x[..., features] -> float32[..., features]``, normalised per feature.

    With ``train``: by the batch's mean and variance (over every axis but the
    last, and over the devices), corrected toward the running statistics after
    ``warmup_steps`` calls; the running statistics (``batch_stats`` collection:
    ``mean``, ``var``, ``steps``) move toward the batch's with ``momentum``
    (apply with ``mutable=["batch_stats"]``). Without: by the running
    statistics. Then scaled and shifted by learned ``scale`` and ``bias``.

    Attributes:
      momentum: decay of the running statistics' moving averages.
      epsilon: added to the variances.
      warmup_steps: training calls before the renormalisation corrections start
        (sbx's CrossQ: 100,000).
    """

    momentum: float = 0.99
    epsilon: float = 0.001
    warmup_steps: int = 100_000

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = x.astype(jnp.float32)
        features = (x.shape[-1],)
        running_mean = self.variable("batch_stats", "mean", jnp.zeros, features, jnp.float32)
        running_var = self.variable("batch_stats", "var", jnp.ones, features, jnp.float32)
        steps = self.variable("batch_stats", "steps", jnp.zeros, (), jnp.float32)
        scale = self.param("scale", nn.initializers.ones, features, jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, features, jnp.float32)
        if not train:
            mean, var = running_mean.value, running_var.value
        else:
            axes = tuple(range(x.ndim - 1))
            mean, mean_square = jnp.mean(x, axes), jnp.mean(jnp.square(x), axes)
            if not self.is_initializing():
                mean, mean_square = pmean((mean, mean_square), AXIS_NAME)
            var = jnp.maximum(mean_square - jnp.square(mean), 0.0)
            if not self.is_initializing():
                std = jnp.sqrt(var + self.epsilon)
                running_std = jnp.sqrt(running_var.value + self.epsilon)
                r = jnp.clip(jax.lax.stop_gradient(std / running_std), 1.0 / R_MAX, R_MAX)
                d = jnp.clip(jax.lax.stop_gradient((mean - running_mean.value) / running_std),
                             -D_MAX, D_MAX)
                warmed = steps.value >= self.warmup_steps
                renormed_mean = jnp.where(warmed, mean - d * jnp.sqrt(var) / r, mean)
                renormed_var = jnp.where(warmed, var / jnp.square(r), var)
                running_mean.value = (self.momentum * running_mean.value
                                      + (1.0 - self.momentum) * jax.lax.stop_gradient(mean))
                running_var.value = (self.momentum * running_var.value
                                     + (1.0 - self.momentum) * jax.lax.stop_gradient(var))
                steps.value = steps.value + 1.0
                mean, var = renormed_mean, renormed_var
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * scale + bias
