"""Host environments from EnvPool: ``make("envpool/<id>")``, a C++ env pool stepped from
inside the compiled program.

EnvPool (PyPI ``envpool``, tested with 1.2.5 on Linux x86-64, Python 3.11,
numpy 2.4) is imported only when an ``envpool/...`` environment is made
(``pip install -e ".[envpool]"``). Names are its registry's task ids
(``envpool/CartPole-v1``, ``envpool/Pong-v5``, ``envpool/HalfCheetah-v5``;
``envpool.list_all_envs()``). It is reached the way
:mod:`jaxtrainer.envs.gymnasium_env` reaches Gymnasium, with the same limits
(strategies ``single``, ``pmap``, ``shard_map``; no vmap of whole env batches;
pools not checkpointed): each batched reset makes a synchronous pool
(``envpool.make(id, env_type="gymnasium", num_envs=n, seed=...)``) seeded from
the reset's key, each batched step is one ordered host callback.

EnvPool resets an ended env on the step AFTER its last one; the adapter
resets it on the same step instead, as the :class:`~jaxtrainer.envs.Env`
contract wants: the envs that ended are stepped once more at once (EnvPool's
``env_id=`` subset step, which only resets them), their first observation
returned and the reached one kept in ``final_obs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxtrainer.envs.families import import_family, unknown_name
from jaxtrainer.envs.gymnasium_env import GymnasiumEnv, pool_of, register_pool

_ENVPOOL_PREFIX = "envpool/"


def _envpool() -> Any:
    return import_family("envpool", "envpool", "envpool")


class EnvPoolEnv(GymnasiumEnv):
    """An EnvPool task id as a host :class:`~jaxtrainer.envs.Env` (see the module).

    Observations: ``float32[*obs_shape]`` (EnvPool's ``Box`` observation cast;
    CartPole-v1: ``float32[4]``; Atari ``-v5``: ``float32[4, 84, 84]``, stacked
    grey frames with values 0..255). Actions: ``int32[]`` in ``[0, n)`` for
    ``Discrete(n)``, ``float32[action_size]`` for ``Box``. The time limit is
    the task's ``max_episode_steps`` (``truncated``); the env's own ends are
    ``terminated``.

    Args:
      env_id: an EnvPool task id (``"CartPole-v1"``).
      name: the id reported in :attr:`name`.
      **kwargs: passed to ``envpool.make`` for each pool (``max_episode_steps=``,
        ``episodic_life=``, ``img_height=``, ...; not ``num_envs``, ``seed``,
        ``env_type``, which the adapter sets).

    Raises:
      TypeError: an observation space other than ``Box`` or an action space other
        than ``Discrete`` or ``Box``.
    """

    def __init__(self, env_id: str, name: str, **kwargs: Any) -> None:
        self.env_id, self.kwargs, self.name = env_id, kwargs, name
        probe = _envpool().make(env_id, env_type="gymnasium", num_envs=1, **kwargs)
        self.set_spaces(probe.observation_space, probe.action_space)
        self.max_episode_steps = int(getattr(probe.spec.config, "max_episode_steps", 0) or 0)
        probe.close()
        self.batch_through_host()

    def new_pool(self, seed: np.ndarray, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
        pool = _envpool().make(self.env_id, env_type="gymnasium", num_envs=num_envs,
                               seed=int(seed), **self.kwargs)
        obs, _ = pool.reset()
        return register_pool(pool), np.asarray(obs, np.float32)

    def step_pool(self, handle: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, ...]:
        pool = pool_of(handle, "envpool")
        action = np.asarray(action)
        obs, reward, terminated, truncated, info = pool.step(action)
        obs = np.array(obs, np.float32)
        final = obs.copy()
        ended = np.flatnonzero(np.logical_or(terminated, truncated))
        if ended.size:  # step the ended envs once more: EnvPool only resets them
            first, *_, reset_info = pool.step(np.zeros_like(action[ended]), env_id=ended)
            obs[np.asarray(reset_info["env_id"])] = first
        return (obs, np.asarray(reward, np.float32), np.asarray(terminated, np.bool_),
                np.asarray(truncated, np.bool_), final)


def make_envpool(env_id: str, **kwargs: Any) -> EnvPoolEnv:
    """``envpool/<id>`` as an :class:`EnvPoolEnv`.

    Args:
      env_id: an EnvPool task id, without the prefix (``"CartPole-v1"``).
      **kwargs: see :class:`EnvPoolEnv`.

    Raises:
      ImportError: envpool is not installed, or does not import here (one line
        naming the extra).
      ValueError: ``env_id`` is not registered (the message gives the closest id).
    """
    names = _envpool().list_all_envs()
    if env_id not in names:
        raise unknown_name(env_id, "envpool", names)
    return EnvPoolEnv(env_id, _ENVPOOL_PREFIX + env_id, **kwargs)
