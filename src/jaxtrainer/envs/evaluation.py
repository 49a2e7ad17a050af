"""Policy evaluation on fresh episodes, never the training envs' episodes in progress.

Evaluation episodes are numbered ``0 .. num_episodes - 1`` over all devices,
and everything about episode ``e`` (its start state, every action and env key
it draws) comes from ``episode_key(key, e)`` alone
(:func:`jaxtrainer.distributed.keys.episode_key`). Device ``d`` of ``n`` runs
episodes ``d * num_episodes / n`` onwards (:func:`episode_share`), so the same
key evaluates the same episodes on any device count, and the results differ
only by the order of float sums.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxtrainer.distributed import axis_index, local_size
from jaxtrainer.distributed.keys import episode_key, sub_key
from jaxtrainer.metrics import Mean

if TYPE_CHECKING:
    from jaxtrainer.envs.base import Env, StepInfo

PolicyFn = Callable[[Any, Any, jax.Array], jax.Array]


class Episodes(NamedTuple):
    """The first episode of each of ``n`` environments (:func:`run_episodes`).

    Attributes:
      returns: ``float32[n]`` undiscounted return (0 where not finished).
      lengths: ``int32[n]`` steps (0 where not finished).
      finished: ``bool[n]`` the episode ended within the steps run.
      obs_moments: with ``obs_shift`` (:func:`run_episodes`), the observations the
        ``n`` envs acted on in their first episodes as ``(count: float32[], sum:
        float32[*observation_shape], square_sum: ...)`` of ``obs - obs_shift``, summed
        over the envs at every step (a small loop state: per-env sums would hold
        ``n`` times the observation in the loop, which on a TPU pushes the
        simulator's state out of on-chip memory); ``None`` without.
    """

    returns: jax.Array
    lengths: jax.Array
    finished: jax.Array
    obs_moments: tuple[jax.Array, jax.Array, jax.Array] | None = None


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


_RESET_KEY, _STEP_KEY = 0, 1
"""Uses of an episode's key: ``sub_key(k, _RESET_KEY)`` resets its env, and step
``i`` draws ``fold_in(sub_key(k, _STEP_KEY), i)``, split into the action's key
and the env's."""


def episode_share(num_episodes: int, what: str = "eval_episodes") -> tuple[int, jax.Array]:
    """This device's share of ``num_episodes`` episodes numbered over all
    devices: ``(count, first)``, episodes ``first .. first + count - 1``
    (``count = num_episodes / num_devices``, ``first = device * count``:
    ``(num_episodes, 0)`` outside a mapped axis and for a population member,
    :func:`~jaxtrainer.distributed.member_scope`).

    Raises:
      ValueError: ``num_episodes`` does not split over the devices; the message
        names ``what``, the number and the device count.
    """
    count = local_size(num_episodes, what)
    return count, axis_index() * count


def _one_by_one(act: Callable[..., tuple[jax.Array, Any]]) -> Callable[..., tuple[jax.Array, Any]]:
    """``act(params, obs[n], keys[n], memory[n])``: the batched policy ``act``
    called per episode, each with its own key (vmapped over batches of one), so
    an episode's actions do not depend on the other episodes of its batch."""
    def one(params, obs, key, memory):
        add = lambda tree: jax.tree.map(lambda x: x[None], tree)  # noqa: E731
        action, memory = act(params, add(obs), key, add(memory))
        return jax.tree.map(lambda x: x[0], (action, memory))

    return jax.vmap(one, in_axes=(None, 0, 0, 0))


def _observed(moments: tuple[jax.Array, jax.Array, jax.Array] | None, obs: jax.Array,
              finished: jax.Array, shift: jax.Array | None):
    """:attr:`Episodes.obs_moments` with the ``obs[n, ...]`` of the envs whose first
    episode goes on (``finished`` false) added; ``None`` stays ``None``."""
    if moments is None:
        return None
    count, total, square = moments
    x = jnp.asarray(obs, jnp.float32) - shift
    active = jnp.logical_not(finished)
    x = jnp.where(active.reshape((-1,) + (1,) * (x.ndim - 1)), x, 0.0)
    return (count + jnp.sum(active, dtype=jnp.float32), total + jnp.sum(x, axis=0),
            square + jnp.sum(jnp.square(x), axis=0))


def run_episodes(env: Env, policy_fn: PolicyFn, params: Any, key: jax.Array, num_episodes: int,
                 max_steps: int | None = None,
                 initial_carry: Callable[[int], Any] | None = None,
                 first_episode: int | jax.Array = 0, *, fixed_length: bool = False,
                 obs_shift: jax.Array | None = None) -> Episodes:
    """The per-episode results that :func:`evaluate_policy` averages.

    Runs episodes ``first_episode .. first_episode + num_episodes - 1``, each
    in an environment of its own from a fresh reset (never a training env's
    state), for at most ``max_steps`` steps in one ``lax.while_loop``, which
    ends as soon as every env has finished its first episode (an env with a
    long time limit and short episodes, such as Craftax's 10,000 steps, stops
    early); only its FIRST episode is recorded. Episode ``e`` draws every key
    from ``episode_key(key, e)`` (see :data:`_RESET_KEY`), and the policy acts
    on each episode with that episode's key, so an episode's result depends on
    ``key`` and ``e`` alone: not on the batch it runs in, the device, or when
    the loop ends. Jittable.

    Args: as :func:`evaluate_policy`, and
      first_episode: the number of the first episode (``int32[]``; a device's
        share starts at :func:`episode_share`'s ``first``).
      fixed_length: run all ``max_steps`` steps in one ``lax.scan`` instead (no
        early end; the results are the same, as nothing recorded changes after an
        env's first episode ends).
      obs_shift: ``float32[*observation_shape]``: also sum the observations each env
        acts on during its first episode, less ``obs_shift``, and their squares
        (:attr:`Episodes.obs_moments`; moments about a running mean stay accurate in
        ``float32``).

    Returns:
      :class:`Episodes` with arrays of shape ``[num_episodes]``.
    """
    max_steps = env.max_episode_steps if max_steps is None else int(max_steps)
    numbers = jnp.asarray(first_episode, jnp.int32) + jnp.arange(num_episodes, dtype=jnp.int32)
    own = jax.vmap(lambda e: episode_key(key, e))(numbers)
    obs, state = jax.vmap(env.reset)(jax.vmap(lambda k: sub_key(k, _RESET_KEY))(own))
    step_streams = jax.vmap(lambda k: sub_key(k, _STEP_KEY))(own)
    finished = jnp.zeros((num_episodes,), jnp.bool_)
    returns = jnp.zeros((num_episodes,), jnp.float32)
    lengths = jnp.zeros((num_episodes,), jnp.int32)
    start, act = with_memory(policy_fn, initial_carry)
    act = _one_by_one(act)

    def one_step(i, loop):
        obs, state, memory, finished, returns, lengths, moments = loop
        keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, i)))(step_streams)
        moments = _observed(moments, obs, finished, obs_shift)
        # only each env's first episode counts: its memory never needs a reset
        action, memory = act(params, obs, keys[:, 0], memory)
        obs, state, info = jax.vmap(env.step)(keys[:, 1], state, action)
        first_end = jnp.logical_and(info.done, jnp.logical_not(finished))
        returns = jnp.where(first_end, info.episode_return, returns)
        lengths = jnp.where(first_end, info.episode_length, lengths)
        return (obs, state, memory, jnp.logical_or(finished, info.done), returns, lengths,
                moments)

    def running(carry):
        i, loop = carry
        return jnp.logical_and(i < max_steps, jnp.logical_not(jnp.all(loop[3])))

    def body(carry):
        i, loop = carry
        return i + 1, one_step(i, loop)

    moments = None
    if obs_shift is not None:
        zeros = jnp.zeros(jnp.shape(obs)[1:], jnp.float32)
        moments = (jnp.zeros((), jnp.float32), zeros, zeros)
    loop = (obs, state, start(num_episodes), finished, returns, lengths, moments)
    if fixed_length:
        loop = jax.lax.fori_loop(0, max_steps, one_step, loop)  # static bounds: a scan
    else:  # ends once every env has finished its first episode (or at max_steps)
        _, loop = jax.lax.while_loop(running, body, (jnp.zeros((), jnp.int32), loop))
    _, _, _, finished, returns, lengths, moments = loop
    return Episodes(returns, lengths, finished, moments)


def evaluate_policy(
    env: Env,
    policy_fn: PolicyFn,
    params: Any,
    key: jax.Array,
    num_episodes: int,
    max_steps: int | None = None,
    initial_carry: Callable[[int], Any] | None = None,
    first_episode: int | jax.Array = 0,
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
      first_episode: the number of the first episode (:func:`run_episodes`);
        episode ``e`` draws its keys from ``episode_key(key, e)``.

    Returns:
      ``{"episode_return": Mean, "episode_length": Mean}`` over completed episodes
      (count 0, i.e. not logged, when none completed).
    """
    episodes = run_episodes(env, policy_fn, params, key, num_episodes, max_steps, initial_carry,
                            first_episode)
    return {
        "episode_return": Mean.of(episodes.returns, mask=episodes.finished),
        "episode_length": Mean.of(episodes.lengths, mask=episodes.finished),
    }


def evaluation_metrics(env: Env, policy_fn: PolicyFn, params: Any, key: jax.Array,
                       eval_episodes: int,
                       initial_carry: Callable[[int], Any] | None = None) -> dict[str, Mean]:
    """The ``evaluation_step`` metrics of every shipped RL module.

    :func:`evaluate_policy` on ``eval_episodes`` fresh episodes numbered over
    all devices (each runs its share, :func:`episode_share`, which raises a
    ValueError naming both numbers when they do not divide), each run up to the
    env's time limit, completed episodes only; ``initial_carry`` for a policy
    with memory, as there. ``key`` is the evaluation's key, the same on every
    device: the result is the same on any device count (up to the order of
    float sums).

    Returns:
      ``{"eval/episode_return": Mean, "eval/episode_length": Mean}``.
    """
    num, first = episode_share(eval_episodes)
    result = evaluate_policy(env, policy_fn, params, key, num, initial_carry=initial_carry,
                             first_episode=first)
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
