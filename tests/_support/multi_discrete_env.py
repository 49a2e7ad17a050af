"""A tiny multi-discrete environment whose right action vector is learnable."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtrainer import envs

NVEC = (3, 4)
TARGETS = ((2, 1), (0, 3))  # the right action vector for cue 0 and for cue 1
LENGTH = 4


def random_return(length: int = LENGTH) -> float:
    """The expected episode return of the uniform random policy: each step, component
    ``i`` is right with probability ``1 / NVEC[i]``, and the reward is the fraction
    of components that are right."""
    return length * sum(1.0 / n for n in NVEC) / len(NVEC)


class CueVectorEnv(envs.Env):
    """Each step shows a cue ``c`` in {0, 1} (observation ``float32[2]``, one-hot);
    the action is ``int32[2]`` in ``[0, 3) x [0, 4)``, and the reward is the fraction
    of its components equal to ``TARGETS[c]`` (``float32[]`` in {0, 0.5, 1}).
    Episodes are ``LENGTH`` steps (truncated): the best return is ``LENGTH``, the
    uniform random policy's :func:`random_return`."""

    name = "CueVector"
    observation_shape = (2,)
    observation_dtype = jnp.float32
    max_episode_steps = LENGTH

    def __init__(self) -> None:
        self.set_multi_discrete(NVEC)

    @staticmethod
    def _cue(key):
        return jax.random.bernoulli(key).astype(jnp.int32)

    def reset_env(self, key):
        cue = self._cue(key)
        return jax.nn.one_hot(cue, 2), (jnp.zeros((), jnp.int32), cue)

    def step_env(self, key, env_state, action):
        t, cue = env_state
        right = jnp.asarray(action, jnp.int32) == jnp.asarray(TARGETS, jnp.int32)[cue]
        reward = jnp.mean(right.astype(jnp.float32))
        t = t + 1
        truncated = t >= LENGTH
        next_cue = self._cue(key)
        obs = jax.nn.one_hot(next_cue, 2)
        return (obs, (jnp.where(truncated, 0, t), next_cue), reward, jnp.bool_(False),
                truncated, obs)
