"""Adapter for brax environments (``brax.envs.get_environment``).

brax is imported only when a ``brax/...`` environment is made: the import alone
takes seconds.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer.envs.base import Action, Env, Observation

BRAX_ENV_NAMES = (
    "ant", "fast", "halfcheetah", "hopper", "humanoid", "humanoidstandup",
    "inverted_pendulum", "inverted_double_pendulum", "pusher", "reacher",
    "swimmer", "walker2d",
)
"""brax 0.14's registered environments, listed without importing brax."""


@struct.dataclass
class BraxState:
    """``state``: the brax ``State``; ``time``: ``int32[]`` steps in this episode."""

    state: Any
    time: jax.Array


def _raw_key(key: jax.Array) -> jax.Array:
    """brax envs are written for raw ``uint32[2]`` keys."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


def _process_local_system(env: Any) -> None:
    """Put the arrays of ``env.sys`` that another process holds on this process.

    ``mujoco.mjx.put_model`` (which brax's ``mjcf.load`` calls) puts the model's
    arrays on ``jax.devices()[0]``, a device of process 0: in a multi-process run
    every other process would close over arrays it cannot address. Those leaves
    are the model as loaded (brax's later edits make new, local arrays), so they
    are made again from ``sys.mj_model`` on this process's first device.
    """
    sys = getattr(env, "sys", None)
    if sys is None or jax.process_count() == 1:
        return

    def remote(x):
        return isinstance(x, jax.Array) and not x.is_fully_addressable

    if not any(remote(x) for x in jax.tree.leaves(sys)):
        return
    from mujoco import mjx

    fresh = mjx.put_model(sys.mj_model, device=jax.local_devices()[0])
    local = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(fresh)}

    def place(path, x):
        if not remote(x):
            return x
        key = jax.tree_util.keystr(path)
        if key not in local:
            raise RuntimeError(f"brax System leaf sys{key} lies on a device of another "
                               "process and is not part of the mjx model to rebuild it from")
        return local[key]

    env.sys = jax.tree_util.tree_map_with_path(place, sys)


class BraxEnv(Env):
    """A brax environment behind the :class:`~jaxtrainer.envs.Env` interface.

    The raw brax env (no brax wrappers) is stepped directly; this adapter adds
    its own time limit and auto-reset: ``terminated`` is brax's ``done`` and
    ``truncated`` is set when ``episode_length`` steps pass without termination.
    Actions are ``float32[action_size]`` in ``[-1, 1]`` (brax rescales them to the
    actuator limits).

    Args:
      env: a ``brax.envs.Env`` (e.g. ``brax.envs.get_environment("ant")``).
      episode_length: time limit in env steps (brax's training default: 1000).
      name: the id reported in :attr:`name`.
    """

    def __init__(self, env: Any, episode_length: int = 1000, name: str = "brax") -> None:
        if episode_length < 1:
            raise ValueError(f"episode_length={episode_length}: expected a positive int")
        _process_local_system(env)
        self.env = env
        self.name = name
        obs = jax.eval_shape(lambda k: env.reset(_raw_key(k)).obs, jax.random.key(0))
        if not hasattr(obs, "shape"):
            raise TypeError(f"{name}: dict observations are not supported (got {obs})")
        self.observation_shape = tuple(obs.shape)
        self.observation_dtype = obs.dtype
        self.discrete = False
        self.num_actions = 0
        self.action_size = int(env.action_size)
        self.action_low = -np.ones(self.action_size, np.float32)
        self.action_high = np.ones(self.action_size, np.float32)
        self.max_episode_steps = int(episode_length)

    def reset_env(self, key: jax.Array) -> tuple[Observation, BraxState]:
        state = self.env.reset(_raw_key(key))
        return state.obs, BraxState(state, jnp.zeros((), jnp.int32))

    def step_env(self, key: jax.Array, env_state: BraxState, action: Action):
        stepped = self.env.step(env_state.state, jnp.asarray(action, jnp.float32))
        time = env_state.time + 1
        terminated = stepped.done > 0
        truncated = jnp.logical_and(time >= self.max_episode_steps, jnp.logical_not(terminated))
        done = jnp.logical_or(terminated, truncated)
        _, fresh = self.reset_env(key)
        after = BraxState(stepped, time)

        def pick(new, old):
            return jnp.where(done, new, old).astype(jnp.result_type(new))

        state = jax.tree.map(pick, fresh, after)
        return state.state.obs, state, stepped.reward, terminated, truncated, stepped.obs
