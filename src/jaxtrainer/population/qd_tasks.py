"""Descriptor-bearing tasks for quality-diversity search, by name.

A task maps one genotype to ``(fitness: float32[], descriptor: float32[D])``
(larger fitness is better) and says where genotypes start and which box of
descriptor space the repertoire's grid covers.

* ``"arm"``: QDax's planar arm (``qdax/tasks/arm.py``, after
  ``hucebot/fast_map-elites``): ``num_dims`` joint angles in ``[0, 1]``;
  fitness = minus the standard deviation of the angles; descriptor = the
  end-effector's ``(x, y)`` in ``[0, 1]^2``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms.replay import Transition


class QDTask(NamedTuple):
    """A quality-diversity task.

    Attributes:
      name: how it is reached (:func:`make_task`).
      fn: ``(genotype: float32[num_dims], key) -> (fitness: float32[],
        descriptor: float32[descriptor_size])``, fitness maximised.
      num_dims: genotype size.
      genotype_bounds: ``(low, high)`` of every gene: where generation 0 is drawn
        (uniformly) and where offspring are clipped.
      descriptor_bounds: ``(low, high)`` of every descriptor coordinate: the box
        the repertoire's grid covers.
      descriptor_size: ``D``.
      init: ``key -> float32[num_dims]``, one generation-0 genotype (a policy
        network's initialisation); ``None``: uniform over ``genotype_bounds``.
      rollout: for a task whose genotype is a policy, ``(genotype, key) ->
        (fitness, descriptor, transitions)``, ``fn``'s values with the episode's
        :class:`~jaxtrainer.algorithms.replay.Transition` s (leaves ``[T, ...]``,
        every step of the rollout); ``None`` for any other task.
      policy: with ``rollout``: ``(genotype, obs: float32[..., observation_size])
        -> float32[..., action_size]`` in ``[-1, 1]``, differentiable in both.
      observation_size, action_size: with ``rollout``; 0 otherwise.
    """

    name: str
    fn: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    num_dims: int
    genotype_bounds: tuple[float, float]
    descriptor_bounds: tuple[float, float]
    descriptor_size: int
    init: Callable[[jax.Array], jax.Array] | None = None
    rollout: Callable[[jax.Array, jax.Array],
                      tuple[jax.Array, jax.Array, Transition]] | None = None
    policy: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    observation_size: int = 0
    action_size: int = 0


def arm(genotype: jax.Array) -> tuple[jax.Array, jax.Array]:
    """QDax's planar arm (``qdax.tasks.arm.arm``): ``float32[n]`` normalised joint
    angles -> ``(fitness: float32[], descriptor: float32[2])``.

    Angles are clipped to ``[0, 1]`` and mapped to ``[-pi, pi)``; fitness is
    ``-sqrt(mean((x - mean(x))**2))`` (QDax's code: minus the angles' standard
    deviation, 0 at best); the descriptor is the end-effector position of an arm
    of ``n`` links of length ``1 / (2 n)`` centred at ``(0.5, 0.5)``, so in
    ``[0, 1]^2``.
    """
    x = jnp.clip(genotype, 0.0, 1.0)
    n = genotype.shape[0]
    fitness = jnp.sqrt(jnp.mean(jnp.square(x - jnp.mean(x))))
    angles = jnp.cumsum(2.0 * jnp.pi * x - jnp.pi)
    position = jnp.stack([jnp.sum(jnp.cos(angles)) / (2 * n) + 0.5,
                          jnp.sum(jnp.sin(angles)) / (2 * n) + 0.5])
    return -fitness, position


def _arm_task(num_dims: int = 8) -> QDTask:
    num_dims = arguments.positive_int("num_dims", num_dims, False)
    return QDTask("arm", lambda genotype, key: arm(genotype), num_dims, (0.0, 1.0), (0.0, 1.0), 2)


_FEET = {"walker2d": ("foot", "foot_left")}
"""QDax's ``FEET_NAMES``: the links whose ground contact is the descriptor."""


def _policy_network(hidden_sizes: Sequence[int], action_size: int) -> Any:
    """QDax's ``MLP`` policy (``qdax/core/neuroevolution/networks/networks.py``):
    Dense layers with LeCun-uniform kernels and zero biases, ReLU between, ``tanh``
    after the last."""
    import flax.linen as nn

    class Policy(nn.Module):
        @nn.compact
        def __call__(self, obs: jax.Array) -> jax.Array:
            x = obs
            sizes = (*hidden_sizes, action_size)
            for i, size in enumerate(sizes):
                x = nn.Dense(size, kernel_init=jax.nn.initializers.lecun_uniform())(x)
                x = nn.relu(x) if i < len(sizes) - 1 else jnp.tanh(x)
            return x

    return Policy()


def _feet_contact_task(name: str, base: str, episode_length: int = 1000,
                       policy_hidden_sizes: Sequence[int] = (64, 64), backend: str = "spring",
                       deterministic: bool = True, seed: int = 0) -> QDTask:
    """A QDax ``*_uni`` task on brax's ``base`` env (module docstring). Every
    episode starts from ``env.reset(PRNGKey(seed))`` (``deterministic``, QDax's
    ``create_default_brax_task_components``), or from ``env.reset`` of the
    evaluation's key (QDax's example notebooks' ``play_reset_fn=env.reset``); an
    episode that ends early restarts from its start state (brax's auto-reset), its
    later steps still rolled out (replayed, not scored)."""
    episode_length = arguments.positive_int("episode_length", episode_length, False)
    hidden = arguments.sizes("policy_hidden_sizes", policy_hidden_sizes)
    import brax.envs  # here: the import alone takes seconds
    from jax.flatten_util import ravel_pytree

    env = brax.envs.get_environment(base, backend=backend, debug=True)
    feet = np.array([i for i, link in enumerate(env.sys.link_names) if link in _FEET[base]])
    network = _policy_network(hidden, env.action_size)
    # brax's env.observation_size runs a reset op by op (seconds): its shape, traced, instead
    observation_size = int(jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape[-1])
    obs_example = jnp.zeros((observation_size,), jnp.float32)
    shapes = jax.eval_shape(network.init, jax.random.key(0), obs_example)
    flat, unravel = ravel_pytree(jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), shapes))
    num_dims = int(flat.shape[0])

    def init(key: jax.Array) -> jax.Array:
        return ravel_pytree(network.init(key, obs_example))[0]

    def policy(genotype: jax.Array, obs: jax.Array) -> jax.Array:
        return network.apply(unravel(genotype), obs)

    def contact(state: Any) -> jax.Array:
        c = state.pipeline_state.contact  # QDax's FeetContactWrapper._get_feet_contact
        return jnp.any((c.link_idx[1][None] == feet[:, None]) & (c.dist[None] <= 0),
                       axis=-1).astype(jnp.float32)

    def rollout(genotype: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array, Transition]:
        start = env.reset(jax.random.PRNGKey(seed) if deterministic
                          else jax.random.key_data(key))
        params = unravel(genotype)  # once, not per step: the loop reads the network as is

        def step(carry, t):
            state, ended, ret, touched, steps = carry
            alive = (~ended).astype(jnp.float32)
            action = network.apply(params, state.obs)
            nxt = env.step(state, action)
            terminated = nxt.done > 0
            ended = ended | terminated | (t == episode_length - 1)
            out = Transition(state.obs, action, nxt.reward, nxt.obs, terminated)
            carry = (jax.tree.map(lambda a, b: jnp.where(terminated, a, b), start, nxt), ended,
                     ret + alive * nxt.reward, touched + alive * contact(state), steps + alive)
            return carry, out

        init_carry = (start, jnp.bool_(False), jnp.float32(0.0),
                      jnp.zeros((len(feet),), jnp.float32), jnp.float32(0.0))
        (_, _, ret, touched, steps), transitions = jax.lax.scan(
            step, init_carry, jnp.arange(episode_length))
        return ret, touched / steps, transitions

    return QDTask(name, lambda genotype, key: rollout(genotype, key)[:2], num_dims,
                  (-np.inf, np.inf), (0.0, 1.0), len(feet), init, rollout, policy,
                  observation_size, int(env.action_size))


def _walker2d_uni_task(**kwargs: Any) -> QDTask:
    return _feet_contact_task("walker2d_uni", "walker2d", **kwargs)


TASKS: dict[str, Callable[..., QDTask]] = {"arm": _arm_task, "walker2d_uni": _walker2d_uni_task}
"""``name -> builder(**kwargs) -> QDTask``."""


def make_task(name: str, **kwargs: Any) -> QDTask:
    """The task ``name`` built with ``kwargs`` (``make_task("arm", num_dims=8)``).

    Raises:
      ValueError: an unknown name (listing the known ones) or a bad value.
      TypeError: a keyword the task does not take.
    """
    if name not in TASKS:
        raise ValueError(f"unknown quality-diversity task {name!r}"
                         f"{arguments.did_you_mean(name, list(TASKS))}; expected one of "
                         f"{', '.join(sorted(TASKS))}")
    return TASKS[name](**kwargs)


__all__ = ["QDTask", "TASKS", "arm", "make_task"]
