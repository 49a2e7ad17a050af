"""The multi-agent environment interface: agents on a leading axis.

A :class:`MultiAgentEnv` is the multi-agent counterpart of
:class:`~jaxtrainer.envs.Env`: a plain Python object holding static
configuration, whose dynamic data lives in the :class:`MultiAgentState` pytree
it returns. It describes ONE game of ``num_agents`` agents; every per-agent
quantity is an array whose leading axis is the agent, in the order of
:attr:`MultiAgentEnv.agents`:

* observations ``[num_agents, *observation_shape]`` (one shape for every
  agent: agents with smaller observations are zero-padded, see
  :attr:`MultiAgentEnv.observation_mask`);
* actions ``int32[num_agents]`` (discrete) or ``float32[num_agents, action_size]``
  (continuous), padded the same way (:attr:`MultiAgentEnv.action_mask`);
* rewards ``float32[num_agents]``, ``terminated`` / ``truncated`` ``bool[num_agents]``;
* a global state ``float32[state_size]`` (:meth:`MultiAgentEnv.global_state`)
  for centralised critics.

Like :class:`~jaxtrainer.envs.Env`, every MultiAgentEnv auto-resets (the ``obs``
after an episode ends is the next episode's first, the one reached is in
:attr:`MultiAgentInfo.final_obs`), keeps ``terminated`` apart from
``truncated``, and tracks episode statistics per agent
(:attr:`MultiAgentInfo.episode_return`, ``float32[num_agents]``) and per team
(:func:`team_returns`). An episode is the game's: it ends for every agent at
the same step, where :attr:`MultiAgentInfo.episode_done` is set.

Single-agent algorithms train on one through
:class:`~jaxtrainer.envs.agents_as_envs.AgentsAsEnvs`, which presents its
agents as a batch of envs (shared parameters: independent PPO, IPPO).
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer.distributed._axis import without_vma_check
from jaxtrainer.envs.base import Observation, SpecSizes, strong_types

__all__ = ["MultiAgentEnv", "MultiAgentInfo", "MultiAgentState", "team_returns"]


@struct.dataclass
class MultiAgentState:
    """State of one game (or of a batch of games, with a leading axis on every leaf).

    Attributes:
      env_state: the wrapped simulator's state.
      episode_return: ``float32[num_agents]``, each agent's undiscounted return
        of the current episode so far.
      episode_length: ``int32[]``, steps taken in the current episode so far.
    """

    env_state: Any
    episode_return: jax.Array
    episode_length: jax.Array


@struct.dataclass
class MultiAgentInfo:
    """What one :meth:`MultiAgentEnv.step` reports besides the next observations and state.

    Shapes are for one game; batched calls add a leading ``[num_games]`` axis.

    Attributes:
      reward: ``float32[num_agents]``, each agent's reward of this transition.
      terminated: ``bool[num_agents]``, the episode reached a terminal state for
        the agent (no bootstrap). Set only where :attr:`episode_done`.
      truncated: ``bool[num_agents]``, the episode was cut by the time limit
        (bootstrap from ``final_obs``); never together with ``terminated``.
      final_obs: ``[num_agents, *observation_shape]``, the observations this
        transition reached, before any auto-reset.
      final_state: ``float32[state_size]``, the global state this transition
        reached, before any auto-reset.
      episode_return: ``float32[num_agents]``, each agent's return of the current
        episode including this step; the completed episode's where :attr:`episode_done`.
      episode_length: ``int32[]``, length of the current episode including this step.
    """

    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: Observation
    final_state: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array

    @property
    def done(self) -> jax.Array:
        """``bool[num_agents]``: the episode ended with this step, per agent."""
        return jnp.logical_or(self.terminated, self.truncated)

    @property
    def episode_done(self) -> jax.Array:
        """``bool[]``: the game's episode ended with this step (every agent's)."""
        return jnp.any(self.done, axis=-1)

    @property
    def team_return(self) -> jax.Array:
        """``float32[]``: the mean over agents of their episode returns (the
        metric JaxMARL's IPPO baselines report as the episode return)."""
        return jnp.mean(self.episode_return, axis=-1)


def team_returns(info: MultiAgentInfo, teams: dict[str, tuple[int, ...]]) -> dict[str, jax.Array]:
    """Each team's episode return: the mean over its agents of their returns.

    Args:
      info: a :class:`MultiAgentInfo` with any leading axes.
      teams: team name to the positions of its agents on the agent axis
        (:attr:`MultiAgentEnv.teams`).

    Returns:
      ``{team: float32[...]}`` with ``info``'s leading axes; report them with
      ``Mean.of(value, mask=info.episode_done)``.
    """
    return {team: jnp.mean(jnp.take(info.episode_return, jnp.asarray(agents), axis=-1), axis=-1)
            for team, agents in teams.items()}


class MultiAgentEnv(SpecSizes, abc.ABC):
    """One game of ``num_agents`` agents as pure functions, agents on a leading axis.

    Spec attributes (static Python values, set by subclasses):
      name: the id the env was made from (``"jaxmarl/MPE_simple_spread_v3"``).
      agents: the agents' names, in the order of the agent axis.
      observation_shape: shape of ONE agent's (padded) observation.
      observation_dtype: dtype of observations.
      observation_sizes: each agent's own observation size before padding
        (every entry ``prod(observation_shape)`` when none is padded).
      discrete: ``True`` for categorical actions (all agents alike).
      num_actions: the largest agent's number of discrete actions (0 when continuous).
      action_counts: each agent's own number of discrete actions (continuous:
        its own number of action dimensions).
      action_size: the largest agent's action dimensions (1 when discrete).
      action_low, action_high: ``float32[action_size]`` numpy bounds of
        continuous actions over all agents (``None`` when discrete).
      state_size: size of the global state, ``float32[state_size]``.
      teams: team name to the positions of its agents (one team of every agent
        when the env has no teams).
      max_episode_steps: the most steps an episode can take; it is truncated there.
    """

    name: str
    agents: tuple[str, ...]
    observation_shape: tuple[int, ...]
    observation_dtype: Any
    observation_sizes: tuple[int, ...]
    discrete: bool
    num_actions: int
    action_counts: tuple[int, ...]
    action_size: int
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    state_size: int
    teams: dict[str, tuple[int, ...]]
    max_episode_steps: int

    # ---- to implement ----------------------------------------------------
    @abc.abstractmethod
    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        """Start an episode: ``(obs[num_agents, ...], simulator_state)``. ``key``: typed PRNG key."""

    @abc.abstractmethod
    def step_env(self, key: jax.Array, env_state: Any, actions: jax.Array) -> tuple[Any, ...]:
        """One auto-resetting transition of the simulator.

        Returns:
          ``(obs, env_state, reward, terminated, truncated, final_obs, final_state)``:
          ``obs`` and ``env_state`` already reset where the episode ended;
          ``reward``, ``terminated``, ``truncated`` per agent; ``final_obs`` and
          ``final_state`` (the global state) reached before the reset.
        """

    @abc.abstractmethod
    def global_state_env(self, env_state: Any) -> jax.Array:
        """The global state of ``env_state``: ``float32[state_size]``."""

    # ---- the public API --------------------------------------------------
    @property
    def num_agents(self) -> int:
        """Number of agents (the length of the agent axis)."""
        return len(self.agents)

    @property
    def observation_mask(self) -> np.ndarray:
        """``bool[num_agents, observation_size]``: ``True`` at the entries of each
        agent's flat observation that are its own, ``False`` at the zero padding."""
        return np.arange(self.observation_size)[None] < np.asarray(self.observation_sizes)[:, None]

    @property
    def action_mask(self) -> np.ndarray:
        """``bool[num_agents, num_actions]`` (discrete: the actions each agent has)
        or ``bool[num_agents, action_size]`` (continuous: its action dimensions);
        ``False`` marks padding, which the env ignores or maps as its docs say."""
        width = self.num_actions if self.discrete else self.action_size
        return np.arange(width)[None] < np.asarray(self.action_counts)[:, None]

    def reset(self, key: jax.Array) -> tuple[Observation, MultiAgentState]:
        """A fresh episode: ``(obs[num_agents, *observation_shape], state)``."""
        obs, env_state = strong_types(without_vma_check(self.reset_env)(key))
        return obs, MultiAgentState(env_state, jnp.zeros((self.num_agents,), jnp.float32),
                                    jnp.zeros((), jnp.int32))

    def step(self, key: jax.Array, state: MultiAgentState, actions: jax.Array,
             ) -> tuple[Observation, MultiAgentState, MultiAgentInfo]:
        """One transition of every agent with auto-reset: ``(obs, state, info)``.

        Args:
          key: typed PRNG key (stochastic dynamics and the reset).
          state: this game's :class:`MultiAgentState`.
          actions: ``int32[num_agents]`` (discrete) or
            ``float32[num_agents, action_size]`` (continuous, not clipped here).
        """
        obs, env_state, reward, terminated, truncated, final_obs, final_state = without_vma_check(
            self.step_env)(key, state.env_state, actions)
        obs, env_state = strong_types((obs, env_state))
        shape = (self.num_agents,)
        reward = jnp.asarray(reward, jnp.float32).reshape(shape)
        terminated = jnp.asarray(terminated, jnp.bool_).reshape(shape)
        truncated = jnp.logical_and(jnp.asarray(truncated, jnp.bool_).reshape(shape),
                                    jnp.logical_not(terminated))
        ended = jnp.any(jnp.logical_or(terminated, truncated))
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        info = MultiAgentInfo(reward, terminated, truncated, final_obs,
                              jnp.asarray(final_state, jnp.float32), episode_return,
                              episode_length)
        next_state = MultiAgentState(env_state, jnp.where(ended, 0.0, episode_return),
                                     jnp.where(ended, 0, episode_length))
        return obs, next_state, info

    def global_state(self, state: MultiAgentState) -> jax.Array:
        """The global state of the current step, ``float32[state_size]`` (of the
        next episode's first step after an auto-reset; the one reached before it
        is :attr:`MultiAgentInfo.final_state`)."""
        return jnp.asarray(self.global_state_env(state.env_state), jnp.float32)

    def reset_batch(self, key: jax.Array, num_games: int) -> tuple[Observation, MultiAgentState]:
        """``num_games`` fresh episodes: obs ``[num_games, num_agents, ...]``."""
        return jax.vmap(self.reset)(jax.random.split(key, num_games))

    def step_batch(self, key: jax.Array, state: MultiAgentState, actions: jax.Array,
                   ) -> tuple[Observation, MultiAgentState, MultiAgentInfo]:
        """:meth:`step` for a batch of games; ``actions`` has a leading
        ``[num_games]`` axis and every output gains one. ``key`` is split per game."""
        num_games = state.episode_length.shape[0]
        return jax.vmap(self.step)(jax.random.split(key, num_games), state, actions)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name!r}, agents={self.num_agents}, "
                f"obs={self.observation_shape}, actions={self.action_space}, "
                f"state={self.state_size}, "
                f"max_episode_steps={self.max_episode_steps})")

