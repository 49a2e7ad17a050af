"""``make(name)``: environments by name."""

from __future__ import annotations

from typing import Any

import gymnax

from jaxtrainer.envs.base import Env
from jaxtrainer.envs.brax_env import BRAX_ENV_NAMES, BraxEnv
from jaxtrainer.envs.gymnax_env import GymnaxEnv

BRAX_PREFIX = "brax/"


def available() -> list[str]:
    """Every name :func:`make` accepts: gymnax's ``registered_envs`` and
    ``brax/<name>`` for brax's environments."""
    return list(gymnax.registered_envs) + [BRAX_PREFIX + n for n in BRAX_ENV_NAMES]


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown environment {name!r}; available: {', '.join(available())}")


def make(name: str, **kwargs: Any) -> Env:
    """Build an environment by name.

    Args:
      name: a gymnax id (``"CartPole-v1"``, ``"Breakout-MinAtar"``, ...) or
        ``"brax/<env>"`` (``"brax/ant"``); see :func:`available`.
      **kwargs: for gymnax, ``params=`` (an ``EnvParams`` replacing the defaults)
        and the env constructor's keyword arguments; for brax,
        ``episode_length=`` (default 1000) and the env constructor's keyword
        arguments (``backend=``, ...).

    Returns:
      An :class:`Env` with auto-reset, terminated/truncated kept apart and
      episode statistics.

    Raises:
      ValueError: ``name`` is unknown; the message lists the available names.
    """
    if name.startswith(BRAX_PREFIX):
        brax_name = name[len(BRAX_PREFIX):]
        import brax.envs  # slow import: only for brax names

        episode_length = kwargs.pop("episode_length", 1000)
        try:
            env = brax.envs.get_environment(brax_name, **kwargs)
        except KeyError:
            raise _unknown(name) from None
        return BraxEnv(env, episode_length=episode_length, name=name)
    if name not in gymnax.registered_envs:
        raise _unknown(name)
    params = kwargs.pop("params", None)
    env, default_params = gymnax.make(name, **kwargs)
    return GymnaxEnv(env, default_params if params is None else params, name=name)
