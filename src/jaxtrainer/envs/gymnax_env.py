"""Adapter for gymnax (>= 1.0) environments."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer.envs.base import Action, Env, Observation
from jaxtrainer.runtime._deferred_import import deferred_imports

_GYMNAX_PLOTTING = ("matplotlib", "matplotlib.pyplot", "matplotlib.colors", "seaborn")
"""Modules gymnax's environment package imports at module level for ``render``
only; imported on first use instead (see :mod:`jaxtrainer.runtime._deferred_import`)."""

with deferred_imports(*_GYMNAX_PLOTTING):
    import gymnax  # noqa: F401  (the registry imports gymnax from here, deferred the same way)
    from gymnax.environments import spaces


class GymnaxEnv(Env):
    """A gymnax environment behind the :class:`~jaxtrainer.envs.Env` interface.

    gymnax 1.x ``Environment.step`` already auto-resets and returns ``terminated``
    and ``truncated`` (``state.time >= params.max_steps_in_episode``) separately,
    with ``info["final_observation"]``; this adapter passes them through.

    Args:
      env: a ``gymnax.environments.environment.Environment`` instance (a built-in
        from ``gymnax.make`` or your own subclass).
      params: its ``EnvParams``; ``env.default_params`` when ``None``.
      name: the id reported in :attr:`name`; ``env.name`` by default.

    Raises:
      TypeError: the action space is neither ``Discrete`` nor ``Box``.
    """

    def __init__(self, env: Any, params: Any = None, name: str | None = None) -> None:
        self.env = env
        self.params = env.default_params if params is None else params
        self.name = name or env.name
        obs = jax.eval_shape(lambda k: env.reset(k, self.params)[0], jax.random.key(0))
        self.observation_shape = tuple(obs.shape)
        self.observation_dtype = obs.dtype
        space = env.action_space(self.params)
        if isinstance(space, spaces.Discrete):
            self.discrete = True
            self.num_actions = int(space.n)
            self.action_size = 1
            self.action_low = self.action_high = None
        elif isinstance(space, spaces.Box):
            self.discrete = False
            self.num_actions = 0
            self.action_size = int(np.prod(space.shape))
            self.action_low = np.broadcast_to(
                np.asarray(space.low, np.float32), (self.action_size,)).copy()
            self.action_high = np.broadcast_to(
                np.asarray(space.high, np.float32), (self.action_size,)).copy()
        else:
            raise TypeError(
                f"{self.name}: action space {space!r} is not supported "
                "(expected gymnax Discrete or Box)")
        self.max_episode_steps = int(self.params.max_steps_in_episode)

    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        return self.env.reset(key, self.params)

    def step_env(self, key: jax.Array, env_state: Any, action: Action):
        if self.discrete:
            action = jnp.asarray(action, jnp.int32)
        else:
            action = jnp.asarray(action, float).reshape(self.action_size)  # the default float: float64 under x64, as gymnax's own env state
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, env_state, action, self.params)
        return obs, env_state, reward, terminated, truncated, info["final_observation"]
