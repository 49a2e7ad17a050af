"""Adapter for navix (MiniGrid in JAX): ``make("navix/<name>")``.

navix (PyPI ``navix``, tested with 0.7.4) is imported only when a ``navix/...``
environment is made (``pip install -e ".[navix]"``). Names are navix's registry
keys, e.g. ``navix/Navix-Empty-5x5-v0``, ``navix/Navix-DoorKey-5x5-v0``.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxtrainer.envs.families import import_family, unknown_name
from jaxtrainer.envs.timestep_env import TimestepEnv

_NAVIX_PREFIX = "navix/"


class NavixEnv(TimestepEnv):
    """A navix environment behind the :class:`~jaxtrainer.envs.Env` interface.

    navix's step type tells truncation (``t >= max_steps``, 1) from termination
    (2, e.g. the goal reached); navix's lazy reset on the step after the last
    is replaced by the eager auto-reset of :class:`TimestepEnv`.

    Observations: ``float32[H * W * C]`` by default, navix's observation
    flattened (``Navix-Empty-5x5-v0``: its ``uint8[5, 5, 3]`` symbolic
    first-person view becomes ``float32[75]``); with ``flatten=False`` navix's
    own array. Actions: ``int32[]`` in ``[0, num_actions)`` (7 for MiniGrid's
    action set). Rewards: navix's (1 on reaching the goal in the Empty rooms).

    Args:
      env: a navix ``Environment`` (from ``navix.make``).
      name: the id reported in :attr:`name`.
      flatten: see :class:`TimestepEnv`.
    """

    def __init__(self, env: Any, name: str, flatten: bool = True) -> None:
        self.env = env
        space = env.action_space
        super().__init__(name, int(space.maximum) - int(space.minimum) + 1,
                         int(env.max_steps), flatten)

    def reset_timestep(self, key: jax.Array) -> Any:
        return self.env.reset(key)

    def step_timestep(self, timestep: Any, action: jax.Array) -> Any:
        return self.env.step(timestep, action)

    def ended(self, timestep: Any) -> tuple[jax.Array, jax.Array]:
        return timestep.is_termination(), timestep.is_truncation()


def make_navix(name: str, flatten: bool = True, **kwargs: Any) -> NavixEnv:
    """``navix/<name>`` as a :class:`NavixEnv`.

    Args:
      name: navix's registry name, without the prefix (``"Navix-Empty-5x5-v0"``).
      flatten: observations as ``float32[size]`` (default) or navix's own.
      **kwargs: passed to ``navix.make``: ``max_steps=`` (the time limit,
        navix's default 100), ``observation_fn=``, ...

    Raises:
      ImportError: navix is not installed (one line naming the extra).
      ValueError: ``name`` is not in navix's registry (the message gives the
        closest name).
    """
    navix = import_family("navix", "navix", "navix")
    if name not in navix.registry():
        raise unknown_name(name, "navix", navix.registry())
    return NavixEnv(navix.make(name, **kwargs), _NAVIX_PREFIX + name, flatten)
