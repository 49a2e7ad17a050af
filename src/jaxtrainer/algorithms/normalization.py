"""Running observation statistics, merged over devices, for observation normalisation.

The statistics are a count, a mean and the summed squared deviations ``m2`` of
every observation seen so far. Each :func:`update` computes the moments of a new
batch over ALL devices (counts and sums reduced with
:func:`jaxtrainer.distributed.psum`, the batch mean first and then the squared
deviations from it: two passes, no ``E[x^2] - E[x]^2`` cancellation) and merges
them into the running ones with the pairwise update of Chan, Golub & LeVeque,
"Updating Formulae and a Pairwise Algorithm for Computing Sample Variances"
(Stanford CS report STAN-CS-79-773, 1979)::

    n     = n_a + n_b
    delta = mean_b - mean_a
    mean  = mean_a + delta * n_b / n
    m2    = m2_a + m2_b + delta^2 * n_a * n_b / n

Every input of the merge is the result of a collective, so every device computes
bitwise-equal statistics, and the result depends on the device count only through
float rounding of the sums. The reference implementation this follows (in idea,
not code) is Brax's ``brax/training/acme/running_statistics.py``
(``google/brax``), itself from Acme; unlike it, the state keeps ``m2`` and derives
the variance, and the batch moments are reduced over devices before the merge.
All arithmetic is ``float32``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.distributed import AXIS_NAME, psum
from jaxtrainer.distributed._axis import AxisName


@struct.dataclass
class RunningStatistics:
    """Statistics of every observation seen so far.

    Attributes:
      count: ``float32[]`` observations seen (over all devices).
      mean: ``float32[*shape]`` their mean.
      m2: ``float32[*shape]`` their summed squared deviations from ``mean``.
    """

    count: jax.Array
    mean: jax.Array
    m2: jax.Array

    @property
    def var(self) -> jax.Array:
        """``float32[*shape]`` population variance ``m2 / count``; 1 before any data
        (so an empty normaliser is the identity up to clipping)."""
        return jnp.where(self.count > 0, self.m2 / jnp.maximum(self.count, 1.0), 1.0)


def init(shape: Sequence[int]) -> RunningStatistics:
    """Empty statistics for observations of ``shape``: count 0, mean 0, ``m2`` 0."""
    shape = tuple(shape)
    return RunningStatistics(jnp.zeros((), jnp.float32), jnp.zeros(shape, jnp.float32),
                             jnp.zeros(shape, jnp.float32))


def update(stats: RunningStatistics, batch: jax.Array,
           axis_name: AxisName = AXIS_NAME) -> RunningStatistics:
    """``stats`` with ``batch`` merged in.

    Args:
      stats: the running statistics (replicated).
      batch: ``[..., *shape]`` this device's observations; every leading axis
        beyond ``stats.mean``'s shape is a batch axis.
      axis_name: the devices to reduce the batch's moments over (unbound axes
        are ignored, so on one device this is the plain update).

    Returns:
      The merged statistics, equal on every device of ``axis_name``.
    """
    x = jnp.asarray(batch, jnp.float32)
    batch_axes = tuple(range(x.ndim - stats.mean.ndim))
    if x.shape[len(batch_axes):] != stats.mean.shape:
        raise ValueError(f"RunningStatistics.update: batch shape {x.shape} does not end "
                         f"with the statistics' shape {stats.mean.shape}")
    local_count = 1
    for axis in batch_axes:
        local_count *= x.shape[axis]
    count_b = psum(jnp.asarray(local_count, jnp.float32), axis_name)
    mean_b = psum(jnp.sum(x, axis=batch_axes), axis_name) / count_b
    m2_b = psum(jnp.sum(jnp.square(x - mean_b), axis=batch_axes), axis_name)
    return _merge(stats, count_b, mean_b, m2_b)


def _merge(stats: RunningStatistics, count_b: jax.Array, mean_b: jax.Array,
           m2_b: jax.Array) -> RunningStatistics:
    """Chan, Golub & LeVeque's pairwise merge of a batch's moments into ``stats``."""
    count = stats.count + count_b
    delta = mean_b - stats.mean
    mean = stats.mean + delta * (count_b / count)
    m2 = stats.m2 + m2_b + jnp.square(delta) * (stats.count * count_b / count)
    return RunningStatistics(count, mean, m2)


def merge_shifted(stats: RunningStatistics, count: jax.Array, shifted_sum: jax.Array,
                  shifted_square_sum: jax.Array) -> RunningStatistics:
    """``stats`` with a batch given by its sums about ``stats.mean`` merged in: ``count``
    (``float32[]``) observations ``x``, ``shifted_sum = sum(x - stats.mean)`` and
    ``shifted_square_sum = sum((x - stats.mean)**2)`` (``float32[*shape]``, summed over
    every device already, e.g. gathered per population member). The batch's mean is
    ``stats.mean + shifted_sum / count`` and its ``m2`` ``shifted_square_sum -
    shifted_sum**2 / count`` (accurate while the batch's mean is near ``stats.mean``);
    ``count = 0`` leaves ``stats`` as they are."""
    count = jnp.asarray(count, jnp.float32)
    safe = jnp.maximum(count, 1.0)
    mean_b = stats.mean + shifted_sum / safe
    m2_b = jnp.maximum(shifted_square_sum - jnp.square(shifted_sum) / safe, 0.0)
    merged = _merge(stats, count, mean_b, m2_b)
    return jax.tree.map(lambda new, old: jnp.where(count > 0, new, old), merged, stats)


def normalize(stats: RunningStatistics, obs: jax.Array, clip: float | None = 10.0,
              eps: float = 1e-8) -> jax.Array:
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` in ``float32``;
    ``clip=None`` does not clip. ``obs``: ``[..., *shape]``."""
    out = (jnp.asarray(obs, jnp.float32) - stats.mean) / jnp.sqrt(stats.var + eps)
    return out if clip is None else jnp.clip(out, -clip, clip)


def normalize_obs(obs_stats: RunningStatistics | None, obs: jax.Array) -> jax.Array:
    """``obs`` (``[..., *observation_shape]``) normalised with ``obs_stats``
    (:func:`normalize`, ``float32``); unchanged when ``None``."""
    return obs if obs_stats is None else normalize(obs_stats, obs)


def normalizing_policy(policy: Callable[[Any, jax.Array, jax.Array], jax.Array],
                       normalize: bool) -> Callable[[Any, jax.Array, jax.Array], jax.Array]:
    """``policy(params, obs, key)``, which acts on normalised observations, as a
    policy of raw ones: with ``normalize`` its ``params`` are the pair
    ``(params, obs_stats)`` and ``obs`` is normalised with ``obs_stats`` first
    (how an exported policy carries its normaliser, as Brax's ``(normalizer_params,
    policy_params)``); else ``policy`` itself."""
    if not normalize:
        return policy

    def normalized(params, obs, key):
        params, obs_stats = params
        return policy(params, normalize_obs(obs_stats, obs), key)
    return normalized


def learning_batch(batch: Transition, obs_stats: RunningStatistics | None,
                   reward_scaling: float = 1.0) -> Transition:
    """What the off-policy updates learn from: sampled raw transitions with ``obs`` and
    ``next_obs`` normalised by :func:`normalize` with ``obs_stats`` (``float32``, same
    shapes; skipped when ``None``) and ``reward`` (``float32[B]``) multiplied by
    ``reward_scaling`` (skipped when 1, so the batch is then returned as it is). As
    Brax's SAC (``brax/training/agents/sac/train.py``), which normalises at learning
    time and scales rewards in the critic target only."""
    if obs_stats is not None:
        batch = batch.replace(obs=normalize_obs(obs_stats, batch.obs),
                              next_obs=normalize_obs(obs_stats, batch.next_obs))
    if reward_scaling != 1.0:
        batch = batch.replace(reward=batch.reward * jnp.asarray(reward_scaling,
                                                                batch.reward.dtype))
    return batch
