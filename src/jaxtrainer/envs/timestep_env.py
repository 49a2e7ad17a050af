"""Adapter base for simulators whose state is a dm_env-style timestep (navix, XLand-MiniGrid).

Such a simulator's ``step(timestep, action)`` returns the next timestep with
``observation``, ``reward`` and a step type that tells a terminal state from a
time limit, and resets lazily on the step AFTER the last one. The
:class:`TimestepEnv` here resets eagerly instead, as the
:class:`~jaxtrainer.envs.Env` contract wants: on the step that ends an episode
it returns the next episode's first observation and keeps the reached one in
``final_obs``. The stored timestep is therefore never a last one, and the
simulator's lazy reset never fires.
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer.envs.base import Action, Env, Observation, auto_reset
from jaxtrainer.envs.families import flat_float32


class TimestepEnv(Env):
    """An :class:`~jaxtrainer.envs.Env` over a timestep-based simulator with discrete actions.

    Subclasses implement :meth:`reset_timestep`, :meth:`step_timestep` and
    :meth:`ended`; this class adds the eager auto-reset and the observation
    format.

    Args:
      name: the id reported in :attr:`name` (``"navix/Navix-Empty-5x5-v0"``).
      num_actions: number of discrete actions; actions are ``int32[]`` in
        ``[0, num_actions)``.
      max_episode_steps: the simulator's time limit in steps.
      flatten: ``True`` (default): observations are ``float32[size]``, the
        simulator's observation flattened; ``False``: its own shape and dtype
        (e.g. ``uint8[5, 5, 3]``), for a torso that reads the grid.
    """

    def __init__(self, name: str, num_actions: int, max_episode_steps: int,
                 flatten: bool = True) -> None:
        self.name = name
        self.flatten = bool(flatten)
        self.discrete = True
        self.num_actions = int(num_actions)
        self.action_size = 1
        self.action_low = self.action_high = None
        self.max_episode_steps = int(max_episode_steps)
        obs = jax.eval_shape(lambda k: self.reset_env(k)[0], jax.random.key(0))
        self.observation_shape = tuple(obs.shape)
        self.observation_dtype = obs.dtype

    # ---- to implement ----------------------------------------------------
    @abc.abstractmethod
    def reset_timestep(self, key: jax.Array) -> Any:
        """The simulator's first timestep of an episode. ``key``: typed PRNG key."""

    @abc.abstractmethod
    def step_timestep(self, timestep: Any, action: jax.Array) -> Any:
        """The simulator's next timestep; ``action``: ``int32[]`` (``int32[len(action_nvec)]``
        for a multi-discrete env)."""

    @abc.abstractmethod
    def ended(self, timestep: Any) -> tuple[jax.Array, jax.Array]:
        """``(terminated, truncated)``, ``bool[]`` each, of what :meth:`step_timestep` returned."""

    def timestep_of(self, env_state: Any) -> Any:
        """The timestep (``observation``, ``reward``) in this env's state; the state
        itself unless a subclass keeps more (jumanji: ``(state, timestep)``)."""
        return env_state

    # ---- the Env contract --------------------------------------------------
    def observe(self, env_state: Any) -> Observation:
        """A state's observation as the env reports it (see ``flatten``)."""
        observation = self.timestep_of(env_state).observation
        return flat_float32(observation) if self.flatten else observation

    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        timestep = self.reset_timestep(key)
        return self.observe(timestep), timestep

    def step_env(self, key: jax.Array, env_state: Any, action: Action):
        stepped = self.step_timestep(env_state, jnp.asarray(action, jnp.int32))
        terminated, truncated = self.ended(stepped)
        done = jnp.logical_or(terminated, truncated)
        timestep = auto_reset(done, self.reset_timestep(key), stepped)
        return (self.observe(timestep), timestep, self.timestep_of(stepped).reward, terminated,
                truncated, self.observe(stepped))
