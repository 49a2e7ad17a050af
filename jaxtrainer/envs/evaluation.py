"""Policy evaluation on fresh episodes, never the training envs' episodes in progress."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxtrainer.distributed import local_size
from jaxtrainer.envs.base import Env, StepInfo
from jaxtrainer.metrics import Mean

PolicyFn = Callable[[Any, Any, jax.Array], jax.Array]


class Episodes(NamedTuple):
    """The first episode of each of ``n`` environments (:func:`run_episodes`).

    Attributes:
      returns: ``float32[n]`` undiscounted return (0 where not finished).
      lengths: ``int32[n]`` steps (0 where not finished).
      finished: ``bool[n]`` the episode ended within the steps run.
    """

    returns: jax.Array
    lengths: jax.Array
    finished: jax.Array


def with_memory(policy_fn: PolicyFn, initial_carry: Callable[[int], Any] | None,
                ) -> tuple[Callable[[int], Any], Callable[..., tuple[jax.Array, Any]]]:
    """One form for memoryless policies and policies with memory (a recurrent core).

    Returns ``(start, act)``: ``start(n)`` is the memory ``n`` fresh episodes
    begin with (``initial_carry(n)``; ``None`` for a memoryless policy) and
    ``act(params, obs, key, memory) -> (actions, memory)`` one batched step
    (``policy_fn(params, obs, key, carry)`` with memory, ``policy_fn(params,
    obs, key)`` and ``None`` without).
    """
    if initial_carry is None:
        return (lambda n: None), (lambda params, obs, key, memory:
                                  (policy_fn(params, obs, key), None))
    return initial_carry, policy_fn


def run_episodes(env: Env, policy_fn: PolicyFn, params: Any, key: jax.Array, num_episodes: int,
                 max_steps: int | None = None,
                 initial_carry: Callable[[int], Any] | None = None) -> Episodes:
    """The per-episode results that :func:`evaluate_policy` averages.

    Each of ``num_episodes`` environments starts a new episode from its own reset
    (never a training env's state) and runs for at most ``max_steps`` steps in
    one ``lax.while_loop``, which ends as soon as every env has finished its
    first episode (an env with a long time limit and short episodes, such as
    Craftax's 10,000 steps, stops early); only its FIRST episode is recorded.
    Step ``i`` draws the ``i``-th of ``max_steps`` keys, so the results do not
    depend on when the loop ends. Jittable.

    Args: as :func:`evaluate_policy`.

    Returns:
      :class:`Episodes` with arrays of shape ``[num_episodes]``.
    """
    max_steps = env.max_episode_steps if max_steps is None else int(max_steps)
    reset_key, run_key = jax.random.split(key)
    obs, state = env.reset_batch(reset_key, num_episodes)
    finished = jnp.zeros((num_episodes,), jnp.bool_)
    returns = jnp.zeros((num_episodes,), jnp.float32)
    lengths = jnp.zeros((num_episodes,), jnp.int32)
    start, act = with_memory(policy_fn, initial_carry)

    def one_step(loop, step_key):
        obs, state, memory, finished, returns, lengths = loop
        act_key, env_key = jax.random.split(step_key)
        # only each env's first episode counts: its memory never needs a reset
        action, memory = act(params, obs, act_key, memory)
        obs, state, info = env.step_batch(env_key, state, action)
        first_end = jnp.logical_and(info.done, jnp.logical_not(finished))
        returns = jnp.where(first_end, info.episode_return, returns)
        lengths = jnp.where(first_end, info.episode_length, lengths)
        loop = (obs, state, memory, jnp.logical_or(finished, info.done), returns, lengths)
        return loop, None

    keys = jax.random.split(run_key, max_steps)  # step i's key, however early the loop ends

    def running(carry):
        i, loop = carry
        return jnp.logical_and(i < max_steps, jnp.logical_not(jnp.all(loop[3])))

    def body(carry):
        i, loop = carry
        return i + 1, one_step(loop, keys[i])[0]

    loop = (obs, state, start(num_episodes), finished, returns, lengths)
    # ends once every env has finished its first episode (or at max_steps)
    _, (_, _, _, finished, returns, lengths) = jax.lax.while_loop(
        running, body, (jnp.zeros((), jnp.int32), loop))
    return Episodes(returns, lengths, finished)


def evaluate_policy(
    env: Env,
    policy_fn: PolicyFn,
    params: Any,
    key: jax.Array,
    num_episodes: int,
    max_steps: int | None = None,
    initial_carry: Callable[[int], Any] | None = None,
) -> dict[str, Mean]:
    """Run ``num_episodes`` fresh episodes and average the completed ones.

    Each of ``num_episodes`` environments starts a new episode from its own reset
    (never a training env's state) and runs for at most ``max_steps`` steps
    (:func:`run_episodes`); only its FIRST episode counts, and only if it ended within
    ``max_steps``. Counting one episode per env keeps short episodes from being
    over-represented. Jittable; runs per device inside ``evaluation_step``.
    The per-episode values are :func:`run_episodes`'.

    Args:
      env: the environment.
      policy_fn: ``policy_fn(params, obs, key) -> actions`` for a batch:
        ``obs[num_episodes, *observation_shape]`` to actions
        ``[num_episodes, *action_shape]`` (already within the action bounds).
      params: passed to ``policy_fn``.
      key: typed PRNG key.
      num_episodes: number of environments, i.e. episodes at most. Static.
      max_steps: steps to run; ``env.max_episode_steps`` by default (every episode
        then ends by termination or truncation). Static.
      initial_carry: for a policy with memory (a recurrent core):
        ``initial_carry(num_episodes)`` is the carry the episodes start from,
        and ``policy_fn(params, obs, key, carry) -> (actions, carry)``.

    Returns:
      ``{"episode_return": Mean, "episode_length": Mean}`` over completed episodes
      (count 0, i.e. not logged, when none completed).
    """
    episodes = run_episodes(env, policy_fn, params, key, num_episodes, max_steps, initial_carry)
    return {
        "episode_return": Mean.of(episodes.returns, mask=episodes.finished),
        "episode_length": Mean.of(episodes.lengths, mask=episodes.finished),
    }


def evaluation_metrics(env: Env, policy_fn: PolicyFn, params: Any, key: jax.Array,
                       eval_episodes: int,
                       initial_carry: Callable[[int], Any] | None = None) -> dict[str, Mean]:
    """The ``evaluation_step`` metrics of every shipped RL module.

    :func:`evaluate_policy` on ``eval_episodes`` fresh episodes over all devices
    (``eval_episodes / num_devices`` on each; :func:`~jaxtrainer.distributed.local_size`
    raises a ValueError naming both numbers when they do not divide), each run
    up to the env's time limit, completed episodes only; ``initial_carry``
    for a policy with memory, as there.

    Returns:
      ``{"eval/episode_return": Mean, "eval/episode_length": Mean}``.
    """
    num = local_size(eval_episodes, "eval_episodes")
    result = evaluate_policy(env, policy_fn, params, key, num, initial_carry=initial_carry)
    return {f"eval/{name}": value for name, value in result.items()}


def episode_metrics(info: StepInfo, prefix: str = "train") -> dict[str, Mean]:
    """``{prefix}/episode_return`` and ``{prefix}/episode_length``: the means over
    the episodes that ``info`` (a :class:`~jaxtrainer.envs.StepInfo` with any
    leading axes, e.g. ``[num_steps, num_envs]``) completed; an interval where
    none completed reports nothing rather than 0. An env's further episode
    statistics (:attr:`~jaxtrainer.envs.StepInfo.extra_statistics`) are reported
    the same way as ``{prefix}/<name>`` (Craftax: ``train/achievements/collect_wood``,
    the fraction of completed episodes that collected wood)."""
    return {f"{prefix}/episode_return": Mean.of(info.episode_return, mask=info.done),
            f"{prefix}/episode_length": Mean.of(info.episode_length, mask=info.done),
            **{f"{prefix}/{name}": Mean.of(value, mask=info.done)
               for name, value in getattr(info, "extra_statistics", {}).items()}}
