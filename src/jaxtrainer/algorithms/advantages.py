"""Advantages and value targets of an on-policy rollout, pure functions of
arrays with time first (``[T, ...]``). IMPALA's V-trace is
:func:`jaxtrainer.algorithms.impala.vtrace`.

* :func:`compute_gae`: generalized advantage estimation (Schulman et al. 2016,
  arXiv:1506.02438, eq. 16), PPO's and A2C's; truncation bootstraps, termination
  does not;
* :func:`normalize_advantages`: standardisation with the global (all devices')
  mean and standard deviation, :func:`global_moments` in one all-reduce.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed import axis_size, pmean


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: float,
    gae_lambda: float,
    unroll_length: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimates and value targets (arXiv:1506.02438, eq. 16).

    All inputs are ``[T, ...]`` with time first::

        delta_t = r_t + gamma * (1 - terminated_t) * next_value_t - value_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   A_T = 0

    ``next_value_t`` is the value of the observation step ``t`` reached, before
    any auto-reset, i.e. ``V(final_obs_t)``: the next step's value inside an
    episode, the bootstrap value on truncation (terminated=False, done=True) and
    ignored on termination. The bootstrap of the rollout's last step is thus
    ``next_value_{T-1}``.

    Args:
      rewards, values, next_values: ``float32[T, ...]``.
      terminated: ``bool[T, ...]``, a terminal state was reached (no bootstrap).
      done: ``bool[T, ...]``, the episode ended (terminated or truncated): the
        advantage recursion stops.
      gamma: discount. gae_lambda: GAE's lambda.
      unroll_length: cut the recursion after every ``unroll_length`` steps, so
        each segment's last step bootstraps from ``next_value`` alone: GAE per
        unroll, as Brax's PPO computes it on its ``unroll_length`` trajectories
        (``brax/training/agents/ppo/losses.py``, ``compute_gae``). ``None``: one
        recursion over all ``T`` steps.

    Returns:
      ``(advantages, targets)``, both ``float32[T, ...]``; ``targets = advantages + values``.
    """
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    if unroll_length is not None:
        segment_end = (jnp.arange(not_done.shape[0]) + 1) % unroll_length == 0
        not_done = not_done * (1.0 - segment_end.astype(jnp.float32)).reshape(
            (-1,) + (1,) * (not_done.ndim - 1))
    deltas = rewards + gamma * next_values * not_terminated - values

    def backward(gae, step):
        delta, cont = step
        gae = delta + gamma * gae_lambda * cont * gae
        return gae, gae

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(deltas[0]), (deltas, not_done),
                                 reverse=True, unroll=16)
    return advantages, advantages + values


def normalize_advantages(advantages: jax.Array, eps: float = 1e-8,
                         moments: jax.Array | None = None) -> jax.Array:
    """``(A - mean) / (std + eps)`` with the mean and (population) standard deviation
    of the GLOBAL minibatch. ``advantages``: ``float32[...]``, this device's share;
    ``moments``: ``float32[2]``, its global (mean, variance) when already reduced
    (:func:`~jaxtrainer.algorithms.rollout.minibatch_advantage_moments`).

    On one device (no device axis bound, or one of size 1): the two-pass ``mean``,
    ``mean((A - mean)^2)``. Over devices, one all-reduce (see :func:`global_moments`).
    """
    if moments is None:
        if axis_size() == 1:
            mean = jnp.mean(advantages)
            var = jnp.mean(jnp.square(advantages - mean))
            return (advantages - mean) / (jnp.sqrt(var) + eps)
        moments = global_moments(advantages.reshape(1, -1))[0]
    return (advantages - moments[0]) / (jnp.sqrt(moments[1]) + eps)


def global_moments(shares: jax.Array) -> jax.Array:
    """``float32[k, 2]``: the global (mean, population variance) of each row of
    ``shares`` (``float32[k, m]``, this device's equal-sized share of ``k`` batches),
    with one all-reduce for all rows: a collective's latency, which dominates
    between processes, is paid once. With each share's mean ``m_i`` and squared
    deviation ``v_i``, the global variance is ``mean_i(v_i) + mean_i(m_i^2) - m^2``,
    ``m = mean_i(m_i)`` (Chan, Golub & LeVeque's pairwise update, 1979)."""
    local_mean = jnp.mean(shares, axis=1)
    local_var = jnp.mean(jnp.square(shares - local_mean[:, None]), axis=1)
    mean, within, mean_sq = pmean(jnp.stack([local_mean, local_var, jnp.square(local_mean)]))
    return jnp.stack([mean, jnp.maximum(within + (mean_sq - jnp.square(mean)), 0.0)], axis=1)


CRITIC_INPUTS = ("observation", "global_state")
"""What the critic of A2C and PPO reads (their configs' ``critic_input``)."""


@dataclasses.dataclass(frozen=True)
class GAEConfig:
    """The GAE fields A2C's and PPO's configs compose (documented on ``PPOConfig``)."""

    unroll_length: int | None = None
    gae_lambda: float = 0.95
    bootstrap_truncation: bool = True
    critic_input: str = "observation"


def check_gae_fields(config: Any) -> None:
    """Check :class:`GAEConfig`'s fields of a config composing it, after
    :meth:`OnPolicyConfig.__post_init__`.

    Raises:
      ValueError: a bad field (named), ``num_steps`` not a multiple of
        ``unroll_length``, ``critic_input`` not in :data:`CRITIC_INPUTS` (listing
        them), or ``critic_input="global_state"`` with a recurrent core, a torso
        other than ``mlp`` or ``normalize_observations``.
    """
    arguments.check_fields(config, arguments.positive_int, ("unroll_length",))
    if config.unroll_length is not None and config.num_steps % config.unroll_length:
        raise ValueError(
            f"{type(config).__name__}: num_steps={config.num_steps} is not a multiple of "
            f"unroll_length={config.unroll_length}")
    arguments.check_fields(config, arguments.number, ("gae_lambda",), low=0, high=1)
    arguments.check_fields(config, arguments.flag, ("bootstrap_truncation",))
    arguments.check_fields(config, arguments.one_of, ("critic_input",), choices=CRITIC_INPUTS)
    if config.critic_input == "global_state":
        name = f"{type(config).__name__}: critic_input='global_state'"
        if config.network.core is not None:
            raise ValueError(f"{name} needs a feedforward network; got network.core="
                             f"{config.network.core!r} (use network.core=null)")
        if config.network.torso != "mlp":
            raise ValueError(f"{name} reads flat inputs; got network.torso="
                             f"{config.network.torso!r} (use network.torso='mlp')")
        if config.normalize_observations:
            raise ValueError(f"{name} does not normalise its inputs; got "
                             "normalize_observations=True (use False)")
