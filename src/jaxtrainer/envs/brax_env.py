"""Adapter for environments with brax's functional API: brax's own
(``brax.envs.get_environment``) and MuJoCo Playground's (:mod:`jaxtrainer.envs.playground_env`).

brax is imported only when a ``brax/...`` environment is made: the import alone
takes seconds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.envs.base import Action, Env, Observation, positive_steps

BRAX_ENV_NAMES = (
    "ant", "fast", "halfcheetah", "hopper", "humanoid", "humanoidstandup",
    "inverted_pendulum", "inverted_double_pendulum", "pusher", "reacher",
    "swimmer", "walker2d",
)
"""brax 0.14's registered environments, listed without importing brax."""

RESET_MODES = ("first_state", "exact")
"""How :class:`BraxEnv` starts the next episode of an env whose episode ended:

* ``first_state`` (default): the env's slot goes back to the state its first
  episode started from, kept in the env state, as brax's training
  ``AutoResetWrapper`` and MuJoCo Playground's ``BraxAutoResetWrapper`` do:
  no reset is computed during a rollout, and every episode of a slot starts
  from that slot's one random start state (slots differ from each other).
* ``exact``: a fresh ``env.reset`` with the step's key, so every episode starts
  from a new random state; the reset is computed for every env at every step
  (under ``vmap`` both sides of the choice run) and kept where an episode ended.
"""


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class ZeroSize:
    """A zero-size array held as its shape and dtype, not as a pytree leaf.

    MJX's ``Data`` has zero-size arrays (e.g. ``act`` for a model without
    activation states), which orbax refuses to checkpoint ("Cannot save arrays
    with zero size"); :class:`BraxState` keeps them as these instead.
    """

    shape: tuple[int, ...]
    dtype: np.dtype


def _pack(tree: Any) -> Any:
    """``tree`` with its zero-size arrays as :class:`ZeroSize`."""
    return jax.tree.map(
        lambda x: ZeroSize(tuple(x.shape), np.dtype(x.dtype)) if getattr(x, "size", 1) == 0 else x,
        tree)


def _unpack(tree: Any) -> Any:
    """Inverse of :func:`_pack`: the :class:`ZeroSize` entries as zero-size arrays."""
    return jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype) if isinstance(x, ZeroSize) else x,
                        tree, is_leaf=lambda x: isinstance(x, ZeroSize))


@struct.dataclass
class BraxState:
    """``state``: the simulator's ``State``, its zero-size arrays as :class:`ZeroSize`
    (:func:`_unpack` restores them); ``time``: ``int32[]`` steps (:meth:`Env.step`
    calls) in this episode; ``first``: with ``reset_mode="first_state"`` the
    state this slot's episodes start from (packed as ``state``), ``None`` (no
    leaves) with ``"exact"``."""

    state: Any
    time: jax.Array
    first: Any = None


def _raw_key(key: jax.Array) -> jax.Array:
    """brax and MuJoCo Playground envs are written for raw ``uint32[2]`` keys."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


def make_leaves_local(tree: Any, fresh: Callable[[Any], Any], what: str) -> Any:
    """``tree`` with its leaves that another process holds replaced by the same
    leaves of ``fresh(device)``, a copy made on this process's first device.

    ``mujoco.mjx.put_model`` (which brax's ``mjcf.load`` and MuJoCo Playground's
    envs call) puts a model's arrays on ``jax.devices()[0]``, a device of process
    0: in a multi-process run every other process would close over arrays it
    cannot address. Those leaves are the model as loaded (later edits make new,
    local arrays), so ``fresh`` rebuilds them from the ``mujoco.MjModel``.
    Single-process runs (and trees without remote leaves) are returned as is.

    Raises:
      RuntimeError: a remote leaf that ``fresh``'s tree lacks (named with ``what``).
    """
    if tree is None or jax.process_count() == 1:
        return tree

    def remote(x):
        return isinstance(x, jax.Array) and not x.is_fully_addressable

    if not any(remote(x) for x in jax.tree.leaves(tree)):
        return tree
    local = {jax.tree_util.keystr(p): x
             for p, x in jax.tree_util.tree_leaves_with_path(fresh(jax.local_devices()[0]))}

    def place(path, x):
        if not remote(x):
            return x
        key = jax.tree_util.keystr(path)
        if key not in local:
            raise RuntimeError(f"{what} leaf {key} lies on a device of another "
                               "process and is not part of the mjx model to rebuild it from")
        return local[key]

    return jax.tree_util.tree_map_with_path(place, tree)


class BraxEnv(Env):
    """An environment with brax's functional API behind the
    :class:`~jaxtrainer.envs.Env` interface.

    The raw env (no brax or Playground wrappers) is stepped directly; this
    adapter adds its own time limit, action repeat and auto-reset (see
    ``reset_mode``): ``terminated`` is the env's ``done`` and ``truncated`` is set when
    :attr:`max_episode_steps` steps pass without termination. Actions are
    ``float32[action_size]`` in ``[-1, 1]`` (brax rescales them to the actuator
    limits; Playground's envs use them as controls in their ``[-1, 1]`` ranges).

    Args:
      env: a ``brax.envs.Env`` (e.g. ``brax.envs.get_environment("ant")``), or
        any object with its API: ``reset(rng) -> State`` and ``step(state,
        action) -> State``, ``State`` a flax dataclass with ``obs``, ``reward``
        and ``done``, and an ``action_size`` (MuJoCo Playground's ``MjxEnv``:
        :class:`~jaxtrainer.envs.PlaygroundEnv`).
      episode_length: time limit in simulator steps (``env.step`` calls), as
        brax's ``EpisodeWrapper`` counts it (brax's training default: 1000).
      name: the id reported in :attr:`name`.
      action_repeat: ``env.step`` calls per :meth:`Env.step`, with the same
        action, rewards summed (brax's ``EpisodeWrapper``). A termination in
        between ends the step: the state is held and later rewards are not
        counted. :attr:`max_episode_steps` is ``ceil(episode_length /
        action_repeat)`` (brax's wrapper truncates once the simulator steps
        reach ``episode_length``).
      observation_key: for envs whose observation is a dict, the entry used as
        the observation (Playground's locomotion and manipulation envs put the
        policy's in ``"state"``). ``None``: the observation must be an array.
      reset_mode: one of :data:`RESET_MODES`: ``"first_state"`` (default;
        brax's training wrappers' auto-reset, no reset computed while stepping)
        or ``"exact"`` (a new random start for every episode, at the cost of a
        reset per env per step: measured on 2 CPU cores, the env alone runs
        5-14% slower, more with more envs; ``benchmarks/brax_env_reset.py``).

    Raises:
      ValueError: ``episode_length`` or ``action_repeat`` is not a positive
        int; an unknown ``reset_mode`` (listing the choices).
      TypeError: a dict observation with ``observation_key=None``.
      KeyError: ``observation_key`` is not in the dict observation (the message
        lists its keys).
    """

    def __init__(self, env: Any, episode_length: int = 1000, name: str = "brax", *,
                 action_repeat: int = 1, observation_key: str | None = None,
                 reset_mode: str = "first_state") -> None:
        episode_length = arguments.positive_int("episode_length", episode_length, allow_none=False)
        self.reset_mode = arguments.one_of("reset_mode", reset_mode, RESET_MODES)
        self.action_repeat = arguments.positive_int("action_repeat", action_repeat, allow_none=False)
        self.env = env
        self.name = name
        self.observation_key = observation_key
        self._make_process_local()
        obs = jax.eval_shape(lambda k: self._observation(env.reset(_raw_key(k)).obs),
                             jax.random.key(0))
        self.observation_shape = tuple(obs.shape)
        self.observation_dtype = obs.dtype
        self.discrete = False
        self.num_actions = 0
        self.action_size = int(env.action_size)
        self.action_low = -np.ones(self.action_size, np.float32)
        self.action_high = np.ones(self.action_size, np.float32)
        self.episode_length = episode_length
        self.max_episode_steps = math.ceil(episode_length / self.action_repeat)

    def _make_process_local(self) -> None:
        """Rebuild on this process the model arrays that another process holds
        (brax's ``env.sys``); see :func:`make_leaves_local`."""
        sys = getattr(self.env, "sys", None)
        if sys is not None and jax.process_count() > 1:
            from mujoco import mjx

            self.env.sys = make_leaves_local(
                sys, lambda device: mjx.put_model(sys.mj_model, device=device), "brax System")

    def pipeline_state(self, state: BraxState) -> Any:
        """brax's physics state (``pipeline_state``) inside ``state``, an env state
        of this env (``EnvState.state``), with its zero-size arrays restored:
        what brax's viewer (``brax.io.html.render``) draws."""
        return _unpack(state).pipeline_state

    def _observation(self, obs: Any) -> jax.Array:
        if not isinstance(obs, Mapping):
            return obs
        if self.observation_key is None:
            raise TypeError(f"{self.name}: dict observations are not supported (got keys "
                            f"{sorted(obs)}); pass observation_key= to pick one")
        if self.observation_key not in obs:
            raise KeyError(f"{self.name}: observation_key={self.observation_key!r} is not "
                           f"in the observation; its keys: {sorted(obs)}")
        return obs[self.observation_key]

    def reset_env(self, key: jax.Array) -> tuple[Observation, BraxState]:
        state = _pack(self.env.reset(_raw_key(key)))
        first = state if self.reset_mode == "first_state" else None
        return self._observation(state.obs), BraxState(state, jnp.zeros((), jnp.int32), first)

    def _simulate(self, state: Any, action: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
        """``action_repeat`` env steps: ``(state, summed reward, terminated)``."""
        if self.action_repeat == 1:
            stepped = self.env.step(state, action)
            return stepped, stepped.reward, stepped.done > 0

        def sub_step(carry, _):
            state, reward, ended = carry
            stepped = self.env.step(state, action)
            held = jax.tree.map(lambda new, old: jnp.where(ended, old, new).astype(old.dtype),
                                stepped, state)
            reward = reward + jnp.where(ended, 0.0, stepped.reward)
            return (held, reward, jnp.logical_or(ended, stepped.done > 0)), None

        start = (state, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.bool_))
        (state, reward, ended), _ = jax.lax.scan(sub_step, start, None, self.action_repeat)
        return state, reward, ended

    def set_time_limit(self, max_episode_steps: int) -> None:
        """Truncate episodes after ``max_episode_steps`` control steps (replaces
        the limit set from ``episode_length``; the env's own step counter does it).

        Raises:
          ValueError: not a positive int (naming it).
        """
        self.time_limit = self.max_episode_steps = positive_steps(max_episode_steps)

    def step_env(self, key: jax.Array, env_state: BraxState, action: Action):
        stepped, reward, terminated = self._simulate(_unpack(env_state.state),
                                                     jnp.asarray(action, jnp.float32))
        time = env_state.time + 1
        truncated = jnp.logical_and(time >= self.max_episode_steps, jnp.logical_not(terminated))
        done = jnp.logical_or(terminated, truncated)
        if self.reset_mode == "first_state":
            fresh = env_state.first
        else:
            fresh = self.reset_env(key)[1].state

        def pick(new, old):
            return jnp.where(done, new, old).astype(jnp.result_type(new))

        state = BraxState(jax.tree.map(pick, fresh, _pack(stepped)),
                          jnp.where(done, 0, time).astype(jnp.int32), env_state.first)
        return (self._observation(state.state.obs), state, reward, terminated, truncated,
                self._observation(stepped.obs))
