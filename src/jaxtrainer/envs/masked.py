"""Partially observed variants: an environment whose observations keep only some positions.

Memory tasks made from fully observed ones, as in the recurrent-policy
literature (e.g. the velocity-free CartPole of POPGym, Morad et al. 2023,
arXiv:2303.01859): hide the velocities and a memoryless policy can no longer
tell which way the pole is moving; a recurrent core
(``network.core=gru``) recovers them from consecutive observations.

* ``make(name, observation_mask=[0, 2])``: any environment with flat
  observations, keeping the positions listed (:class:`ObservationMask`).
* ``make("CartPole-v1-NoVelocity")``: the names in :data:`NO_VELOCITY` with the
  ``-NoVelocity`` suffix, their velocity entries hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer.envs.base import Action, Env, Observation

NO_VELOCITY_SUFFIX = "-NoVelocity"

NO_VELOCITY: dict[str, tuple[int, ...]] = {
    "CartPole-v1": (0, 2),          # cart position, pole angle (of x, x_dot, theta, theta_dot)
    "Pendulum-v1": (0, 1),          # cos, sin of the angle (of cos, sin, angular velocity)
    "Acrobot-v1": (0, 1, 2, 3),     # cos, sin of both joint angles (of those and 2 velocities)
    "MountainCar-v0": (0,),         # position (of position, velocity)
    "MountainCarContinuous-v0": (0,),
}
"""gymnax environments with a ``-NoVelocity`` variant: the positions kept."""


def _check_mask(mask: Any, observation_shape: Sequence[int], name: str) -> tuple[int, ...]:
    """``mask`` as a tuple of distinct, in-range positions of a flat observation.

    Raises:
      ValueError: observations that are not flat, a mask that is empty, not a
        list of ints, repeats a position or names one outside
        ``[0, observation_size)`` (the message names the mask and the shape).
    """
    shape = tuple(observation_shape)
    if len(shape) != 1:
        raise ValueError(f"observation_mask={mask!r}: {name}'s observations have shape {shape}; "
                         "a mask keeps positions of flat observations [size]")
    if isinstance(mask, (str, bytes)) or not isinstance(mask, Sequence) or not mask or any(
            isinstance(i, bool) or not isinstance(i, int) for i in mask):
        raise ValueError(f"observation_mask={mask!r}: expected a non-empty list of positions "
                         f"such as [0, 2]")
    if len(set(mask)) != len(mask) or not all(0 <= i < shape[0] for i in mask):
        raise ValueError(f"observation_mask={list(mask)!r}: expected distinct positions in "
                         f"[0, {shape[0]}) for {name}'s observations of shape {shape}")
    return tuple(int(i) for i in mask)


class ObservationMask(Env):
    """``env`` with observations ``float32[len(mask)]``: positions ``mask`` of
    its flat observations (``final_obs`` too); actions, rewards, episodes and
    time limit unchanged.

    Args:
      env: an :class:`~jaxtrainer.envs.Env` with observations of shape ``[size]``.
      mask: positions to keep, in the order given.
      name: the id reported in :attr:`name`; default ``"<env.name>[mask]"``.

    Raises:
      ValueError: what :func:`_check_mask` raises.
    """

    def __init__(self, env: Env, mask: Sequence[int], name: str | None = None) -> None:
        self.env = env
        self.mask = _check_mask(mask, env.observation_shape, env.name)
        self.name = name or f"{env.name}{list(self.mask)}"
        self.observation_shape = (len(self.mask),)
        self.observation_dtype = env.observation_dtype
        for attr in ("discrete", "num_actions", "action_size", "action_nvec", "action_low",
                     "action_high", "max_episode_steps"):
            setattr(self, attr, getattr(env, attr))
        self._index = jnp.asarray(self.mask, jnp.int32)

    @property
    def unwrapped(self) -> Env:
        """The environment without its masks: what videos draw (its states are this env's)."""
        return getattr(self.env, "unwrapped", self.env)

    def _keep(self, obs: jax.Array) -> jax.Array:
        return jnp.take(obs, self._index, axis=-1)

    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        obs, state = self.env.reset_env(key)
        return self._keep(obs), state

    def step_env(self, key: jax.Array, env_state: Any, action: Action):
        obs, env_state, reward, terminated, truncated, final_obs, *extra = self.env.step_env(
            key, env_state, action)
        return (self._keep(obs), env_state, reward, terminated, truncated, self._keep(final_obs),
                *extra)

    def __getattr__(self, name: str) -> Any:  # render helpers etc. of the wrapped env
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)
