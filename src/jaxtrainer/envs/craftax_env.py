"""Adapter for Craftax: ``make("craftax/<name>")``.

Craftax (PyPI ``craftax``, tested with 1.6.1) is imported only when a
``craftax/...`` environment is made (``pip install -e ".[craftax]"``). Names:
``craftax/Craftax-Classic-Symbolic-v1``, ``craftax/Craftax-Classic-Pixels-v1``,
``craftax/Craftax-Symbolic-v1`` and ``craftax/Craftax-Pixels-v1``
(:data:`_CRAFTAX_NAMES`). The pixel variants load (and on first use build and
cache) Craftax's textures when made, which prints a line and takes about a
minute the first time.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer.envs.base import Action, Env, Observation, all_batched, auto_reset, positive_steps
from jaxtrainer.envs.families import import_family, unknown_name

_CRAFTAX_PREFIX = "craftax/"

_RESET_RATIO = 16
"""Envs of a batch per fresh world generated each step (:class:`CraftaxEnv`):
Craftax's own PPO baseline resets optimistically with this ratio."""

_CRAFTAX_NAMES = ("Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1",
                 "Craftax-Symbolic-v1", "Craftax-Pixels-v1")
"""The names after ``craftax/`` (Craftax's own, its auto-resetting duplicates left out)."""


class CraftaxEnv(Env):
    """A Craftax environment behind the :class:`~jaxtrainer.envs.Env` interface.

    Craftax steps like gymnax but reports one ``done`` for death (and, in
    Craftax-Classic, standing in lava; in Craftax, beating the final boss) and
    for its time limit (``timestep >= max_timesteps``). Here a ``done`` whose
    state would still be over with its clock set back to 0 is ``terminated``;
    one that is only the time limit is ``truncated``. The adapter steps
    Craftax's env without its own reset and resets through
    :func:`~jaxtrainer.envs.base.auto_reset`, keeping the reached observation in
    ``final_obs``.

    Observations: ``float32``, Craftax's own: the symbolic variants a flat vector
    (``Craftax-Classic-Symbolic-v1``: ``float32[1345]``, ``Craftax-Symbolic-v1``:
    ``float32[8268]``), the pixel variants an image ``float32[H, W, 3]`` with
    values in ``[0, 1]`` (``Craftax-Classic-Pixels-v1``: ``[63, 63, 3]``,
    ``Craftax-Pixels-v1``: ``[130, 110, 3]``; for ``network.torso=cnn``).
    Actions: ``int32[]`` in ``[0, num_actions)`` (17 in Classic, 43 in Craftax).
    Rewards: Craftax's (1 per achievement unlocked, plus health changes / 10).

    Episode statistics: besides return and length, one
    ``achievements/<achievement>`` per achievement in
    :attr:`~jaxtrainer.envs.StepInfo.extra_statistics` (1.0 if the episode
    unlocked it so far, else 0.0), so training metrics include e.g.
    ``train/achievements/collect_wood``: the fraction of the completed
    episodes that collected wood.

    Resets, batched: generating a world costs about 30 steps, and under
    ``vmap`` an auto-reset generates one for every env at every step (a select
    keeps it only where the episode ended). A batch of ``B`` envs instead
    generates ``ceil(B / reset_ratio)`` fresh worlds a step, and the envs that
    end in that step take them in turn (the ``i``-th to end takes world ``i mod
    R``): Craftax's optimistic reset (Matthews et al. 2024, "Craftax: A
    Lightning-Fast Benchmark for Open-Ended Reinforcement Learning", its PPO
    baseline's reset wrapper). When more envs end in one step than there are
    fresh worlds, some start in the same world (their later steps draw their
    own keys). Episodes last hundreds of steps, so that is rare; ``reset_ratio=1``
    gives every env its own world (exact, and about 15x slower on CPU: 64 envs
    step at 8.4k env steps/s with 4 worlds, 0.55k with 64). An unbatched step
    always resets exactly.

    Args:
      env: a Craftax env without auto-reset (``make_craftax_env_from_name(name,
        auto_reset=False)``).
      params: its ``EnvParams``.
      name: the id reported in :attr:`name`.
      achievements: the achievement names, lower case, in the order of the
        state's ``achievements`` flags.
      reset_ratio: envs of a batch per fresh world a step (>= 1).

    Raises:
      ValueError: ``reset_ratio`` is not an int >= 1.
    """

    def __init__(self, env: Any, params: Any, name: str, achievements: list[str],
                 reset_ratio: int = _RESET_RATIO) -> None:
        if isinstance(reset_ratio, bool) or not isinstance(reset_ratio, int) or reset_ratio < 1:
            raise ValueError(f"{name}: reset_ratio={reset_ratio!r}: expected an int >= 1 (envs "
                             "of a batch per fresh world generated each step)")
        self.env, self.params, self.name = env, params, name
        self.reset_ratio = reset_ratio
        self.achievements = list(achievements)
        self.discrete = True
        self.num_actions = int(env.action_space(params).n)
        self.action_size = 1
        self.action_low = self.action_high = None
        self.max_episode_steps = int(params.max_timesteps)
        obs = jax.eval_shape(lambda k: self.reset_env(k)[0], jax.random.key(0))
        self.observation_shape = tuple(obs.shape)
        self.observation_dtype = obs.dtype
        exact = CraftaxEnv.step_env.__get__(self)
        self.step_env = jax.custom_batching.custom_vmap(exact)  # batched: the rule below
        self.step_env.def_vmap(self._step_rule)

    def reset_env(self, key: jax.Array) -> tuple[Observation, Any]:
        return self.env.reset_env(key, self.params)

    def set_time_limit(self, max_episode_steps: int) -> None:
        """Truncate episodes after ``max_episode_steps`` steps: Craftax's own
        ``max_timesteps`` (replaced), so no extra world is generated.

        Raises:
          ValueError: not a positive int (naming it).
        """
        limit = positive_steps(max_episode_steps)
        self.params = self.params.replace(max_timesteps=limit)
        self.time_limit = self.max_episode_steps = limit

    def ended(self, state: Any) -> tuple[jax.Array, jax.Array]:
        """``(terminated, truncated)``, ``bool[]`` each, of a state Craftax stepped to."""
        over = self.env.is_terminal(state, self.params)
        terminated = self.env.is_terminal(
            state.replace(timestep=jnp.zeros_like(state.timestep)), self.params)
        return terminated, jnp.logical_and(over, jnp.logical_not(terminated))

    def _step_only(self, step_key: jax.Array, env_state: Any, action: Action):
        """Craftax's step without a reset: ``(obs, stepped, reward, terminated,
        truncated, achievements)``."""
        obs, stepped, reward, _, _ = self.env.step_env(
            step_key, env_state, jnp.asarray(action, jnp.int32), self.params)
        terminated, truncated = self.ended(stepped)
        flags = jnp.asarray(stepped.achievements, jnp.float32)
        extra = {f"achievements/{a}": flags[i] for i, a in enumerate(self.achievements)}
        return obs, stepped, reward, terminated, truncated, extra

    def step_env(self, key: jax.Array, env_state: Any, action: Action):
        """One env's step, reset exactly where its episode ended."""
        step_key, reset_key = jax.random.split(key)
        obs, stepped, reward, terminated, truncated, extra = self._step_only(
            step_key, env_state, action)
        done = jnp.logical_or(terminated, truncated)
        fresh_obs, fresh = self.reset_env(reset_key)
        return (auto_reset(done, fresh_obs, obs), auto_reset(done, fresh, stepped), reward,
                terminated, truncated, obs, extra)

    def _step_rule(self, axis_size: int, in_batched: Any, key: jax.Array, env_state: Any,
                   action: Action):
        """A batch's step: ``ceil(B / reset_ratio)`` fresh worlds shared by the
        envs that end (class docstring); with as many worlds as envs, each
        env's own, as :meth:`step_env` resets it."""
        key, env_state, action = all_batched(axis_size, in_batched, (key, env_state, action))
        keys = jax.vmap(jax.random.split)(key)  # [B, 2]: the step's, the reset's
        obs, stepped, reward, terminated, truncated, extra = jax.vmap(self._step_only)(
            keys[:, 0], env_state, action)
        done = jnp.logical_or(terminated, truncated)
        worlds = min(math.ceil(axis_size / self.reset_ratio), axis_size)
        fresh_obs, fresh = jax.vmap(self.reset_env)(keys[:worlds, 1])
        if worlds < axis_size:  # the i-th env to end takes world i mod R
            pick = (jnp.cumsum(done) - 1) % worlds
            fresh_obs, fresh = jax.tree.map(lambda x: x[pick], (fresh_obs, fresh))
        out = (jax.vmap(auto_reset)(done, fresh_obs, obs), jax.vmap(auto_reset)(done, fresh, stepped),
               reward, terminated, truncated, obs, extra)
        return out, jax.tree.map(lambda _: True, out)


def make_craftax(name: str, params: Any = None, reset_ratio: int = _RESET_RATIO,
                 **kwargs: Any) -> CraftaxEnv:
    """``craftax/<name>`` as a :class:`CraftaxEnv`.

    Args:
      name: one of :data:`_CRAFTAX_NAMES` (``"Craftax-Classic-Symbolic-v1"``).
      params: Craftax ``EnvParams`` replacing the defaults.
      reset_ratio: envs of a batch per fresh world a step (:class:`CraftaxEnv`;
        ``env.reset_ratio=1`` in a recipe: every env its own world).
      **kwargs: ``EnvParams`` fields to replace (``max_timesteps=``, the time
        limit in steps: 10000 in Classic, 100000 in Craftax by default;
        ``day_length=``, ...).

    Raises:
      ImportError: craftax is not installed (one line naming the extra).
      ValueError: ``name`` is not one of :data:`_CRAFTAX_NAMES` (the message gives
        the closest name).
      TypeError: an unknown ``EnvParams`` field in ``kwargs``.
      ValueError: ``reset_ratio`` is not an int >= 1 (also from :class:`CraftaxEnv`).
    """
    import_family("craftax", "craftax", "craftax")
    craftax_env = importlib.import_module("craftax.craftax_env")
    if name not in _CRAFTAX_NAMES:
        raise unknown_name(name, "craftax", _CRAFTAX_NAMES)
    env = craftax_env.make_craftax_env_from_name(name, auto_reset=False)
    params = env.default_params if params is None else params
    if kwargs:
        params = dataclasses.replace(params, **kwargs)
    variant = "craftax_classic" if "Classic" in name else "craftax"
    achievement = importlib.import_module(f"craftax.{variant}.constants").Achievement
    names = [a.name.lower() for a in sorted(achievement, key=lambda a: a.value)]
    return CraftaxEnv(env, params, _CRAFTAX_PREFIX + name, names, reset_ratio)
