"""Adapter for Jumanji: ``make("jumanji/<name>")``.

Jumanji (PyPI ``jumanji``, tested with 1.1.2) is imported only when a
``jumanji/...`` environment is made (``pip install -e ".[jumanji]"``). Names are
its registry's, e.g. ``jumanji/Snake-v1``, ``jumanji/Game2048-v1``,
``jumanji/Minesweeper-v0``. Environments with a discrete action space
(``DiscreteArray``) or a multi-discrete one (``MultiDiscreteArray`` with one
axis: ``Minesweeper-v0``'s ``(row, col)``, ``BinPack-v2``'s ``(ems, item)``)
are supported; continuous ones raise :class:`TypeError`.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxtrainer.envs.families import import_family, unknown_name
from jaxtrainer.envs.timestep_env import TimestepEnv

_JUMANJI_PREFIX = "jumanji/"


class JumanjiEnv(TimestepEnv):
    """A Jumanji environment behind the :class:`~jaxtrainer.envs.Env` interface.

    Jumanji's ``reset(key) -> (state, timestep)`` and ``step(state, action) ->
    (state, timestep)``; a ``LAST`` timestep with ``discount == 0`` is terminal,
    with ``discount != 0`` a time limit (truncated). The env state is the pair.

    Observations: ``float32[size]``, Jumanji's structured observation (a
    NamedTuple of arrays) with every field flattened and concatenated in field
    order (``Snake-v1``: ``grid[12, 12, 5]``, ``step_count[]``,
    ``action_mask[4]`` -> ``float32[725]``). Actions: ``int32[]`` in
    ``[0, num_values)`` for a ``DiscreteArray``; ``int32[k]`` for a
    ``MultiDiscreteArray`` of shape ``(k,)``, component ``i`` in
    ``[0, num_values[i])`` (:attr:`~jaxtrainer.envs.Env.action_nvec`;
    ``Minesweeper-v0``: ``(10, 10)``, a row and a column). Rewards: Jumanji's.
    Action masks in the observation are only observed, not applied.

    :attr:`max_episode_steps` (what evaluation runs up to) is, in this order:
    ``max_episode_steps`` when given; the env's ``time_limit``; the maximum of
    its observation's ``step_count`` (``Minesweeper-v0``: 90, one square
    revealed a step); its generator's ``max_num_items`` (``BinPack-v2``: 20,
    one item placed a step); else 0.

    Args:
      env: a Jumanji ``Environment`` (from ``jumanji.make``).
      name: the id reported in :attr:`name`.
      max_episode_steps: the most steps an episode takes; ``None``: as above.

    Raises:
      TypeError: the action spec is neither a ``DiscreteArray`` nor a
        one-axis ``MultiDiscreteArray``.
    """

    def __init__(self, env: Any, name: str, max_episode_steps: int | None = None) -> None:
        self.env = env
        spec = env.action_spec
        values = np.asarray(getattr(spec, "num_values", np.zeros((0, 0))))
        shape = tuple(getattr(spec, "shape", (None,)))
        if values.ndim > 1 or shape != values.shape:
            raise TypeError(f"{name}: action spec {spec} is not supported "
                            "(a DiscreteArray, or a MultiDiscreteArray of one axis)")
        limit = _episode_limit(env) if max_episode_steps is None else int(max_episode_steps)
        super().__init__(name, int(values.sum()), limit)
        if values.ndim == 1:
            self.set_multi_discrete(values)

    def timestep_of(self, env_state: Any) -> Any:
        return env_state[1]

    def reset_timestep(self, key: jax.Array) -> Any:
        return self.env.reset(key)

    def step_timestep(self, env_state: Any, action: jax.Array) -> Any:
        return self.env.step(env_state[0], action)

    def ended(self, env_state: Any) -> tuple[jax.Array, jax.Array]:
        timestep = env_state[1]
        last = timestep.last()
        return last & (timestep.discount == 0), last & (timestep.discount != 0)


def _episode_limit(env: Any) -> int:
    """The most steps an episode of the Jumanji ``env`` takes (see
    :class:`JumanjiEnv`): its ``time_limit``, its observation's ``step_count``
    maximum, its generator's ``max_num_items``, else 0."""
    time_limit = getattr(env, "time_limit", None)
    if time_limit:
        return int(time_limit)
    step_count = getattr(env.observation_spec, "step_count", None)
    if getattr(step_count, "maximum", None) is not None:
        return int(np.max(step_count.maximum))
    return int(getattr(getattr(env, "generator", None), "max_num_items", 0) or 0)


def make_jumanji(name: str, max_episode_steps: int | None = None, **kwargs: Any) -> JumanjiEnv:
    """``jumanji/<name>`` as a :class:`JumanjiEnv`.

    Args:
      name: the registry name, without the prefix (``"Snake-v1"``).
      max_episode_steps: the most steps an episode takes (what evaluation runs
        up to); ``None``: from the env (see :class:`JumanjiEnv`).
      **kwargs: passed to ``jumanji.make`` (the env's constructor arguments,
        e.g. ``num_rows=``, ``time_limit=`` for Snake).

    Raises:
      ImportError: jumanji is not installed (one line naming the extra).
      ValueError: ``name`` is not registered (the message gives the closest name).
      TypeError: a continuous action space.
    """
    jumanji = import_family("jumanji", "jumanji", "jumanji")
    names = jumanji.registered_environments()
    if name not in names:
        raise unknown_name(name, "jumanji", names)
    return JumanjiEnv(jumanji.make(name, **kwargs), _JUMANJI_PREFIX + name, max_episode_steps)
