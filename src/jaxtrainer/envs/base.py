"""The environment interface: one functional API over gymnax, brax and your own.

An :class:`Env` is a plain Python object (not a pytree) holding only static
configuration; all dynamic data lives in the :class:`EnvState` pytree it returns.
It describes ONE environment; :meth:`Env.reset_batch` and :meth:`Env.step_batch`
``vmap`` it over a batch.

Every Env:
  * auto-resets: the ``obs`` returned by :meth:`Env.step` after an episode ends is
    the first observation of the next episode, and the observation the ended
    episode reached is in :attr:`StepInfo.final_obs`, so value targets can
    bootstrap on a time limit (truncation is not termination);
  * keeps ``terminated`` (a terminal state: no bootstrap) apart from ``truncated``
    (a time limit: bootstrap from ``final_obs``);
  * tracks episode statistics: :attr:`StepInfo.episode_return` and
    :attr:`StepInfo.episode_length` are the running totals of the current episode
    including this step, so where :attr:`StepInfo.done` is set they are the
    completed episode's. Report them with
    ``Mean.of(info.episode_return, mask=info.done)``, which counts completed
    episodes only and reports nothing when none completed.

To add an environment, subclass :class:`Env`, set the spec attributes and
implement :meth:`Env.reset_env` and :meth:`Env.step_env` (the raw, auto-resetting
dynamics); the base class adds the episode statistics.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer.distributed._axis import without_vma_check
from jaxtrainer.envs import evaluation

Observation = Any
Action = jax.Array


@struct.dataclass
class EnvState:
    """State of one environment (or of a batch, with a leading axis on every leaf).

    Attributes:
      env_state: the wrapped simulator's state (gymnax ``EnvState``, brax ``State``...).
      episode_return: ``float32[]``, undiscounted return of the current episode so far.
      episode_length: ``int32[]``, steps taken in the current episode so far.
    """

    env_state: Any
    episode_return: jax.Array
    episode_length: jax.Array


@struct.dataclass
class StepInfo:
    """What one :meth:`Env.step` reports besides the next observation and state.

    Shapes are for one environment; batched calls add a leading ``[num_envs]`` axis.

    Attributes:
      reward: ``float32[]``, reward of this transition.
      terminated: ``bool[]``, the episode reached a terminal state; the value of
        ``final_obs`` is 0 by definition.
      truncated: ``bool[]``, the episode was cut by a time limit without
        terminating; bootstrap from ``final_obs``. Never set together with
        ``terminated``.
      final_obs: the observation this transition reached, before any auto-reset
        (equal to the returned ``obs`` when the episode goes on).
      episode_return: ``float32[]``, return of the current episode including this
        step; the completed episode's return where :attr:`done`.
      episode_length: ``int32[]``, length of the current episode including this step.
      extra_statistics: further named ``float32[]`` statistics of the current
        episode including this step (the completed episode's where :attr:`done`),
        e.g. ``{"achievements/collect_wood": 1.0}`` for Craftax; reported over
        completed episodes as ``train/<name>`` by
        :func:`~jaxtrainer.envs.evaluation.episode_metrics`. Keyword-only; empty
        (no leaves) for envs that have none, which is most.
      final_critic_obs: for an env whose critic has an observation of its own
        (:attr:`Env.critic_observation_shape`, e.g. a MuJoCo Playground env's
        ``privileged_state``), the critic's observation of the state this
        transition reached, before any auto-reset (``float32[*critic_observation_shape]``);
        keyword-only, ``None`` (no leaves) for every other env.
    """

    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: Observation
    episode_return: jax.Array
    episode_length: jax.Array
    extra_statistics: dict[str, jax.Array] = struct.field(default_factory=dict, kw_only=True)
    final_critic_obs: Observation = struct.field(default=None, kw_only=True)

    @property
    def done(self) -> jax.Array:
        """``bool[]``: the episode ended with this step (terminated or truncated)."""
        return jnp.logical_or(self.terminated, self.truncated)


def with_statistics(state: EnvState, env_state: Any, obs: Observation, reward: jax.Array,
                    terminated: jax.Array, truncated: jax.Array, final_obs: Observation,
                    extra_statistics: dict[str, jax.Array] | None = None,
                    final_critic_obs: Observation = None,
                    ) -> tuple[Observation, EnvState, StepInfo]:
    """One auto-reset transition of one env with its episode statistics: what
    :meth:`Env.step` returns, from the simulator's outputs.

    Args:
      state: the env's :class:`EnvState` before the step.
      env_state: the simulator's state after it (already reset where the episode ended).
      obs: the observation after it (the next episode's first where it ended).
      reward: scalar reward (cast to ``float32[]``).
      terminated, truncated: scalar flags; ``truncated`` is dropped where ``terminated``.
      final_obs: the observation reached before any reset.
      extra_statistics: :attr:`StepInfo.extra_statistics` (cast to ``float32[]``
        each); ``None``: none.
      final_critic_obs: :attr:`StepInfo.final_critic_obs`; ``None``: none.
    """
    reward = jnp.asarray(reward, jnp.float32).reshape(())
    terminated = jnp.asarray(terminated, jnp.bool_).reshape(())
    truncated = jnp.logical_and(jnp.asarray(truncated, jnp.bool_).reshape(()),
                                jnp.logical_not(terminated))
    done = jnp.logical_or(terminated, truncated)
    episode_return = state.episode_return + reward
    episode_length = state.episode_length + 1
    extra = {k: jnp.asarray(v, jnp.float32).reshape(()) for k, v in (extra_statistics or {}).items()}
    info = StepInfo(reward, terminated, truncated, final_obs, episode_return, episode_length,
                    extra_statistics=extra, final_critic_obs=final_critic_obs)
    next_state = EnvState(
        env_state,
        jnp.where(done, 0.0, episode_return),
        jnp.where(done, 0, episode_length),
    )
    return obs, next_state, info


_TIME_LIMIT_RESET = 0x71
"""What :meth:`Env.step` folds into its key for the reset at a time limit."""


def positive_steps(max_episode_steps: Any) -> int:
    """``max_episode_steps`` as an int.

    Raises:
      ValueError: not a positive int: ``max_episode_steps=0: expected a
        positive int (steps after which episodes are truncated)``.
    """
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int | np.integer) \
            or max_episode_steps < 1:
        raise ValueError(f"max_episode_steps={max_episode_steps!r}: expected a positive int "
                         "(steps after which episodes are truncated)")
    return int(max_episode_steps)


def strong_types(tree: Any) -> Any:
    """``tree`` with every weakly typed leaf (a simulator's ``jnp.array(0)``,
    Python numbers) made strongly typed, dtypes unchanged: what :meth:`Env.reset`
    and :meth:`Env.step` return, so a jitted step called with a reset's state
    and then with its own output compiles once."""
    def strong(x: Any) -> Any:
        aval = jax.typeof(x)
        return jax.lax.convert_element_type(x, aval.dtype) if aval.weak_type else x

    return jax.tree.map(strong, tree)


def auto_reset(done: jax.Array, fresh: Any, stepped: Any) -> Any:
    """The auto-reset of one environment: ``fresh`` where ``done``, else ``stepped``.

    Args:
      done: ``bool[]``, the episode ended with this step.
      fresh: a pytree from a reset (the next episode's start).
      stepped: the pytree the step reached, with the same structure.

    Returns:
      A pytree like ``stepped`` (each leaf keeps ``stepped``'s dtype).
    """
    return jax.tree.map(lambda new, old: jnp.where(done, new, old).astype(jnp.result_type(old)),
                        fresh, stepped)


def all_batched(axis_size: int, in_batched: Any, args: tuple) -> tuple:
    """The arguments of a ``jax.custom_batching.custom_vmap`` rule, each with a
    leading ``[axis_size]`` axis: those ``in_batched`` marks unbatched are
    broadcast to it (an env batch's rules step every env from the same inputs)."""
    return jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)),
                        args, tuple(in_batched))


class SpecSizes:
    """What an env's spec fields (``observation_shape``, ``discrete``,
    ``action_size``, ``action_nvec``) imply, for single- and multi-agent envs
    alike (one agent's)."""

    observation_shape: tuple[int, ...]
    discrete: bool
    num_actions: int
    action_size: int
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    action_nvec: tuple[int, ...] = ()
    """Multi-discrete envs: the number of values of each action component
    (Jumanji's Minesweeper: ``(10, 10)``, a row and a column); ``()`` (the
    default) for every other env."""

    @property
    def observation_size(self) -> int:
        """Number of scalars in one observation (``prod(observation_shape)``)."""
        return math.prod(self.observation_shape)

    @property
    def multi_discrete(self) -> bool:
        """Whether an action is a vector of categorical components (:attr:`action_nvec`)."""
        return len(self.action_nvec) > 0

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one action: ``()`` for discrete envs, ``(len(action_nvec),)``
        for multi-discrete ones, ``(action_size,)`` for continuous ones."""
        if self.multi_discrete:
            return (len(self.action_nvec),)
        return () if self.discrete else (self.action_size,)

    def set_multi_discrete(self, nvec: Any) -> None:
        """Make this a multi-discrete env with components of ``nvec`` values: set
        ``discrete=True``, ``action_nvec=tuple(nvec)``, ``num_actions=sum(nvec)``,
        ``action_size=len(nvec)`` and ``action_low=action_high=None``.

        Args:
          nvec: the number of values of each component, positive ints (a
            sequence or a 1-d integer array).

        Raises:
          ValueError: ``nvec`` is empty, not 1-d, not integers, or has a count
            below 1 (naming it).
        """
        array = np.asarray(nvec)
        if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer) \
                or np.any(array < 1):
            raise ValueError(f"action_nvec={nvec!r}: expected a non-empty 1-d sequence of "
                             "positive ints")
        self.action_nvec = tuple(int(n) for n in array)
        self.discrete, self.num_actions = True, sum(self.action_nvec)
        self.action_size, self.action_low, self.action_high = len(self.action_nvec), None, None

    @property
    def action_space(self) -> str:
        """The action space in words, for messages: ``Discrete(4)``,
        ``MultiDiscrete([10, 10])`` or ``Box(6, low=..., high=...)``."""
        if self.multi_discrete:
            return f"MultiDiscrete({list(self.action_nvec)})"
        if self.discrete:
            return f"Discrete({self.num_actions})"
        return f"Box({self.action_size}, low={self.action_low}, high={self.action_high})"


def refuse_multi_discrete(env: SpecSizes, owner: str, supported: str) -> None:
    """Refuse a multi-discrete env in one line, before anything compiles.

    Args:
      env: the env (or multi-agent env) an algorithm was given.
      owner: what refuses, for the message (``"DQN"``).
      supported: the action spaces ``owner`` takes, in words (``"Discrete(n)"``).

    Raises:
      ValueError: ``env.multi_discrete``: ``DQN supports Discrete(n) actions only;
        jumanji/Minesweeper-v0 has MultiDiscrete([10, 10]) (int32[2] actions):
        train it with PPO, A2C or IMPALA``.
    """
    if env.multi_discrete:
        raise ValueError(f"{owner} supports {supported} actions only; {env.name} has "
                         f"{env.action_space} (int32[{len(env.action_nvec)}] actions): "
                         "train it with PPO, A2C or IMPALA")


def refuse_critic_observation(env: Any, owner: str) -> None:
    """Refuse, in one line before anything compiles, an env whose critic has an
    observation of its own (``critic_observation_shape``: a ``value_obs_key``) given
    to ``owner``, an algorithm whose critics read the policy's observation and would
    silently ignore it.

    Raises:
      ValueError: ``SAC on point: the env gives the critic an observation of its own
        (value_obs_key, shape (5,)), but SAC's critics read the policy's observation;
        drop env.value_obs_key (PPO and A2C train with it)``.
    """
    if env.critic_observation_shape is not None:
        raise ValueError(
            f"{owner} on {env.name}: the env gives the critic an observation of its own "
            f"(value_obs_key, shape {env.critic_observation_shape}), but {owner}'s critics "
            "read the policy's observation; drop env.value_obs_key (PPO and A2C train with it)")


class Env(SpecSizes, abc.ABC):
    """One environment as pure functions: ``reset(key)`` and ``step(key, state, action)``.

    Spec attributes (static Python values, set by subclasses):
      name: the id the env was made from (``"CartPole-v1"``, ``"brax/ant"``).
      observation_shape: shape of one observation.
      observation_dtype: dtype of observations.
      discrete: ``True`` for a categorical action space (one categorical, or
        with :attr:`action_nvec` several).
      num_actions: number of discrete actions (0 for continuous envs); for a
        multi-discrete env the values of all components together,
        ``sum(action_nvec)`` (the width of a factorised categorical's logits).
      action_size: number of action dimensions for continuous envs (1 for discrete
        ones, whose actions are ``int32[]`` scalars; ``len(action_nvec)`` for
        multi-discrete ones).
      action_nvec: multi-discrete envs only (``()`` otherwise): the number of
        values of each action component. An action is then ``int32[len(action_nvec)]``,
        component ``i`` in ``[0, action_nvec[i])`` (batched: ``int32[num_envs,
        len(action_nvec)]``), and ``discrete`` is ``True``. Set the spec with
        :meth:`set_multi_discrete`. Jumanji's ``Minesweeper-v0``: ``(10, 10)``,
        a row and a column.
      action_low, action_high: ``float32[action_size]`` numpy bounds of continuous
        actions (``None`` for discrete and multi-discrete envs).
      max_episode_steps: the time limit after which episodes are truncated.
      host: whether the simulators run on the host, outside the compiled
        program (Gymnasium, EnvPool); their state cannot be checkpointed.
      time_limit: the limit :meth:`set_time_limit` set (``None``: none beyond
        the simulator's own).
      observation_layout: how 3-d image observations are laid out,
        ``"channels_last"`` (``[height, width, channels]``, the default) or
        ``"channels_first"`` (``[channels, height, width]``: EnvPool's Atari
        frame stacks); what the CNN torsos read unless ``network.layout`` is set.
      critic_observation_shape: for an env whose critic sees an observation of
        its own (an asymmetric actor-critic: MuJoCo Playground's
        ``value_obs_key``, e.g. ``privileged_state``), its shape; such an env
        implements :meth:`critic_observation` and reports the critic's final
        observation in :attr:`StepInfo.final_critic_obs`. ``None`` (default):
        the critic sees the observation.
    """

    host: bool = False
    critic_observation_shape: tuple[int, ...] | None = None
    time_limit: int | None = None
    observation_layout: str = "channels_last"

    name: str
    observation_shape: tuple[int, ...]
    observation_dtype: Any
    discrete: bool
    num_actions: int
    action_size: int
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    max_episode_steps: int

    # ---- to implement ----------------------------------------------------
    @abc.abstractmethod
    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        """Start an episode: ``(obs, simulator_state)``. ``key``: typed PRNG key."""

    @abc.abstractmethod
    def step_env(
        self, key: jax.Array, env_state: Any, action: Action
    ) -> tuple[Observation, Any, jax.Array, jax.Array, jax.Array, Observation]:
        """One auto-resetting transition of the simulator.

        Returns:
          ``(obs, env_state, reward, terminated, truncated, final_obs)``: ``obs`` and
          ``env_state`` already reset where the episode ended; ``final_obs`` the
          observation reached before the reset. An env with further episode
          statistics returns them as a seventh element, a dict of named
          ``float32[]`` values of the episode so far including this step (taken
          before the reset): :attr:`StepInfo.extra_statistics`. An env with a
          :attr:`critic_observation_shape` returns an eighth, the critic's
          observation reached before the reset (:attr:`StepInfo.final_critic_obs`).
        """

    def critic_observation(self, state: EnvState) -> Observation:
        """The critic's observation of ``state`` (an :class:`EnvState` of one env
        or of a batch, leading axes kept): ``float32[..., *critic_observation_shape]``.

        Raises:
          NotImplementedError: an env without :attr:`critic_observation_shape`.
        """
        raise NotImplementedError(f"{self.name}: the critic sees the observation (this env "
                                  "has no critic_observation_shape)")

    # ---- the public API --------------------------------------------------
    def set_time_limit(self, max_episode_steps: int) -> None:
        """Truncate every episode, in training and evaluation alike, after
        ``max_episode_steps`` steps: the step that reaches it sets ``truncated``
        (not ``terminated``, so value targets bootstrap from ``final_obs``) and
        auto-resets. The simulator's own limit still ends episodes where it is
        shorter; :attr:`max_episode_steps` becomes the smaller of the two.

        One mechanism for every env stepped through :meth:`step_env`: the
        step that reaches the limit is followed by a :meth:`reset_env`
        (with a key folded from the step's), taken where the episode would
        go on. Envs that step whole batches (host envs, agents of one game)
        override it with their own limit.

        Raises:
          ValueError: ``max_episode_steps`` is not a positive int (naming it).
        """
        limit = positive_steps(max_episode_steps)
        self.time_limit = limit
        own = int(getattr(self, "max_episode_steps", 0) or 0)
        self.max_episode_steps = min(own, limit) if own > 0 else limit

    def reset(self, key: jax.Array) -> tuple[Observation, EnvState]:
        """A fresh episode: ``(obs, state)``; ``obs`` has shape :attr:`observation_shape`.
        Leaves are strongly typed (:func:`strong_types`), as :meth:`step` returns them."""
        obs, env_state = strong_types(without_vma_check(self.reset_env)(key))
        return obs, EnvState(env_state, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))

    def step(
        self, key: jax.Array, state: EnvState, action: Action
    ) -> tuple[Observation, EnvState, StepInfo]:
        """One transition with auto-reset: ``(obs, state, info)``.

        Args:
          key: typed PRNG key (used for stochastic dynamics and the reset).
          state: this env's :class:`EnvState`.
          action: ``int32[]`` for discrete envs, ``int32[len(action_nvec)]`` for
            multi-discrete ones, ``float32[action_size]`` otherwise (not clipped
            here: clip to ``action_low/high`` before stepping).
        """
        obs, env_state, reward, terminated, truncated, final_obs, *extra = without_vma_check(
            self.step_env)(key, state.env_state, action)
        if self.time_limit is not None:
            ended = jnp.logical_or(jnp.asarray(terminated, jnp.bool_), truncated).reshape(())
            cut = jnp.logical_and(state.episode_length + 1 >= self.time_limit,
                                  jnp.logical_not(ended))
            fresh = without_vma_check(self.reset_env)(jax.random.fold_in(key, _TIME_LIMIT_RESET))
            obs, env_state = auto_reset(cut, fresh, (obs, env_state))
            truncated = jnp.logical_or(jnp.asarray(truncated, jnp.bool_).reshape(()), cut)
        obs, env_state = strong_types((obs, env_state))
        return with_statistics(state, env_state, obs, reward, terminated, truncated, final_obs,
                               *extra[:1], final_critic_obs=extra[1] if len(extra) > 1 else None)

    def reset_batch(self, key: jax.Array, num_envs: int) -> tuple[Observation, EnvState]:
        """``num_envs`` fresh episodes: obs ``[num_envs, *observation_shape]`` and a
        batched :class:`EnvState`."""
        return jax.vmap(self.reset)(jax.random.split(key, num_envs))

    def step_batch(
        self, key: jax.Array, state: EnvState, action: Action
    ) -> tuple[Observation, EnvState, StepInfo]:
        """:meth:`step` for a batch; ``action`` has a leading ``[num_envs]`` axis and
        every output gains one. ``key`` is split into one key per env."""
        num_envs = jax.tree.leaves(state.episode_length)[0].shape[0]
        return jax.vmap(self.step)(jax.random.split(key, num_envs), state, action)

    def evaluation_metrics(self, policy_fn: Any, params: Any, key: jax.Array,
                           eval_episodes: int, initial_carry: Any = None) -> dict[str, Any]:
        """``eval/episode_return`` and ``eval/episode_length`` of ``policy_fn(params,
        obs, key) -> action`` on ``eval_episodes`` fresh episodes of this env, split
        over the devices (:func:`jaxtrainer.envs.evaluation.evaluation_metrics`): what
        :meth:`jaxtrainer.Module.evaluation_step` runs by default."""
        return evaluation.evaluation_metrics(self, policy_fn, params, key, eval_episodes,
                                             initial_carry)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name!r}, obs={self.observation_shape}, "
                f"actions={self.action_space}, max_episode_steps={self.max_episode_steps})")
