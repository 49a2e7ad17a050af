"""A multi-agent environment seen by single-agent algorithms: each agent one env of a batch.

:class:`AgentsAsEnvs` presents a :class:`~jaxtrainer.envs.multi_agent.MultiAgentEnv`
of ``num_agents`` agents as an :class:`~jaxtrainer.envs.Env` whose batch of
``num_envs`` envs is ``num_envs / num_agents`` games x ``num_agents`` agents,
game-major (env ``g * num_agents + i`` is agent ``i`` of game ``g``). A
single-agent algorithm trained on it acts for every agent with one set of
parameters, on each agent's own observation: parameter-shared independent
learning (PPO on it is IPPO).

Each env reports its own agent's reward and episode return, so the
algorithms' ``train/episode_return`` (a mean over the envs whose episode
ended) is the mean over agents of their returns, averaged over games: what
JaxMARL's IPPO baselines log as the episode return (for MPE
``simple_spread_v3``, whose agents share most of their reward).

The env is only ever stepped as a batch: :meth:`Env.reset_batch` /
:meth:`Env.step_batch`, or ``jax.vmap`` of :meth:`Env.reset` /
:meth:`Env.step`, with a batch that is a multiple of ``num_agents``
(``jax.custom_batching.custom_vmap`` groups the batch into games). Each env's
state holds a copy of its game's simulator state; the game steps with the
key of its first agent. An unbatched ``reset`` / ``step`` of one agent only
works for a one-agent game.

Centralised critics (MAPPO, PPO's ``critic_input="global_state"``) read each
env's critic input, ``float32[critic_input_size]``: its game's global state
followed by the one-hot id of its agent (:meth:`AgentsAsEnvs.critic_inputs` of
a batch's state, :meth:`AgentsAsEnvs.final_critic_inputs` of a step's
:class:`AgentsStepInfo`, whose ``final_state`` is the global state the step
reached before any auto-reset).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxtrainer.distributed._axis import size_probe_active, without_vma_check
from jaxtrainer.envs.base import (
    Action,
    Env,
    EnvState,
    Observation,
    StepInfo,
    all_batched,
    positive_steps,
)
from jaxtrainer.envs.multi_agent import MultiAgentEnv, MultiAgentState


@struct.dataclass
class AgentsStepInfo(StepInfo):
    """:class:`~jaxtrainer.envs.StepInfo` of one agent-env, plus its game's
    global state.

    Attributes:
      final_state: ``float32[state_size]``, the global state of the env's game
        that this transition reached, before any auto-reset (the same for every
        agent of a game; :attr:`MultiAgentInfo.final_state
        <jaxtrainer.envs.multi_agent.MultiAgentInfo.final_state>`).
    """

    final_state: jax.Array


class AgentsAsEnvs(Env):
    """``multi_agent`` as an :class:`~jaxtrainer.envs.Env` batched over games x agents.

    Spec: one agent's (:attr:`observation_shape`, actions, bounds and time
    limit are the multi-agent env's, padded as it pads heterogeneous agents).

    Attributes:
      batch_multiple: ``num_agents``: what a batch of envs on one device must be
        a multiple of (modules check their sizes against it before compiling).

    Args:
      multi_agent: the :class:`~jaxtrainer.envs.multi_agent.MultiAgentEnv`.

    Raises (when a batch is reset or stepped):
      ValueError: a batch size that is not a multiple of ``num_agents`` (the
        message names both), or an unbatched call on a game of several agents.
    """

    def __init__(self, multi_agent: MultiAgentEnv) -> None:
        self.multi_agent = multi_agent
        self.num_agents = multi_agent.num_agents
        self.batch_multiple = self.num_agents  # a batch holds whole games on every device
        for attr in ("name", "observation_shape", "observation_dtype", "discrete", "num_actions",
                     "action_size", "action_nvec", "action_low", "action_high",
                     "max_episode_steps"):
            setattr(self, attr, getattr(multi_agent, attr))
        self.reset = jax.custom_batching.custom_vmap(self._reset_one)
        self.reset.def_vmap(self._reset_rule)
        self.step = jax.custom_batching.custom_vmap(self._step_one)
        self.step.def_vmap(self._step_rule)

    def set_time_limit(self, max_episode_steps: int) -> None:
        """Truncate every game after ``max_episode_steps`` steps, all its agents
        at once (the multi-agent env's own limit, replaced).

        Raises:
          ValueError: not a positive int (naming it).
        """
        limit = positive_steps(max_episode_steps)
        self.multi_agent.max_episode_steps = self.time_limit = self.max_episode_steps = limit

    def __repr__(self) -> str:
        return f"AgentsAsEnvs({self.multi_agent!r})"

    # ---- games <-> envs ----------------------------------------------------
    def _games(self, batch: int) -> int:
        if batch % self.num_agents and size_probe_active():  # shapes only: a last partial game
            return -(-batch // self.num_agents)
        if batch % self.num_agents:
            raise ValueError(f"{self.name}: a batch of {batch} envs is not a multiple of its "
                             f"{self.num_agents} agents (each env is one agent of a game); "
                             f"use num_envs and eval_episodes divisible by {self.num_agents} "
                             "on every device")
        return batch // self.num_agents

    def _whole_games(self, tree: Any, games: int) -> Any:
        """Leaves ``[batch, ...]`` to ``[games * num_agents, ...]``: as they are,
        or (a size probe's partial last game) with the last row repeated."""
        size = games * self.num_agents
        return jax.tree.map(lambda x: x if x.shape[0] == size else jnp.concatenate(
            [x, jnp.repeat(x[-1:], size - x.shape[0], axis=0)]), tree)

    def _flat(self, tree: Any) -> Any:
        """Leaves ``[games, num_agents, ...]`` to ``[games * num_agents, ...]``."""
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)

    def _per_agent(self, tree: Any, games: int) -> Any:
        """A game's leaves ``[games, ...]`` copied to each of its agents' envs."""
        return jax.tree.map(lambda x: jnp.repeat(x, self.num_agents, axis=0,
                                                 total_repeat_length=games * self.num_agents),
                            tree)

    def _first_agents(self, tree: Any, games: int) -> Any:
        """Leaves ``[games * num_agents, ...]`` to their games' first agents' ``[games, ...]``."""
        return jax.tree.map(lambda x: x.reshape((games, self.num_agents) + x.shape[1:])[:, 0], tree)

    def _to_envs(self, obs: Any, game: MultiAgentState, games: int) -> tuple[Any, EnvState]:
        state = EnvState(self._per_agent(game.env_state, games),
                         game.episode_return.reshape(-1),
                         self._per_agent(game.episode_length, games))
        return self._flat(obs), state

    # ---- batched reset and step (custom_vmap rules) ----------------------
    def _reset_rule(self, axis_size: int, in_batched: Any, key: jax.Array):
        games = self._games(axis_size)
        if not in_batched[0]:
            key = jnp.broadcast_to(key, (axis_size,) + key.shape)
        key = self._whole_games(key, games)
        obs, game = jax.vmap(self.multi_agent.reset)(self._first_agents(key, games))
        out = jax.tree.map(lambda x: x[:axis_size], self._to_envs(obs, game, games))
        return out, jax.tree.map(lambda _: True, out)

    def _step_rule(self, axis_size: int, in_batched: Any, key: jax.Array, state: EnvState,
                   action: Action):
        games = self._games(axis_size)
        key, state, action = all_batched(axis_size, in_batched, (key, state, action))
        key, state, action = self._whole_games((key, state, action), games)
        game = MultiAgentState(self._first_agents(state.env_state, games),
                               state.episode_return.reshape(games, self.num_agents),
                               self._first_agents(state.episode_length, games))
        actions = action.reshape((games, self.num_agents) + action.shape[1:])
        obs, game, info = jax.vmap(self.multi_agent.step)(self._first_agents(key, games), game,
                                                          actions)
        obs, next_state = self._to_envs(obs, game, games)
        step_info = AgentsStepInfo(info.reward.reshape(-1), info.terminated.reshape(-1),
                                   info.truncated.reshape(-1), self._flat(info.final_obs),
                                   info.episode_return.reshape(-1),
                                   self._per_agent(info.episode_length, games),
                                   self._per_agent(info.final_state, games))
        out = jax.tree.map(lambda x: x[:axis_size], (obs, next_state, step_info))
        return out, jax.tree.map(lambda _: True, out)

    # ---- centralised critics ---------------------------------------------
    @property
    def critic_input_size(self) -> int:
        """Size of one env's critic input: ``state_size + num_agents``."""
        return self.multi_agent.state_size + self.num_agents

    def _with_agent_ids(self, states: jax.Array) -> jax.Array:
        """``float32[..., n, state_size]`` (``n`` game-major envs) with each env's
        agent one-hot appended: ``float32[..., n, critic_input_size]``."""
        n = states.shape[-2]
        ids = jax.nn.one_hot(jnp.arange(n) % self.num_agents, self.num_agents, dtype=jnp.float32)
        ids = jnp.broadcast_to(ids, states.shape[:-1] + (self.num_agents,))
        return jnp.concatenate([states.astype(jnp.float32), ids], axis=-1)

    def critic_inputs(self, state: EnvState) -> jax.Array:
        """Each env's centralised-critic input for the current step of a batch.

        The input of agent ``i`` of a game is the game's global state
        (:meth:`MultiAgentEnv.global_state
        <jaxtrainer.envs.multi_agent.MultiAgentEnv.global_state>`, computed
        once per game) followed by the one-hot of ``i``: the agent-specific
        global state of Yu et al. 2022, "The Surprising Effectiveness of PPO in
        Cooperative Multi-Agent Games" (MAPPO).

        Args:
          state: a batch's :class:`~jaxtrainer.envs.EnvState`, leading axis
            ``[n]`` (game-major, as :meth:`reset_batch` returns it).

        Returns:
          ``float32[n, critic_input_size]``.

        Raises:
          ValueError: ``n`` is not a multiple of ``num_agents``.
        """
        n = state.episode_length.shape[0]
        games = self._games(n)
        game_states = self._whole_games(state.env_state, games)
        global_state = jax.vmap(without_vma_check(self.multi_agent.global_state_env))(
            self._first_agents(game_states, games))
        per_env = self._per_agent(jnp.asarray(global_state, jnp.float32), games)[:n]
        return self._with_agent_ids(per_env)

    def final_critic_inputs(self, info: AgentsStepInfo) -> jax.Array:
        """Each env's critic input at the state a step reached, before any
        auto-reset: ``info.final_state`` with the agent one-hots appended.

        Args:
          info: the :class:`AgentsStepInfo` of a batch, leaves ``[..., n, ...]``
            (e.g. ``[num_steps, n]`` for a rollout).

        Returns:
          ``float32[..., n, critic_input_size]``.
        """
        return self._with_agent_ids(info.final_state)

    def _refused(self, shapes: Any) -> Any:
        """What an unbatched call of a game of several agents returns: zeros of
        one env's shapes (``custom_vmap`` traces it even for batched calls, whose
        rules replace it), and a callback that raises when it actually runs."""
        message = (f"{self.name}: AgentsAsEnvs steps whole games of {self.num_agents} agents: "
                   "use reset_batch/step_batch (or jax.vmap of reset/step) with a batch that "
                   f"is a multiple of {self.num_agents}")

        def refuse() -> None:
            raise ValueError(message)

        jax.debug.callback(refuse)
        return jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), shapes)

    def _reset_one(self, key: jax.Array) -> tuple[Observation, EnvState]:
        # traced by custom_vmap even when batched: shapes only, unless actually called
        if self.num_agents == 1:
            obs, state = self._reset_rule(1, (True,), key[None])[0]
            return jax.tree.map(lambda x: x[0], (obs, state))
        keys = jnp.broadcast_to(key, (self.num_agents,) + key.shape)
        return self._refused(jax.eval_shape(
            lambda k: self._reset_rule(self.num_agents, (True,), k)[0], keys))

    def _step_one(self, key, state, action) -> tuple[Observation, EnvState, StepInfo]:
        batched = jax.tree.map(lambda x: jnp.broadcast_to(x, (self.num_agents,) + jnp.shape(x)),
                               (key, state, action))
        flags = jax.tree.map(lambda _: True, (key, state, action))
        if self.num_agents == 1:
            return jax.tree.map(lambda x: x[0], self._step_rule(1, flags, *batched)[0])
        return self._refused(jax.eval_shape(
            lambda *a: self._step_rule(self.num_agents, flags, *a)[0], *batched))

    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        raise NotImplementedError("AgentsAsEnvs resets through reset/reset_batch")

    def step_env(self, key: jax.Array, env_state: Any, action: Action):
        raise NotImplementedError("AgentsAsEnvs steps through step/step_batch")
