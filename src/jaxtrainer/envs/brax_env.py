"""Adapter for environments with brax's functional API: brax's own
(``brax.envs.get_environment``) and MuJoCo Playground's (:mod:`jaxtrainer.envs.playground_env`).

brax is imported only when a ``brax/...`` environment is made: the import alone
takes seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.envs.base import Action, Env, EnvState, Observation, positive_steps

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


MODEL_DRAW = 0x6D
"""What :class:`BraxEnv` folds into an env's reset key to draw its randomised
model: the randomisation function gets ``key_data(fold_in(key, MODEL_DRAW))``."""

Randomization = Callable[..., tuple[Any, Any]]
"""A domain randomisation function as MuJoCo Playground's and brax's training
wrappers take it: ``randomization(model, rng=uint32[n, 2]) -> (models, in_axes)``,
``models`` the model with a leading ``[n]`` axis on the leaves ``in_axes``
marks ``0`` (one model per key), the others ``None`` (shared); e.g.
``mujoco_playground.registry.get_domain_randomizer(name)``."""


@struct.dataclass
class BraxState:
    """``state``: the simulator's ``State``, its zero-size arrays as :class:`ZeroSize`
    (:func:`_unpack` restores them); ``time``: ``int32[]`` steps (:meth:`Env.step`
    calls) in this episode; ``first``: with ``reset_mode="first_state"`` the
    state this slot's episodes start from (packed as ``state``), ``None`` (no
    leaves) with ``"exact"``; ``model``: with a ``randomization``, this env's
    randomised model leaves (a tuple of arrays, the leaves the function
    randomises, in the model's leaf order), drawn at its first reset and kept
    for every episode after it; ``None`` (no leaves) without."""

    state: Any
    time: jax.Array
    first: Any = None
    model: Any = None


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
      value_obs_key: the entry of a dict observation the critic sees instead
        (MuJoCo Playground's ``value_obs_key``, e.g. ``"privileged_state"``):
        sets :attr:`critic_observation_shape`, and actor-critic algorithms
        give their critic this entry and their actor ``observation_key``'s.
        ``None`` or ``observation_key``: the critic sees the observation.
      randomization: a domain randomisation function (:data:`Randomization`,
        e.g. ``mujoco_playground.registry.get_domain_randomizer(name)``): each
        env steps its own model, drawn at its first reset from that reset's key
        (the function gets ``key_data(fold_in(key, MODEL_DRAW))``, one key)
        and kept in its state (:attr:`BraxState.model`), so every episode of
        the env and a resumed run use it; an evaluation's fresh envs draw their
        own. ``None``: every env steps the env's model.
      reset_mode: one of :data:`RESET_MODES`: ``"first_state"`` (default;
        brax's training wrappers' auto-reset, no reset computed while stepping)
        or ``"exact"`` (a new random start for every episode, at the cost of a
        reset per env per step: measured on 2 CPU cores, the env alone runs
        5-14% slower, more with more envs; ``benchmarks/brax_env_reset.py``).

    Raises:
      ValueError: ``episode_length`` or ``action_repeat`` is not a positive
        int; an unknown ``reset_mode`` (listing the choices).
      TypeError: a dict observation with ``observation_key=None``, a
        ``value_obs_key`` with array observations, or a ``randomization`` that
        is not callable.
      KeyError: ``observation_key`` or ``value_obs_key`` is not in the dict
        observation (the message lists its keys).
      ValueError: a ``randomization`` whose ``in_axes`` has an axis other than
        ``0`` or ``None``.
    """

    def __init__(self, env: Any, episode_length: int = 1000, name: str = "brax", *,
                 action_repeat: int = 1, observation_key: str | None = None,
                 value_obs_key: str | None = None, randomization: Randomization | None = None,
                 reset_mode: str = "first_state") -> None:
        episode_length = arguments.positive_int("episode_length", episode_length, allow_none=False)
        self.reset_mode = arguments.one_of("reset_mode", reset_mode, RESET_MODES)
        self.action_repeat = arguments.positive_int("action_repeat", action_repeat, allow_none=False)
        if randomization is not None and not callable(randomization):
            raise TypeError(f"{name}: randomization={randomization!r}: expected a function "
                            "(model, rng) -> (models, in_axes)")
        self.env = env
        self.name = name
        self.observation_key = observation_key
        self.value_obs_key = value_obs_key
        self.randomization = randomization
        self._make_process_local()
        if randomization is not None:
            self._trace_randomization()
        raw = jax.eval_shape(lambda k: self._reset_state(k)[0].obs, jax.random.key(0))
        obs = self._observation(raw)
        self.observation_shape = tuple(obs.shape)
        self.observation_dtype = obs.dtype
        if value_obs_key is not None and value_obs_key != observation_key:
            if not isinstance(raw, Mapping):
                raise TypeError(f"{self.name}: value_obs_key={value_obs_key!r} needs dict "
                                f"observations; this env's is an array of shape {obs.shape}")
            self.critic_observation_shape = tuple(self._entry(raw, value_obs_key,
                                                              "value_obs_key").shape)
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

    # ---- domain randomisation -----------------------------------------------
    def _model(self) -> Any:
        """The model a randomisation function randomises: brax's ``env.sys``."""
        return self.env.unwrapped.sys

    _STEPPING_MODEL = "sys"
    """The attribute of the unwrapped env that holds the model it steps (brax's
    ``env.sys``; Playground's ``_mjx_model``)."""

    @contextlib.contextmanager
    def _stepping_model(self, model: Any) -> Iterator[None]:
        """While inside, the env steps ``model``: :attr:`_STEPPING_MODEL` swapped,
        as brax's ``DomainRandomizationVmapWrapper`` swaps ``env.sys`` (and
        Playground's ``BraxDomainRandomizationVmapWrapper`` its env's MJX model)."""
        env = self.env.unwrapped
        old = getattr(env, self._STEPPING_MODEL)
        try:
            setattr(env, self._STEPPING_MODEL, model)
            yield
        finally:
            setattr(env, self._STEPPING_MODEL, old)

    def _trace_randomization(self) -> None:
        """Which leaves of the model :attr:`randomization` randomises (its
        ``in_axes``, from tracing it once on a key)."""
        base = self._model()
        captured = {}

        def draw(rng):
            models, in_axes = self.randomization(base, rng=rng)
            captured["in_axes"] = in_axes
            return models

        jax.eval_shape(draw, jax.ShapeDtypeStruct((1, 2), jnp.uint32))
        axes, self._model_treedef = jax.tree.flatten(captured["in_axes"],
                                                     is_leaf=lambda x: x is None)
        bad = sorted({repr(a) for a in axes if a not in (None, 0)})
        if bad:
            raise ValueError(f"{self.name}: randomization's in_axes has axes {', '.join(bad)}; "
                             "expected 0 (one value per env) or None (shared)")
        self._randomized = tuple(i for i, a in enumerate(axes) if a == 0)

    def _draw_model(self, key: jax.Array) -> tuple[jax.Array, ...]:
        """This env's randomised model leaves (:attr:`BraxState.model`) for its
        reset ``key``."""
        rng = _raw_key(jax.random.fold_in(key, MODEL_DRAW))[None]
        models, _ = self.randomization(self._model(), rng=rng)
        leaves = self._model_treedef.flatten_up_to(models)
        return tuple(leaves[i][0] for i in self._randomized)

    @contextlib.contextmanager
    def _env_model(self, model: Any) -> Iterator[None]:
        """While inside, the env steps its model with the randomised leaves
        ``model`` (:attr:`BraxState.model`); nothing changes when ``None``."""
        if model is None:
            yield
            return
        leaves = self._model_treedef.flatten_up_to(self._model())
        for i, leaf in zip(self._randomized, model, strict=True):
            leaves[i] = leaf
        with self._stepping_model(self._model_treedef.unflatten(leaves)):
            yield

    def _reset_state(self, key: jax.Array, model: Any = None) -> tuple[Any, Any]:
        """``(env.reset(key), model)``: a fresh simulator state on this env's
        model ``model``, drawn from ``key`` when ``None`` with a randomisation."""
        if model is None and self.randomization is not None:
            model = self._draw_model(key)
        with self._env_model(model):
            return self.env.reset(_raw_key(key)), model

    def pipeline_state(self, state: BraxState) -> Any:
        """brax's physics state (``pipeline_state``) inside ``state``, an env state
        of this env (``EnvState.state``), with its zero-size arrays restored:
        what brax's viewer (``brax.io.html.render``) draws."""
        return _unpack(state).pipeline_state

    def _entry(self, obs: Mapping, key: str, name: str) -> jax.Array:
        """``obs[key]``, or KeyError naming ``name`` and the keys there are."""
        if key not in obs:
            raise KeyError(f"{self.name}: {name}={key!r} is not in the observation; its "
                           f"keys: {sorted(obs)}")
        return obs[key]

    def _observation(self, obs: Any) -> jax.Array:
        if not isinstance(obs, Mapping):
            return obs
        if self.observation_key is None:
            raise TypeError(f"{self.name}: dict observations are not supported (got keys "
                            f"{sorted(obs)}); pass observation_key= to pick one")
        return self._entry(obs, self.observation_key, "observation_key")

    def _critic_entry(self, obs: Any) -> jax.Array | None:
        """The critic's entry of a raw observation; ``None`` without one."""
        return None if self.critic_observation_shape is None else obs[self.value_obs_key]

    def critic_observation(self, state: EnvState) -> jax.Array:
        """The ``value_obs_key`` entry of ``state``'s observation (an :class:`EnvState`
        of one env or a batch): ``float32[..., *critic_observation_shape]``.

        Raises:
          NotImplementedError: no ``value_obs_key`` (the critic sees the observation).
        """
        if self.critic_observation_shape is None:
            return super().critic_observation(state)
        return self._critic_entry(state.env_state.state.obs)

    def reset(self, key: jax.Array) -> tuple[Observation, EnvState]:
        """:meth:`Env.reset`; called outside a trace (a notebook, a script), as one
        compiled program: the simulator's reset run op by op compiles each of its
        hundreds of small ops (MJX's forward pass) one at a time."""
        if isinstance(key, jax.core.Tracer):
            return super().reset(key)
        return self._eager_program("reset", super().reset)(key)

    def reset_batch(self, key: jax.Array, num_envs: int) -> tuple[Observation, EnvState]:
        """:meth:`Env.reset_batch`; outside a trace, one compiled program per
        ``num_envs`` (as :meth:`reset`)."""
        if isinstance(key, jax.core.Tracer):
            return super().reset_batch(key, num_envs)
        run = self._eager_program(("reset_batch", num_envs),
                                  lambda k: super(BraxEnv, self).reset_batch(k, num_envs))
        return run(key)

    def _eager_program(self, name: Any, fn: Callable) -> Callable:
        """``jax.jit(fn)``, made once per env and ``name``."""
        programs = self.__dict__.setdefault("_eager_programs", {})
        if name not in programs:
            programs[name] = jax.jit(fn)
        return programs[name]

    def reset_env(self, key: jax.Array) -> tuple[Observation, BraxState]:
        raw, model = self._reset_state(key)
        state = _pack(raw)
        first = state if self.reset_mode == "first_state" else None
        return self._observation(state.obs), BraxState(state, jnp.zeros((), jnp.int32), first,
                                                       model)

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
        with self._env_model(env_state.model):
            stepped, reward, terminated = self._simulate(_unpack(env_state.state),
                                                         jnp.asarray(action, jnp.float32))
        time = env_state.time + 1
        truncated = jnp.logical_and(time >= self.max_episode_steps, jnp.logical_not(terminated))
        done = jnp.logical_or(terminated, truncated)
        if self.reset_mode == "first_state":
            fresh = env_state.first
        else:
            fresh = _pack(self._reset_state(key, env_state.model)[0])

        def pick(new, old):
            return jnp.where(done, new, old).astype(jnp.result_type(new))

        state = BraxState(jax.tree.map(pick, fresh, _pack(stepped)),
                          jnp.where(done, 0, time).astype(jnp.int32), env_state.first,
                          env_state.model)
        out = (self._observation(state.state.obs), state, reward, terminated, truncated,
               self._observation(stepped.obs))
        if self.critic_observation_shape is None:
            return out
        return (*out, {}, self._critic_entry(stepped.obs))
