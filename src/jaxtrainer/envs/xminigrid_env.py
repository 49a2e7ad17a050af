"""Adapter for XLand-MiniGrid: ``make("xminigrid/<name>")``.

XLand-MiniGrid (PyPI ``xminigrid``, tested with 0.9.3) is imported only when an
``xminigrid/...`` environment is made (``pip install -e ".[xminigrid]"``).
Names are its registry's, e.g. ``xminigrid/MiniGrid-Empty-5x5``,
``xminigrid/MiniGrid-DoorKey-5x5``. The ``XLand-MiniGrid-R*`` meta-RL
environments also need a ruleset (a benchmark's task) in their params: pass
``params=`` with one, as XLand-MiniGrid's documentation shows.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxtrainer.envs.families import import_family, unknown_name
from jaxtrainer.envs.timestep_env import TimestepEnv

_XMINIGRID_PREFIX = "xminigrid/"


class XMiniGridEnv(TimestepEnv):
    """An XLand-MiniGrid environment behind the :class:`~jaxtrainer.envs.Env` interface.

    XLand-MiniGrid marks the end of an episode with step type ``LAST``; its
    ``discount`` is 0 on a terminal state (the goal) and 1 on the time limit
    (``step_num == max_steps``), which tells terminated from truncated.

    Observations: ``float32[V * V * 2]`` by default, the agent's
    ``uint8[V, V, 2]`` view (tile, colour; ``V = view_size``, 7 by default)
    flattened (``float32[98]``); with ``flatten=False`` the ``uint8`` array.
    Actions: ``int32[]`` in ``[0, 6)``. Rewards: ``1 - 0.9 * steps / max_steps``
    on reaching the goal, else 0.

    Args:
      env: an XLand-MiniGrid ``Environment`` (from ``xminigrid.make``).
      params: its ``EnvParams``.
      name: the id reported in :attr:`name`.
      flatten: see :class:`TimestepEnv`.
    """

    def __init__(self, env: Any, params: Any, name: str, flatten: bool = True) -> None:
        self.env = env
        self.params = params
        super().__init__(name, env.num_actions(params), int(params.max_steps), flatten)

    def reset_timestep(self, key: jax.Array) -> Any:
        return self.env.reset(self.params, key)

    def step_timestep(self, timestep: Any, action: jax.Array) -> Any:
        return self.env.step(self.params, timestep, action)

    def ended(self, timestep: Any) -> tuple[jax.Array, jax.Array]:
        last = timestep.last()
        return last & (timestep.discount == 0), last & (timestep.discount != 0)


def make_xminigrid(name: str, flatten: bool = True, params: Any = None,
                   **kwargs: Any) -> XMiniGridEnv:
    """``xminigrid/<name>`` as an :class:`XMiniGridEnv`.

    Args:
      name: the registry name, without the prefix (``"MiniGrid-Empty-5x5"``).
      flatten: observations as ``float32[size]`` (default) or the ``uint8`` view.
      params: ``EnvParams`` replacing the registered ones.
      **kwargs: ``EnvParams`` fields to replace (``max_steps=``, ``view_size=``, ...).

    Raises:
      ImportError: xminigrid is not installed (one line naming the extra).
      ValueError: ``name`` is not registered (the message gives the closest name).
    """
    xminigrid = import_family("xminigrid", "xminigrid", "xminigrid")
    names = xminigrid.registered_environments()
    if name not in names:
        raise unknown_name(name, "xminigrid", names)
    env, default_params = xminigrid.make(name, **kwargs)
    return XMiniGridEnv(env, default_params if params is None else params,
                        _XMINIGRID_PREFIX + name, flatten)
