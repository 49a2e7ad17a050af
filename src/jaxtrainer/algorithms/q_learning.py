"""The TD targets and losses of the Q-learning family, as functions of arrays:
DQN and double DQN (:func:`td_targets`), Rainbow's multi-step returns
(:func:`n_step_transition`), C51 (:func:`categorical_projection`), QR-DQN
(:func:`quantile_huber_loss`), PQN (:func:`q_lambda_returns`); each bootstraps
with :func:`bootstrap`, which SAC's, TD3's and CrossQ's critic targets use too
(:mod:`~jaxtrainer.algorithms.critic_losses`).

Time-limit truncation is not termination here: a transition's ``next_obs`` is
the observation before any auto-reset, and only ``terminated`` stops the
bootstrap.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrainer.algorithms.replay import Transition


def bootstrap(reward: jax.Array, terminated: jax.Array, gamma: Any,
              next_value: jax.Array) -> jax.Array:
    """One-step TD target ``r + gamma * (1 - terminated) * next_value``, ``float32[B]``
    (any shape that broadcasts; ``terminated`` bool).

    ``next_value`` is the value of the observation reached before any auto-reset
    (the stored ``next_obs``), so a time-limit truncation bootstraps from it and
    only a terminal state does not (Sutton and Barto 2018, Eq. 6.2).
    """
    return reward + gamma * (1.0 - terminated.astype(jnp.float32)) * next_value


def td_targets(q_next_online: jax.Array, q_next_target: jax.Array, reward: jax.Array,
               terminated: jax.Array, gamma: Any, double: bool = True) -> jax.Array:
    """One-step TD targets ``float32[B]``.

    ``r + gamma * (1 - terminated) * Q_target(s', a*)`` with
    ``a* = argmax_a Q_online(s', a)`` (double DQN, van Hasselt et al. 2016,
    arXiv:1509.06461, Eq. 4) or ``a* = argmax_a Q_target(s', a)`` (DQN, Mnih et
    al. 2015). ``q_next_online``, ``q_next_target``: ``float32[B, num_actions]`` at ``s'``.
    """
    picker = q_next_online if double else q_next_target
    best = jnp.argmax(picker, axis=-1)
    q_next = jnp.take_along_axis(q_next_target, best[:, None], axis=-1)[:, 0]
    return bootstrap(reward, terminated, gamma, q_next)


def greedy_next(picker: jax.Array, values: jax.Array) -> jax.Array:
    """The return distribution of the greedy next action: ``values[b, argmax_a
    picker[b, a]]``, ``float32[B, N]``, from ``picker: float32[B, num_actions]``
    (the online network's expected values: double DQN; or the target's) and
    ``values: float32[B, num_actions, N]`` (C51's probabilities, QR-DQN's quantiles)."""
    best = jnp.argmax(picker, axis=-1)[:, None, None]
    return jnp.take_along_axis(values, best, axis=1)[:, 0]


def n_step_transition(runs: Transition, gamma: Any) -> tuple[Transition, jax.Array]:
    """Runs of ``n`` consecutive transitions (leaves ``[B, n, ...]``, with
    ``done``) as one ``n``-step transition each, and its bootstrap discount
    (multi-step returns, Sutton 1988; Rainbow's, Hessel et al. 2018, arXiv:1710.02298).

    The rewards are summed with discount ``gamma`` up to and including the
    first step that ended its episode (``done``; the whole run when none did),
    ``next_obs`` and ``terminated`` are that step's, and the discount of the
    bootstrap value is ``gamma ** (steps summed)``: the target is
    ``R + discount * (1 - terminated) * Q(next_obs)``. Returns the transition
    (leaves ``[B, ...]``, ``done`` dropped) and ``float32[B]`` discounts.
    """
    n = runs.reward.shape[1]
    ended = runs.done.astype(jnp.int32)
    # steps summed: up to the first end (inclusive), else all n
    last = jnp.where(jnp.any(runs.done, axis=1), jnp.argmax(ended, axis=1), n - 1)
    k = jnp.arange(n)
    weights = jnp.where(k[None, :] <= last[:, None], gamma ** k[None, :].astype(jnp.float32), 0.0)
    reward = jnp.sum(weights * runs.reward, axis=1)
    pick = lambda x: jnp.take_along_axis(  # noqa: E731
        x, last.reshape((-1, 1) + (1,) * (x.ndim - 2)), axis=1)[:, 0]
    folded = Transition(runs.obs[:, 0], runs.action[:, 0], reward, pick(runs.next_obs),
                        pick(runs.terminated))
    return folded, gamma ** (last + 1).astype(jnp.float32)


def categorical_projection(next_pmf: jax.Array, reward: jax.Array, terminated: jax.Array,
                           gamma: Any, atoms: jax.Array) -> jax.Array:
    """C51's target distribution ``float32[B, N]``: the distribution of
    ``r + gamma (1 - terminated) z`` (``gamma`` a number or ``float32[B]``;
    ``z`` on ``atoms: float32[N]``, probabilities
    ``next_pmf: float32[B, N]``) projected onto ``atoms`` (evenly spaced),
    each shifted atom's mass split between its two neighbours
    (Bellemare, Dabney and Munos 2017, arXiv:1707.06887, Algorithm 1; a shifted
    atom that lands on an atom keeps all its mass there, as CleanRL's ``c51_jax.py``)."""
    num_atoms = atoms.shape[0]
    v_min, v_max = atoms[0], atoms[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    discount = jnp.broadcast_to(jnp.asarray(gamma, atoms.dtype), reward.shape)[:, None]
    shifted = reward[:, None] + discount * (1.0 - terminated.astype(atoms.dtype))[:, None] * atoms
    b = (jnp.clip(shifted, v_min, v_max) - v_min) / delta
    lower, upper = jnp.floor(b), jnp.ceil(b)
    to_lower = (upper + (lower == upper) - b) * next_pmf
    to_upper = (b - lower) * next_pmf
    one_hot = lambda i: jax.nn.one_hot(i.astype(jnp.int32), num_atoms, dtype=next_pmf.dtype)  # noqa: E731
    return jnp.einsum("bj,bji->bi", to_lower, one_hot(lower)) + \
        jnp.einsum("bj,bji->bi", to_upper, one_hot(upper))


def weighted_mean(values: jax.Array, weights: jax.Array | None) -> jax.Array:
    """``mean(weights * values)`` over a batch (``mean(values)`` without weights):
    prioritised replay's importance-weighted loss (Schaul et al. 2016,
    arXiv:1511.05952). ``values``, ``weights``: ``float32[B]``."""
    return jnp.mean(values if weights is None else weights * values)


def quantile_huber_loss(quantiles: jax.Array, target: jax.Array,
                        kappa: float | jax.Array = 1.0) -> jax.Array:
    """QR-DQN's loss ``float32[B]`` (Dabney et al. 2018, arXiv:1710.10044, Eq. 9-10): for each
    predicted quantile ``theta_i`` (``quantiles: float32[B, N]``, at the
    midpoints ``tau_i = (2i + 1) / 2N``) and target sample ``T_j``
    (``target: float32[B, M]``), ``u = T_j - theta_i``,
    ``rho(u) = |tau_i - 1{u < 0}| * L_kappa(u) / kappa`` with ``L_kappa`` the
    Huber loss (``optax.losses.huber_loss``); summed over ``i``, averaged over
    ``j``."""
    n = quantiles.shape[-1]
    tau = (jnp.arange(n, dtype=quantiles.dtype) + 0.5) / n
    u = target[:, None, :] - quantiles[:, :, None]                       # [B, N, M]
    huber = optax.losses.huber_loss(u, delta=kappa)
    weight = jnp.abs(tau[None, :, None] - (u < 0).astype(quantiles.dtype))
    return jnp.sum(jnp.mean(weight * huber / kappa, axis=-1), axis=-1)


def q_lambda_returns(reward: jax.Array, terminated: jax.Array, done: jax.Array,
                     next_q: jax.Array, gamma: jax.Array, q_lambda: jax.Array) -> jax.Array:
    """Q(lambda) returns ``float32[T, n]`` of a rollout (time-major; PQN's,
    Gallici et al. 2024, arXiv:2407.04811).

    ``G_t = r_t + gamma (1 - terminated_t) * B_t`` (:func:`bootstrap`) with
    ``B_t = max_a Q(s'_t)`` where the episode ended at ``t`` (``done``) or the
    rollout does, else ``lambda G_{t+1} + (1 - lambda) max_a Q(s'_t)`` (Peng's/Watkins-free
    lambda-return over the greedy value, as CleanRL's ``pqn.py``). ``next_q``:
    ``max_a Q`` of the observation after each step (the one the time limit cut
    on truncation), ``float32[T, n]``; ``terminated``, ``done``: ``bool[T, n]``.
    """
    def backward(later, step):
        r, term, end, q = step
        blend = jnp.where(end, q, q_lambda * later + (1.0 - q_lambda) * q)
        value = bootstrap(r, term, gamma, blend)
        return value, value

    last = jnp.zeros_like(reward[-1])
    end = done.at[-1].set(True)  # the rollout's last step bootstraps from max_a Q
    _, returns = jax.lax.scan(backward, last, (reward, terminated, end, next_q), reverse=True)
    return returns
