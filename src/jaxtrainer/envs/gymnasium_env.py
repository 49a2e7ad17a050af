"""Host environments: ``make("gymnasium/<id>")``, a Gymnasium vector env stepped from
inside the compiled program.

Gymnasium (PyPI ``gymnasium``, tested with 1.3.0) runs in Python on the host. The
compiled training program reaches it through
:func:`jax.experimental.io_callback` (``ordered=True``): each batched reset makes
a synchronous vector env (``gymnasium.make_vec``, Gymnasium's own same-step
auto-reset) of that many copies, seeded from the reset's key, and each batched
step sends the actions to the host and brings back observations, rewards,
``terminated``, ``truncated`` and the final observations.

Limits:
  * Strategies: ``single``, ``pmap`` and ``shard_map`` (tested on 4 CPU devices):
    each device's batched reset makes its own vector env of its share of the
    envs, and its steps drive that one. ``multi_node``: each process holds its
    own devices' pools (not tested). Refused with a :class:`ValueError` when the
    program is traced, before anything compiles: a vmap of whole env batches,
    i.e. vmapped population members and sweeps over seeds or hyperparameters
    (an ordered host callback cannot be vmapped).
  * The env is only ever stepped as a batch (``jax.vmap`` of :meth:`Env.step`,
    or :meth:`Env.reset_batch` / :meth:`Env.step_batch`): one host call per
    batched step, never one per env. :meth:`Env.reset_env` and
    :meth:`Env.step_env` are not available.
  * Pools live in the process: every batched reset makes a new vector env
    (training one per device, each evaluation one); they close at exit. They
    are not checkpointed: a resumed run starts fresh envs (the episodes in
    flight at the checkpoint restart; parameters, optimizer state, counters and
    replay buffers continue exactly, :meth:`jaxtrainer.Module.resumed_state`).
    Stepping an env state restored in another process by other means raises
    an error naming this.
  * Cost per step: one device-to-host round trip plus Gymnasium's Python step
    of every env in turn (CartPole-v1: see the README's table of families).
  * Reproducible: a rerun with the same key gives the same episodes where the
    simulator is deterministic given its seed (classic control, MuJoCo): each
    pool is seeded from its reset's key.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from jaxtrainer.envs.base import (
    Action,
    Env,
    EnvState,
    Observation,
    StepInfo,
    positive_steps,
    with_statistics,
)
from jaxtrainer.envs.families import import_family, unknown_name

_GYMNASIUM_PREFIX = "gymnasium/"

_POOLS: dict[int, Any] = {}
_HANDLES = itertools.count(1)


def register_pool(pool: Any) -> np.ndarray:
    """Keep a host pool in this process: its handle, ``int32[]``, what env states hold."""
    handle = next(_HANDLES)
    _POOLS[handle] = pool
    return np.int32(handle)


def pool_of(handle: np.ndarray, family: str) -> Any:
    """The pool of a handle (any shape; its first entry is read).

    Raises:
      RuntimeError: no pool of this process has it (e.g. an env state restored
        from a checkpoint written by another process).
    """
    pool = _POOLS.get(int(np.ravel(handle)[0]))
    if pool is None:
        raise RuntimeError(f"this {family} env state belongs to no vector env of this process "
                           "(host env pools cannot be checkpointed): reset the envs "
                           "(start training anew) instead of resuming their state")
    return pool


def _new_pool(env_id: str, kwargs: dict[str, Any], seed: np.ndarray, num_envs: int):
    gym = import_family("gymnasium", "gymnasium", "gymnasium")
    pool = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
                        **kwargs)
    obs, _ = pool.reset(seed=int(seed))
    pool.action_space.seed(int(seed))
    return register_pool(pool), np.asarray(obs, np.float32)


def _step_pool(handle: np.ndarray, action: np.ndarray):
    pool = pool_of(handle, "gymnasium")
    obs, reward, terminated, truncated, info = pool.step(np.asarray(action))
    final = np.array(obs, copy=True)
    for i in np.flatnonzero(info.get("_final_obs", np.zeros(len(obs), bool))):
        final[i] = info["final_obs"][i]
    return (np.asarray(obs, np.float32), np.asarray(reward, np.float32),
            np.asarray(terminated, np.bool_), np.asarray(truncated, np.bool_),
            np.asarray(final, np.float32))


def _image_layout(shape: tuple[int, ...]) -> str:
    """The layout of a host library's image observations of ``shape``:
    ``"channels_first"`` for a 3-d shape whose first axis is shorter than its
    last (EnvPool's Atari ``[4, 84, 84]``, a ``FrameStackObservation`` of grey
    frames), else ``"channels_last"`` (``[210, 160, 3]``, ``[84, 84, 4]``)."""
    return "channels_first" if len(shape) == 3 and shape[0] < shape[-1] else "channels_last"


class GymnasiumEnv(Env):
    """A Gymnasium env id as a host :class:`~jaxtrainer.envs.Env` (see the module's limits).

    Observations: ``float32[*obs_shape]`` (Gymnasium's ``Box`` observation cast;
    CartPole-v1: ``float32[4]``). Actions: ``int32[]`` in ``[0, n)`` for
    ``Discrete(n)``; ``int32[k]`` for a ``MultiDiscrete`` of ``k`` components,
    component ``i`` in ``[0, nvec[i])`` (:attr:`~jaxtrainer.envs.Env.action_nvec`);
    a ``Discrete`` or ``MultiDiscrete`` space's ``start`` is added on the way to
    the host (``Discrete(3, start=-1)``: the agent's ``0, 1, 2`` reach the env as
    ``-1, 0, 1``); ``float32[action_size]`` for ``Box``, whose bounds are
    :attr:`action_low` / :attr:`action_high` (the space's ``low`` and ``high``,
    flattened; algorithms clip or scale their actions to them). The time limit is
    ``max_episode_steps`` when given, else the id's registered one (Gymnasium's
    ``TimeLimit``: ``truncated``); the env's own ends are ``terminated``.

    Image observations (3-d ``Box``) set :attr:`observation_layout` by
    :func:`_image_layout`, so the CNN torsos read ``[C, H, W]`` frames the right way.

    A host env's simulators live in this process (:attr:`host` is true): a
    resumed run starts fresh envs, see :meth:`jaxtrainer.Module.resumed_state`.

    Args:
      env_id: a registered Gymnasium id (``"CartPole-v1"``).
      name: the id reported in :attr:`name`.
      **kwargs: passed to ``gymnasium.make_vec`` for each copy.

    Raises:
      TypeError: an observation space other than ``Box`` or an action space other
        than ``Discrete``, a one-axis ``MultiDiscrete`` or ``Box``.
    """

    host = True

    def __init__(self, env_id: str, name: str, **kwargs: Any) -> None:
        gym = import_family("gymnasium", "gymnasium", "gymnasium")
        probe = gym.make(env_id, **kwargs)
        self.env_id, self.kwargs, self.name = env_id, kwargs, name
        obs_space, space = probe.observation_space, probe.action_space
        probe.close()
        self.set_spaces(obs_space, space)
        spec = gym.spec(env_id)
        self.max_episode_steps = int(kwargs.get("max_episode_steps") or spec.max_episode_steps or 0)
        self.batch_through_host()

    def set_spaces(self, obs_space: Any, space: Any) -> None:
        """The spec attributes from Gymnasium spaces (see the class's observations
        and actions).

        Raises:
          TypeError: an observation space other than ``Box`` or an action space
            other than ``Discrete``, a one-axis ``MultiDiscrete`` or ``Box``.
        """
        gym = import_family("gymnasium", "gymnasium", "gymnasium")
        name = self.name
        if not isinstance(obs_space, gym.spaces.Box):
            raise TypeError(f"{name}: observation space {obs_space} is not supported (Box only)")
        self.observation_shape, self.observation_dtype = tuple(obs_space.shape), jnp.float32
        self.observation_layout = _image_layout(self.observation_shape)
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.action_start = None
        if self.discrete:
            self.num_actions, self.action_size = int(space.n), 1
            self.action_low = self.action_high = None
            if int(space.start) != 0:
                self.action_start = np.int32(space.start)
        elif isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
            self.set_multi_discrete(space.nvec)
            if np.any(space.start != 0):
                self.action_start = np.asarray(space.start, np.int32)
        elif isinstance(space, gym.spaces.Box):
            self.num_actions, self.action_size = 0, int(np.prod(space.shape))
            self.action_low = np.asarray(space.low, np.float32).reshape(-1)
            self.action_high = np.asarray(space.high, np.float32).reshape(-1)
        else:
            raise TypeError(f"{name}: action space {space} is not supported (Discrete, "
                            "MultiDiscrete of one axis, or Box)")

    def batch_through_host(self) -> None:
        """Route :meth:`reset` and :meth:`step` (and their vmaps) to the host pools."""
        self.reset = jax.custom_batching.custom_vmap(self._reset_one)
        self.reset.def_vmap(self._reset_rule)
        self.step = jax.custom_batching.custom_vmap(self._step_one)
        self.step.def_vmap(self._step_rule)

    def set_time_limit(self, max_episode_steps: int) -> None:
        """Truncate episodes after ``max_episode_steps`` steps: passed to the
        host library for every pool made from now on (Gymnasium's ``TimeLimit``,
        EnvPool's ``max_episode_steps``), replacing the registered limit.

        Raises:
          ValueError: not a positive int (naming it).
        """
        limit = positive_steps(max_episode_steps)
        self.kwargs = {**self.kwargs, "max_episode_steps": limit}
        self.time_limit = self.max_episode_steps = limit

    # ---- host calls ------------------------------------------------------
    def new_pool(self, seed: np.ndarray, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
        """On the host: a pool of ``num_envs`` copies seeded with ``seed`` (``int32[]``),
        reset: ``(handle int32[], obs float32[num_envs, *observation_shape])``."""
        return _new_pool(self.env_id, self.kwargs, seed, num_envs)

    def step_pool(self, handle: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, ...]:
        """On the host: one same-step auto-resetting step of the pool of ``handle``:
        ``(obs, reward, terminated, truncated, final_obs)``, each ``[num_envs, ...]``
        (``float32``, ``float32``, ``bool``, ``bool``, ``float32``)."""
        return _step_pool(handle, action)

    def _host_reset(self, key: jax.Array, num_envs: int) -> tuple[jax.Array, jax.Array]:
        seed = jax.random.randint(key, (), 0, np.iinfo(np.int32).max)
        shapes = (jax.ShapeDtypeStruct((), jnp.int32),
                  jax.ShapeDtypeStruct((num_envs, *self.observation_shape), jnp.float32))
        return self._call(lambda s: self.new_pool(s, num_envs), shapes, seed)

    def _host_step(self, handle: jax.Array, action: jax.Array):
        n = action.shape[0]
        obs = jax.ShapeDtypeStruct((n, *self.observation_shape), jnp.float32)
        shapes = (obs, jax.ShapeDtypeStruct((n,), jnp.float32),
                  jax.ShapeDtypeStruct((n,), jnp.bool_), jax.ShapeDtypeStruct((n,), jnp.bool_), obs)
        return self._call(self.step_pool, shapes, handle, action)

    def _call(self, callback, shapes, *args):
        """``io_callback(..., ordered=True)``, or a clear error where it cannot run."""
        try:
            return io_callback(callback, shapes, *args, ordered=True)
        except ValueError as e:
            if "vmap" not in str(e):
                raise
            raise ValueError(
                f"{self.name} is a host environment: it cannot run under a vmap of whole "
                "env batches (vmapped population members, sweeps over seeds or "
                "hyperparameters); train one run per process with the single, pmap or "
                "shard_map strategy") from None

    def _action(self, action: Action) -> jax.Array:
        """A batch of actions as the host pool takes them: a ``Discrete(n,
        start=s)`` gets ``s`` added (the host gets ``s..s+n-1``), a
        ``MultiDiscrete`` with a ``start`` gets it added (component ``i`` in
        ``[start[i], start[i] + nvec[i])``)."""
        if not self.discrete:
            return jnp.asarray(action, jnp.float32).reshape(*action.shape[:1], self.action_size)
        action = jnp.asarray(action, jnp.int32)
        return action if self.action_start is None else action + self.action_start

    # ---- batched reset and step (custom_vmap rules) ----------------------
    def _reset_rule(self, axis_size, in_batched, key):
        handle, obs = self._host_reset(key[0], axis_size)
        state = EnvState(jnp.full((axis_size,), handle), jnp.zeros((axis_size,), jnp.float32),
                         jnp.zeros((axis_size,), jnp.int32))
        return (obs, state), (True, EnvState(True, True, True))

    def _step_rule(self, axis_size, in_batched, key, state, action):
        if not in_batched[1].env_state:
            raise ValueError(f"{self.name}: a host env's state must be batched")
        action = self._action(jnp.broadcast_to(action, (axis_size, *self.action_shape)))
        obs, reward, terminated, truncated, final = self._host_step(state.env_state, action)
        out = jax.vmap(with_statistics)(state, state.env_state, obs, reward, terminated,
                                        truncated, final)
        return out, jax.tree.map(lambda _: True, out)

    def _reset_one(self, key: jax.Array) -> tuple[Observation, EnvState]:
        obs, state = self._reset_rule(1, (True,), key[None])[0]
        return obs[0], jax.tree.map(lambda x: x[0], state)

    def _step_one(self, key, state, action) -> tuple[Observation, EnvState, StepInfo]:
        batched = jax.tree.map(lambda x: x[None], (key, state, action))
        out = self._step_rule(1, (True, EnvState(True, True, True), True), *batched)[0]
        return jax.tree.map(lambda x: x[0], out)

    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        raise NotImplementedError("host envs reset through reset/reset_batch")

    def step_env(self, key: jax.Array, env_state: Any, action: Action):
        raise NotImplementedError("host envs step through step/step_batch")


def make_gymnasium(env_id: str, **kwargs: Any) -> GymnasiumEnv:
    """``gymnasium/<id>`` as a :class:`GymnasiumEnv`.

    Raises:
      ImportError: gymnasium is not installed (one line naming the extra).
      ValueError: ``env_id`` is not registered (the message gives the closest id).
    """
    gym = import_family("gymnasium", "gymnasium", "gymnasium")
    if env_id not in gym.registry:
        raise unknown_name(env_id, "gymnasium", list(gym.registry))
    return GymnasiumEnv(env_id, _GYMNASIUM_PREFIX + env_id, **kwargs)
