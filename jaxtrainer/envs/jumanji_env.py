"""Adapter for Jumanji: ``make("jumanji/<name>")``.

Jumanji (PyPI ``jumanji``, tested with 1.1.2) is imported only when a
``jumanji/...`` environment is made (``pip install -e ".[jumanji]"``). Names are
its registry's, e.g. ``jumanji/Snake-v1``, ``jumanji/Game2048-v1``. Environments
with a discrete action space (``DiscreteArray``) are supported; multi-discrete
and continuous ones raise :class:`TypeError`.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxtrainer.envs.families import import_family, unknown_name
from jaxtrainer.envs.timestep_env import TimestepEnv

JUMANJI_PREFIX = "jumanji/"


class JumanjiEnv(TimestepEnv):
    """A Jumanji environment behind the :class:`~jaxtrainer.envs.Env` interface.

    Jumanji's ``reset(key) -> (state, timestep)`` and ``step(state, action) ->
    (state, timestep)``; a ``LAST`` timestep with ``discount == 0`` is terminal,
    with ``discount != 0`` a time limit (truncated). The env state is the pair.

    Observations: ``float32[size]``, Jumanji's structured observation (a
    NamedTuple of arrays) with every field flattened and concatenated in field
    order (``Snake-v1``: ``grid[12, 12, 5]``, ``step_count[]``,
    ``action_mask[4]`` -> ``float32[725]``). Actions: ``int32[]`` in
    ``[0, num_values)``. Rewards: Jumanji's.

    Args:
      env: a Jumanji ``Environment`` (from ``jumanji.make``).
      name: the id reported in :attr:`name`.

    Raises:
      TypeError: the action spec is not a ``DiscreteArray``.
    """

    def __init__(self, env: Any, name: str) -> None:
        self.env = env
        spec = env.action_spec
        if not hasattr(spec, "num_values") or getattr(spec, "shape", ()) != ():
            raise TypeError(f"{name}: action spec {spec} is not supported "
                            "(a discrete DiscreteArray only)")
        super().__init__(name, int(spec.num_values), int(getattr(env, "time_limit", 0) or 0))

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


def make_jumanji(name: str, **kwargs: Any) -> JumanjiEnv:
    """``jumanji/<name>`` as a :class:`JumanjiEnv`.

    Args:
      name: the registry name, without the prefix (``"Snake-v1"``).
      **kwargs: passed to ``jumanji.make`` (the env's constructor arguments,
        e.g. ``num_rows=``, ``time_limit=`` for Snake).

    Raises:
      ImportError: jumanji is not installed (one line naming the extra).
      ValueError: ``name`` is not registered (the message gives the closest name).
      TypeError: a non-discrete action space.
    """
    jumanji = import_family("jumanji", "jumanji", "jumanji")
    names = jumanji.registered_environments()
    if name not in names:
        raise unknown_name(name, "jumanji", names)
    return JumanjiEnv(jumanji.make(name, **kwargs), JUMANJI_PREFIX + name)
