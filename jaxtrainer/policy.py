"""A trained policy for use outside training: :func:`load_policy`.

>>> act = jaxtrainer.load_policy("runs/ppo/version_0")
>>> env, params = gymnax.make("CartPole-v1")
>>> obs, state = env.reset(key, params)
>>> action = act(obs)                        # greedy: int32[] for CartPole
>>> obs, state, reward, done, info = env.step(key, state, action, params)

Every shipped module exposes its evaluation policy the same way
(:func:`policy_spec`): a batched ``policy(params, obs, key) -> actions`` and the
``params`` it takes from a state. RL modules have ``greedy_policy()`` and
``policy_params(state)`` (with ``normalize_observations`` the params carry the
observation statistics, and the policy normalises raw observations first);
:class:`~jaxtrainer.algorithms.es.NeuroES` acts with its mean solution;
:class:`~jaxtrainer.algorithms.PBT` with the member of the best current fitness,
the one its evaluation reports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp

if TYPE_CHECKING:  # importing the envs imports gymnax, which starts JAX: keep
    from jaxtrainer.envs.base import Env  # `import jaxtrainer` free of it (jax.distributed)

PolicyFn = Callable[[Any, jax.Array, jax.Array], jax.Array]


class PolicySpec(NamedTuple):
    """How a module acts (see :func:`policy_spec`).

    Attributes:
      env: the module's environment.
      greedy: ``greedy(params, obs[n, *observation_shape], key) -> actions[n, ...]``,
        the policy the module's evaluation runs (deterministic; ``key`` unused).
      sample: the same for the stochastic policy the module trains
        (``None`` where the policy is deterministic).
      params: ``params(state) -> params`` for ``greedy`` and ``sample``.
      eval_episodes: the module's evaluation episodes (global).
    """

    env: Env
    greedy: PolicyFn
    sample: PolicyFn | None
    params: Callable[[Any], Any]
    eval_episodes: int


def _onpolicy_sample(module: Any) -> PolicyFn:
    """PPO/A2C: an action sampled from the policy distribution (clipped to the bounds)."""
    from jaxtrainer.algorithms import normalization

    def sample(params, obs, key):
        if module.config.normalize_observations:
            params, obs_stats = params
            obs = normalization.normalize(obs_stats, obs)
        dist, _ = module.network.apply(params, obs)
        return module._env_action(dist.sample(key))
    return sample


def _sac_sample(module: Any) -> PolicyFn:
    """SAC: an action sampled from the squashed Gaussian (on raw observations)."""
    return module.normalizing(lambda params, obs, key: module.sample_action(params, obs, key)[0])


def policy_spec(module: Any) -> PolicySpec:
    """The policy of ``module``: a :class:`PolicySpec`.

    Accepted: modules with ``greedy_policy()``, ``policy_params(state)``, ``env``
    and ``config.eval_episodes`` (PPO, A2C, DQN, SAC, TD3, CEM-RL);
    :class:`~jaxtrainer.algorithms.es.NeuroES` (``act`` with the mean
    solution); a :class:`~jaxtrainer.population.GenerationModule` (its
    population module's); :class:`~jaxtrainer.algorithms.PBT` (its member
    module's; ``params`` then takes one member's state, see :func:`params_of`).

    Raises:
      TypeError: ``module`` exposes no policy (naming its class).
    """
    from jaxtrainer.algorithms.onpolicy import OnPolicyModule
    from jaxtrainer.algorithms.population_core import MemberPopulation
    from jaxtrainer.algorithms.sac import SAC
    from jaxtrainer.population import GenerationModule

    if isinstance(module, GenerationModule):
        return policy_spec(module.population_module)
    if isinstance(module, MemberPopulation):  # PBT, Sweep: the member module's policy
        return policy_spec(module.module)
    if hasattr(module, "greedy_policy") and hasattr(module, "policy_params"):
        sample = (_onpolicy_sample(module) if isinstance(module, OnPolicyModule)
                  else _sac_sample(module) if isinstance(module, SAC) else None)
        return PolicySpec(module.env, module.greedy_policy(), sample, module.policy_params,
                          int(module.config.eval_episodes))
    if callable(getattr(module, "act", None)) and callable(getattr(module, "mean", None)):
        return PolicySpec(module.env, lambda params, obs, key: module.act(params, obs, key), None,
                          module.mean, int(module.eval_episodes))
    raise TypeError(f"{type(module).__name__} exposes no policy: expected greedy_policy() and "
                    "policy_params(state) (as the shipped RL modules), or act() and mean(state) "
                    "(as NeuroES)")


def best_member(module: Any, state: Any) -> int:
    """:class:`~jaxtrainer.algorithms.PBT`: the member with the best current
    fitness (this window's mean of ``fitness_metric``, else the last measured),
    the member whose evaluation ``PBT.evaluation_step`` reports. Host side."""
    small = jax.device_get(state.replace(members=None))  # host copies, free of any sharding
    return int(module.layout.rank(jnp.asarray(module._current_fitness(small)))[0])


def params_of(module: Any, state: Any, member: int | None = None) -> tuple[PolicySpec, Any]:
    """``(policy_spec(module), the policy params of state)``, host side.

    For a population of members (:class:`~jaxtrainer.algorithms.PBT`,
    :class:`~jaxtrainer.algorithms.Sweep`) the params are those of member
    ``member``; by default PBT's :func:`best_member` and a sweep's member 0.

    Raises:
      ValueError: ``member`` outside ``[0, population_size)`` or given for a
        module without members.
    """
    from jaxtrainer.algorithms.pbt import PBT
    from jaxtrainer.algorithms.population_core import MemberPopulation
    from jaxtrainer.population import GenerationModule

    spec = policy_spec(module)
    while isinstance(module, GenerationModule):
        module = module.population_module
    if isinstance(module, MemberPopulation):
        size = module.population_size
        if member is None:
            member = best_member(module, state) if isinstance(module, PBT) else 0
        if not 0 <= member < size:
            raise ValueError(f"member={member!r}: expected an index in [0, {size})")
        state = jax.tree.map(lambda x: x[member], state.members)
    elif member is not None:
        raise ValueError(f"member={member!r}: {type(module).__name__} has no members")
    return spec, spec.params(state)


class Policy:
    """A trained policy: ``act(obs, key=None) -> action``, jitted.

    ``obs``: one observation of shape ``observation_shape`` (e.g. ``float32[4]``
    for CartPole, ``float32[27]`` for brax ant), or a batch
    ``[n, *observation_shape]``; any array-like, cast to the environment's
    observation dtype. Raw observations, as the environment returns them: a
    module trained with ``normalize_observations`` normalises them with the
    statistics saved in the checkpoint. For an environment whose observations
    are dicts (MuJoCo Playground), pass the entry it was trained on
    (``env.observation_key``, e.g. ``obs["state"]``).

    Returns an action the environment's ``step`` accepts, unbatched for an
    unbatched ``obs``: ``int32[]`` for a discrete action space (``int32[n]``
    batched), ``float32[action_size]`` within the action bounds for a
    continuous one (``float32[n, action_size]`` batched). For gymnax pass it to
    ``env.step(key, state, action, params)``; for brax (actions in ``[-1, 1]``)
    to ``env.step(state, action)``.

    ``key=None`` (default) acts greedily (the argmax or the mean action: what
    evaluation runs); with a typed PRNG key (``jax.random.key``) the action is
    sampled where the policy is stochastic (PPO, A2C, SAC; a batch draws
    independent actions) and the key is ignored where it is deterministic
    (DQN, TD3, CEM-RL, neuroevolution).

    Attributes:
      env: the :class:`~jaxtrainer.envs.Env` the policy was trained on.
      params: the policy's parameters (a pytree of arrays).
      spec: the module's :class:`PolicySpec` (the batched policy functions).
      stochastic: whether ``key`` samples.
      checkpoint: the step directory it was loaded from.
      global_step, env_steps: the checkpoint's counters.

    Raises (from ``act``):
      ValueError: an observation whose shape is neither ``observation_shape``
        nor ``[n, *observation_shape]`` (naming both).
    """

    def __init__(self, spec: PolicySpec, params: Any, checkpoint: str | os.PathLike | None = None,
                 global_step: int = 0, env_steps: int = 0) -> None:
        self.env = spec.env
        self.params = params
        self.stochastic = spec.sample is not None
        self.checkpoint = None if checkpoint is None else os.fspath(checkpoint)
        self.global_step, self.env_steps = int(global_step), int(env_steps)
        self.spec = spec
        self._greedy = jax.jit(lambda params, obs: spec.greedy(params, obs, jax.random.key(0)))
        self._sample = None if spec.sample is None else jax.jit(spec.sample)

    def __call__(self, obs: Any, key: jax.Array | None = None) -> jax.Array:
        obs = jnp.asarray(obs, self.env.observation_dtype)
        shape = tuple(self.env.observation_shape)
        batched = obs.shape[1:] == shape and obs.ndim == len(shape) + 1
        if not batched and obs.shape != shape:
            raise ValueError(f"observation of shape {obs.shape}: expected {shape} (one "
                             f"observation) or (n, {', '.join(map(str, shape))}) (a batch) "
                             f"for {self.env.name}")
        batch = obs if batched else obs[None]
        if key is None or self._sample is None:
            actions = self._greedy(self.params, batch)
        else:
            actions = self._sample(self.params, batch, key)
        return actions if batched else actions[0]

    def __repr__(self) -> str:
        return (f"Policy({self.env.name!r}, checkpoint={self.checkpoint!r}, "
                f"step={self.global_step}, stochastic={self.stochastic})")


def load_policy(path: str | os.PathLike, ckpt: str | int | None = None, *,
                module: Any = None, member: int | None = None) -> Policy:
    """Load a trained policy from a run directory or a checkpoint directory.

    The module is rebuilt from the run's ``config.yaml`` (written by the
    recipes; :func:`jaxtrainer.recipes.modules.build_module`) and the
    checkpoint restored onto one device, whatever strategy and device count
    wrote it (the arrays are stored as one logical copy).

    Args:
      path: a run directory (``runs/ppo/version_0``), its ``checkpoints``
        directory, or one step directory (``.../checkpoints/976``).
      ckpt: ``None`` (the step directory ``path`` names, else the newest),
        ``"last"``, ``"best"`` (best by the metric a
        ``ModelCheckpoint(monitor=...)`` ranked on) or a step number.
      module: the module to restore into, for runs without ``config.yaml``
        (started from Python): built as for training (a
        :class:`~jaxtrainer.PopulationModule` with its population size).
      member: for PBT and sweep runs, the member whose policy to load (a
        sweep's member ``i`` is configuration ``i // seeds``, seed
        ``i % seeds``); default PBT's best member, a sweep's member 0.

    Returns:
      A :class:`Policy`: ``act(obs, key=None) -> action``, jitted; see its
      docstring for shapes and dtypes.

    Raises:
      FileNotFoundError: no checkpoint there, or no ``config.yaml`` and no
        ``module``.
      ValueError: a bad ``ckpt``, or a checkpoint that does not match the module.
      TypeError: a module that exposes no policy.
    """
    from jaxtrainer import saved_run

    restored = saved_run.restore(path, ckpt, module=module, strategy="single", devices=1)
    trainer = restored.trainer
    spec, params = params_of(restored.module, trainer.state, member)
    params = jax.device_put(jax.device_get(params))  # on the default device, no sharding ties
    return Policy(spec, params, restored.checkpoint, trainer.global_step, trainer.env_steps)
