"""Adapter for JaxMARL's multi-agent environments: ``make("jaxmarl/<name>")``.

JaxMARL (PyPI ``jaxmarl``, tested with 0.2.0) is imported only when a
``jaxmarl/...`` environment is made (``pip install -e ".[marl]"``); importing
it imports brax (seconds). Names are JaxMARL's registry keys: the MPE tasks
(``jaxmarl/MPE_simple_spread_v3``, ...), multi-agent brax
(``jaxmarl/ant_4x2``, ``jaxmarl/halfcheetah_6x1``, ...), Overcooked
(``jaxmarl/overcooked``), and the others whose observations are arrays.

* :func:`make_jaxmarl_multi_agent` (``make_multi_agent("jaxmarl/<name>")``):
  the game as a :class:`~jaxtrainer.envs.multi_agent.MultiAgentEnv`
  (:class:`JaxMARLEnv`), agents on a leading axis.
* :func:`make_jaxmarl` (``make("jaxmarl/<name>")``): the same wrapped in
  :class:`~jaxtrainer.envs.agents_as_envs.AgentsAsEnvs`, an
  :class:`~jaxtrainer.envs.Env` whose batch is games x agents, which the
  single-agent algorithms train with shared parameters (PPO: IPPO).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer.envs.base import auto_reset
from jaxtrainer.envs.families import flat_float32, import_family, unknown_name
from jaxtrainer.envs.multi_agent import MultiAgentEnv

_JAXMARL_PREFIX = "jaxmarl/"

_MABRAX_NAMES = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")
"""JaxMARL 0.2's multi-agent brax tasks: made with ``auto_reset=False`` (this
adapter resets them itself, keeping the observation an episode reached)."""


def _raw_key(key: jax.Array) -> jax.Array:
    """JaxMARL's envs take raw ``uint32[2]`` keys."""
    return jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key


@struct.dataclass
class JaxMARLState:
    """``state``: JaxMARL's env state; ``time``: ``int32[]`` steps in this episode."""

    state: Any
    time: jax.Array


def _time_limit(env: Any) -> int:
    """The most steps a JaxMARL episode takes, from the env's own attributes.

    Raises:
      ValueError: the env has none of them (pass ``max_episode_steps=``).
    """
    from jaxmarl.environments.mpe.simple import SimpleMPE

    if isinstance(env, SimpleMPE):  # ends when its counter, before the step, reaches max_steps
        return int(env.max_steps) + 1
    if hasattr(env, "episode_length"):  # multi-agent brax: brax's EpisodeWrapper
        return math.ceil(int(env.episode_length) / int(getattr(env, "action_repeat", 1)))
    if hasattr(env, "max_steps"):
        return int(env.max_steps)
    raise ValueError(f"{type(env).__name__} has no max_steps or episode_length: "
                     "pass max_episode_steps=<the most steps an episode takes>")


def _action_spec(name: str, agents: tuple[str, ...], spaces: list[Any]) -> dict[str, Any]:
    """The padded action spec of the agents' spaces (all ``Discrete`` or all ``Box``).

    Raises:
      TypeError: another space, or discrete and continuous agents mixed (the
        message lists each agent's space).
    """
    kinds = [type(s).__name__ for s in spaces]
    listed = ", ".join(f"{a}: {k}{getattr(s, 'shape', '')}"
                       for a, k, s in zip(agents, kinds, spaces, strict=True))
    if set(kinds) == {"Discrete"}:
        counts = tuple(int(s.n) for s in spaces)
        return dict(discrete=True, num_actions=max(counts), action_counts=counts, action_size=1,
                    action_low=None, action_high=None)
    if set(kinds) != {"Box"} or any(len(s.shape) != 1 for s in spaces):
        raise TypeError(f"{name}: agents' action spaces must be all Discrete or all flat Box; "
                        f"got {listed}")
    counts = tuple(int(s.shape[0]) for s in spaces)
    size = max(counts)
    low, high = -np.ones((len(spaces), size), np.float32), np.ones((len(spaces), size), np.float32)
    for i, s in enumerate(spaces):
        low[i, :counts[i]] = np.broadcast_to(np.asarray(s.low, np.float32), (counts[i],))
        high[i, :counts[i]] = np.broadcast_to(np.asarray(s.high, np.float32), (counts[i],))
    return dict(discrete=False, num_actions=0, action_counts=counts, action_size=size,
                action_low=low.min(0), action_high=high.max(0), _low=low, _high=high)


def _teams(agents: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Agents grouped by name without the trailing ``_<index>`` (``adversary_0``,
    ``agent_1`` -> teams ``adversary`` and ``agent``)."""
    teams: dict[str, list[int]] = {}
    for i, agent in enumerate(agents):
        base, _, index = agent.rpartition("_")
        teams.setdefault(base if base and index.isdigit() else agent, []).append(i)
    return {team: tuple(members) for team, members in teams.items()}


class JaxMARLEnv(MultiAgentEnv):
    """A JaxMARL environment behind the :class:`~jaxtrainer.envs.multi_agent.MultiAgentEnv`
    interface.

    JaxMARL's ``step_env`` (the step without its reset) is stepped and this
    adapter resets where the episode ended (JaxMARL's ``dones["__all__"]``), with
    the same key split as JaxMARL's own ``step``: its ``(obs, state, reward,
    done)`` are JaxMARL's, plus the observations reached (``final_obs``).
    ``truncated`` is set where the episode ends at :attr:`max_episode_steps`
    (every JaxMARL MPE, Overcooked or brax episode that runs to its limit),
    ``terminated`` where it ends before (a multi-agent brax robot falling). An
    agent that JaxMARL marks done before the episode ends (SMAX's dead units)
    keeps acting, its actions ignored by JaxMARL, until it does.

    Observations: with ``flatten=True`` (default) each agent's observation
    flattened to ``float32`` and zero-padded at the end to the largest agent's
    size (:attr:`observation_sizes` lists each agent's own; MPE
    ``simple_spread_v3``: ``float32[3, 18]``, no padding; Overcooked's
    ``uint8[4, 5, 26]`` per agent becomes ``float32[2, 520]``). With
    ``flatten=False`` JaxMARL's arrays as they are, which every agent must
    share (shape and dtype).

    Actions: all agents discrete (``int32[num_agents]``) or all continuous
    (``float32[num_agents, action_size]``). Heterogeneous agents are padded
    to the largest: a discrete action beyond an agent's own count is clipped
    to its last action; continuous action entries beyond an agent's own
    dimensions are dropped and the rest clipped to its bounds.

    Global state: every agent's (padded, flattened) observation concatenated,
    ``float32[num_agents * observation_size]``, as JaxMARL's MAPPO baselines
    build their world state for MPE.

    Args:
      env: a JaxMARL ``MultiAgentEnv`` (from ``jaxmarl.make``; multi-agent
        brax made with ``auto_reset=False``).
      name: the id reported in :attr:`name`.
      flatten: see Observations.
      max_episode_steps: the most steps an episode takes; default from the env
        (MPE: ``max_steps + 1``, its episodes' length; multi-agent brax:
        ``episode_length``; others: ``max_steps``).

    Raises:
      ValueError: with ``flatten=False``, agents whose observations differ (the
        message lists each agent's shape and dtype); no time limit known.
      TypeError: observations that are not arrays, or action spaces other than
        all ``Discrete`` or all flat ``Box`` (listing each agent's).
    """

    def __init__(self, env: Any, name: str, *, flatten: bool = True,
                 max_episode_steps: int | None = None) -> None:
        self.env, self.name, self.flatten = env, name, bool(flatten)
        self.agents = tuple(env.agents)
        obs = jax.eval_shape(lambda k: env.reset(k)[0], jax.random.PRNGKey(0))
        if not isinstance(obs, dict) or any(not hasattr(obs.get(a), "shape") for a in self.agents):
            raise TypeError(f"{name}: observations must be one array per agent; got {obs}")
        shapes = [(tuple(obs[a].shape), np.dtype(obs[a].dtype)) for a in self.agents]
        if self.flatten:
            self.observation_sizes = tuple(math.prod(s) for s, _ in shapes)
            self.observation_shape = (max(self.observation_sizes),)
            self.observation_dtype = jnp.float32
        else:
            if len(set(shapes)) > 1:
                listed = ", ".join(f"{a}: {d}{list(s)}"
                                   for a, (s, d) in zip(self.agents, shapes, strict=True))
                raise ValueError(f"{name}: flatten=False needs one observation shape and dtype "
                                 f"for every agent; got {listed} (flatten=True pads them)")
            self.observation_shape, self.observation_dtype = shapes[0]
            self.observation_sizes = (math.prod(self.observation_shape),) * len(self.agents)
        spec = _action_spec(name, self.agents, [env.action_space(a) for a in self.agents])
        self._low, self._high = spec.pop("_low", None), spec.pop("_high", None)
        for key, value in spec.items():
            setattr(self, key, value)
        self.state_size = len(self.agents) * self.observation_size
        self.teams = _teams(self.agents)
        self.max_episode_steps = (_time_limit(env) if max_episode_steps is None
                                  else int(max_episode_steps))

    def _observations(self, obs: dict[str, jax.Array]) -> jax.Array:
        """JaxMARL's per-agent dict as ``[num_agents, *observation_shape]``."""
        if not self.flatten:
            return jnp.stack([obs[a] for a in self.agents])
        size = self.observation_shape[0]
        return jnp.stack([jnp.pad(flat_float32(obs[a]), (0, size - n))
                          for a, n in zip(self.agents, self.observation_sizes, strict=True)])

    def _actions(self, actions: jax.Array) -> dict[str, jax.Array]:
        """``[num_agents, ...]`` actions as JaxMARL's per-agent dict, each within
        its agent's own space."""
        if self.discrete:
            actions = jnp.asarray(actions, jnp.int32)
            return {a: jnp.minimum(actions[i], n - 1)
                    for i, (a, n) in enumerate(zip(self.agents, self.action_counts, strict=True))}
        actions = jnp.clip(jnp.asarray(actions, jnp.float32), self._low, self._high)
        return {a: actions[i, :n]
                for i, (a, n) in enumerate(zip(self.agents, self.action_counts, strict=True))}

    def global_state_env(self, env_state: JaxMARLState) -> jax.Array:
        return self._observations(self.env.get_obs(env_state.state)).reshape(-1).astype(jnp.float32)

    def reset_env(self, key: jax.Array) -> tuple[jax.Array, JaxMARLState]:
        obs, state = self.env.reset(_raw_key(key))
        return self._observations(obs), JaxMARLState(state, jnp.zeros((), jnp.int32))

    def step_env(self, key: jax.Array, env_state: JaxMARLState, actions: jax.Array):
        step_key, reset_key = jax.random.split(_raw_key(key))  # as JaxMARL's own step
        obs, stepped, reward, done, _ = self.env.step_env(step_key, env_state.state,
                                                          self._actions(actions))
        time = env_state.time + 1
        limit = time >= self.max_episode_steps
        ended = jnp.logical_or(jnp.asarray(done["__all__"], jnp.bool_), limit)
        final_obs = self._observations(obs)
        fresh_obs, fresh = self.env.reset(reset_key)
        state = JaxMARLState(auto_reset(ended, fresh, stepped), jnp.where(ended, 0, time))
        next_obs = auto_reset(ended, self._observations(fresh_obs), final_obs)
        per_agent = jnp.ones((len(self.agents),), jnp.bool_)
        truncated = jnp.logical_and(ended, limit) & per_agent
        terminated = jnp.logical_and(ended, jnp.logical_not(limit)) & per_agent
        rewards = jnp.stack([jnp.asarray(reward[a], jnp.float32).reshape(()) for a in self.agents])
        return (next_obs, state, rewards, terminated, truncated, final_obs,
                final_obs.reshape(-1).astype(jnp.float32))


def make_jaxmarl_multi_agent(name: str, flatten: bool = True,
                             max_episode_steps: int | None = None, **kwargs: Any) -> JaxMARLEnv:
    """``jaxmarl/<name>`` as a :class:`JaxMARLEnv` (a multi-agent env).

    Args:
      name: JaxMARL's registry name, without the prefix (``"MPE_simple_spread_v3"``).
      flatten, max_episode_steps: see :class:`JaxMARLEnv`.
      **kwargs: passed to ``jaxmarl.make`` (the env's constructor arguments:
        ``max_steps=`` for MPE, ``episode_length=`` for multi-agent brax, ...).

    Raises:
      ImportError: jaxmarl is not installed (one line naming the extra).
      ValueError: ``name`` is not in JaxMARL's registry (the message gives the
        closest name, or lists them all); ``auto_reset=True`` for a
        multi-agent brax task (this adapter resets it); what
        :class:`JaxMARLEnv` raises.
    """
    jaxmarl = import_family("jaxmarl", "jaxmarl", "marl")
    if name not in jaxmarl.registered_envs:
        raise unknown_name(name, "jaxmarl", jaxmarl.registered_envs)
    if name in _MABRAX_NAMES:
        if kwargs.get("auto_reset", False):
            raise ValueError(f"jaxmarl/{name}: auto_reset={kwargs['auto_reset']!r}; multi-agent "
                             "brax is made with auto_reset=False (the adapter resets it)")
        kwargs["auto_reset"] = False
    return JaxMARLEnv(jaxmarl.make(name, **kwargs), _JAXMARL_PREFIX + name, flatten=flatten,
                      max_episode_steps=max_episode_steps)


def make_jaxmarl(name: str, max_episode_steps: int | None = None, **kwargs: Any) -> Any:
    """``jaxmarl/<name>`` as an :class:`~jaxtrainer.envs.Env` for single-agent
    algorithms: :func:`make_jaxmarl_multi_agent` seen through
    :class:`~jaxtrainer.envs.agents_as_envs.AgentsAsEnvs` (each env of a batch is
    one agent of a game; ``num_envs`` counts agents, a multiple of ``num_agents``).

    Raises:
      ValueError: as :func:`make_jaxmarl_multi_agent` (an unknown name).
      ImportError: as :func:`make_jaxmarl_multi_agent` (jaxmarl not installed).
    """
    from jaxtrainer.envs.agents_as_envs import AgentsAsEnvs

    return AgentsAsEnvs(make_jaxmarl_multi_agent(name, max_episode_steps=max_episode_steps,
                                                 **kwargs))
