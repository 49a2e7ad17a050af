"""A trained policy for use outside training: :func:`load_policy`.

>>> act = jaxtrainer.load_policy("runs/ppo/version_0")
>>> env, params = gymnax.make("CartPole-v1")
>>> obs, state = env.reset(key, params)
>>> action = act(obs)                        # greedy: int32[] for CartPole
>>> obs, state, reward, done, info = env.step(key, state, action, params)

Every module that defines ``policy(state) -> act(obs, key=None)`` (the
:class:`~jaxtrainer.Module` contract; every shipped algorithm does) and an
``env`` is acted with the same way (:func:`policy_spec`). A population of
members (PBT, sweeps) acts with one member's policy (:func:`params_of`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from jaxtrainer.module import Module, PopulationModule, members_of, unwrap

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
      initial_carry: for a policy with memory (a recurrent core),
        ``initial_carry(n)`` is the carry ``n`` episodes start from, and
        ``greedy``/``sample`` are ``(params, obs[n, ...], key, carry) ->
        (actions[n, ...], carry)``; ``None`` for a memoryless policy.
    """

    env: Env
    greedy: PolicyFn
    sample: PolicyFn | None
    params: Callable[[Any], Any]
    eval_episodes: int
    initial_carry: Callable[[int], Any] | None = None


def _act(greedy: PolicyFn, sample: PolicyFn | None, params: Any, obs: jax.Array,
         key: jax.Array | None = None) -> jax.Array:
    if key is None or sample is None:
        return greedy(params, obs, jax.random.key(0))
    return sample(params, obs, key)


def _act_with_carry(greedy: PolicyFn, sample: PolicyFn | None, params: Any, obs: jax.Array,
                    carry: Any, key: jax.Array | None = None) -> tuple[jax.Array, Any]:
    if key is None or sample is None:
        return greedy(params, obs, jax.random.key(0), carry)
    return sample(params, obs, key, carry)


def acting(greedy: PolicyFn, sample: PolicyFn | None, params: Any,
           recurrent: bool = False) -> jax.tree_util.Partial:
    """A :meth:`Module.policy <jaxtrainer.Module.policy>` result from batched
    policy functions: ``act(obs, key=None)`` runs ``greedy(params, obs, key)``
    without a key (or when ``sample`` is ``None``) and ``sample(params, obs,
    key)`` with one. A ``jax.tree_util.Partial`` whose leaves are ``params``,
    so compiled policies take them as arguments.

    ``recurrent``: a policy with memory, ``act(obs, carry, key=None) ->
    (actions, carry)`` over ``greedy(params, obs, key, carry)``."""
    act = _act_with_carry if recurrent else _act
    return jax.tree_util.Partial(functools.partial(act, greedy, sample), params)


def _as_pytree(act: Callable) -> jax.tree_util.Partial:
    """``act`` as a pytree (a closure becomes a leafless ``Partial``)."""
    return act if isinstance(act, jax.tree_util.Partial) else jax.tree_util.Partial(act)


@runtime_checkable
class BatchedPolicy(Protocol):
    """A module whose ``policy(state)`` is ``acting(greedy_policy(), sample_policy(),
    policy_params(state))`` (:class:`~jaxtrainer.algorithms.acting.ParamsPolicy`,
    every shipped RL module): batched policy functions over its params, with
    ``initial_carry(n)`` where ``recurrent``."""

    recurrent: bool

    def greedy_policy(self) -> PolicyFn: ...

    def sample_policy(self) -> PolicyFn | None: ...

    def policy_params(self, state: Any) -> Any: ...


def policy_spec(module: Any) -> PolicySpec:
    """How ``module`` acts, from its ``policy(state)`` (the :class:`~jaxtrainer.Module`
    contract), its ``env``, ``stochastic_policy`` and ``eval_episodes``
    (attribute, else ``config.eval_episodes``; default 16).

    A module that wraps another (:func:`jaxtrainer.module.unwrap`) acts as
    the one it runs: a population of members (PBT, sweeps) as its members do,
    ``params`` taking one member's state (:func:`params_of` picks it); a
    :class:`~jaxtrainer.population.GenerationModule` as its population module.

    ``params(state)`` is the state's policy as a pytree (``jax.tree_util.Partial``),
    ``greedy``/``sample`` call it without/with the key. A module whose policy
    is built from batched functions over its params
    (:class:`~jaxtrainer.algorithms.acting.ParamsPolicy`: ``greedy_policy()``,
    ``sample_policy()``, ``policy_params(state)``, as every shipped RL module)
    gets those functions and params in the spec, the same policy.

    Raises:
      TypeError: ``module`` defines no ``policy`` or has no ``env`` (naming its class).
    """
    module = unwrap(module)
    name = type(module).__name__
    if not isinstance(module, Module | PopulationModule) or not module.has_policy():
        raise TypeError(f"{name} exposes no policy: define policy(state) returning "
                        "act(obs, key=None) -> actions (jaxtrainer.Module.policy)")
    env = module.env
    if env is None:
        raise TypeError(f"{name} defines policy but has no env attribute: set self.env to the "
                        "jaxtrainer.envs.Env the policy acts in")
    episodes = module.eval_episodes
    if episodes is None:  # the config's (a dataclass), else 16
        episodes = getattr(module.config, "eval_episodes", 16)
    if isinstance(module, BatchedPolicy):
        # policy(state) is acting(greedy_policy(), sample_policy(), policy_params(state)):
        # the same functions, with the params themselves as the spec's params
        carry = module.initial_carry if module.recurrent else None
        return PolicySpec(env, module.greedy_policy(), module.sample_policy(), module.policy_params,
                          int(episodes), carry)
    sample = (lambda act, obs, key: act(obs, key)) if module.stochastic_policy else None
    return PolicySpec(env, lambda act, obs, key: act(obs), sample,
                      lambda state: _as_pytree(module.policy(state)), int(episodes))


def params_of(module: Any, state: Any, member: int | None = None) -> tuple[PolicySpec, Any]:
    """``(policy_spec(module), the policy params of state)``, host side.

    For a population of members (``member_state``: PBT, sweeps) the params are
    those of member ``member``, by default the population's ``default_member``
    (PBT's best current fitness, a sweep's member 0).

    Raises:
      ValueError: ``member`` outside ``[0, population_size)`` or given for a
        module without members.
    """
    spec = policy_spec(module)
    population = members_of(module)
    if population is not None:
        state = population.member_state(state, member)
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
    batched), ``int32[len(action_nvec)]`` for a multi-discrete one (one value
    per component, e.g. ``(row, col)`` for Jumanji's Minesweeper;
    ``int32[n, len(action_nvec)]`` batched), ``float32[action_size]`` within
    the action bounds for a continuous one (``float32[n, action_size]`` batched). For gymnax pass it to
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
      member: the population member it is (PBT, sweeps, searches); ``None`` for one agent.
      exporter: what :meth:`export` calls, ``exporter(policy, file, format) -> path``
        (:func:`jaxtrainer.inference.export.export_policy` for a loaded policy).

    Raises (from ``act``):
      ValueError: an observation whose shape is neither ``observation_shape``
        nor ``[n, *observation_shape]`` (naming both).
    """

    def __init__(self, spec: PolicySpec, params: Any, checkpoint: str | os.PathLike | None = None,
                 global_step: int = 0, env_steps: int = 0, member: int | None = None,
                 exporter: Callable[[Policy, str | os.PathLike, str], Path] | None = None) -> None:
        self.env = spec.env
        self.member = member
        self.exporter = exporter
        self.params = params
        self.stochastic = spec.sample is not None
        self.checkpoint = None if checkpoint is None else os.fspath(checkpoint)
        self.global_step, self.env_steps = int(global_step), int(env_steps)
        self.spec = spec
        key0 = jax.random.key(0)
        self._greedy = jax.jit(lambda params, obs, *carry: spec.greedy(params, obs, key0, *carry))
        self._sample = None if spec.sample is None else jax.jit(spec.sample)

    def _batch(self, obs: Any) -> tuple[jax.Array, bool]:
        """``(obs as [n, *observation_shape], whether it came batched)``."""
        obs = jnp.asarray(obs, self.env.observation_dtype)
        shape = tuple(self.env.observation_shape)
        batched = obs.shape[1:] == shape and obs.ndim == len(shape) + 1
        if not batched and obs.shape != shape:
            raise ValueError(f"observation of shape {obs.shape}: expected {shape} (one "
                             f"observation) or (n, {', '.join(map(str, shape))}) (a batch) "
                             f"for {self.env.name}")
        return (obs if batched else obs[None]), batched

    def __call__(self, obs: Any, key: jax.Array | None = None) -> jax.Array:
        batch, batched = self._batch(obs)
        if key is None or self._sample is None:
            actions = self._greedy(self.params, batch)
        else:
            actions = self._sample(self.params, batch, key)
        return actions if batched else actions[0]

    def export(self, file: str | os.PathLike, format: str = "stablehlo") -> Path:
        """Write the greedy policy (what ``act(obs)`` runs: observation
        normalisation, the network, the argmax, squash or clip) as a file that
        runs without jaxtrainer, and a model card beside it (``<file>.json``).

        ``format``: ``"stablehlo"`` (``jax.export``, serialized; reload it with
        ``jax.export.deserialize``) or ``"onnx"`` (jax2onnx, the ``jaxtrainer[onnx]``
        extra). The batch size is dynamic: ``obs[batch, *observation_shape] ->
        actions[batch, ...]``; a :class:`RecurrentPolicy`'s carry is an input and
        an output. Returns the file's path. The exporter is the one the policy
        was built with: :func:`jaxtrainer.load_policy` gives its policies
        :func:`jaxtrainer.inference.export.export_policy`.

        Raises:
          ValueError: an unknown ``format``; ImportError: ``"onnx"`` without its
            converter; StorageError: ``file`` cannot be written (all before any
            work); TypeError: a policy built without an exporter.
        """
        if self.exporter is None:
            raise TypeError(f"{type(self).__name__} built without an exporter: pass exporter="
                            "jaxtrainer.inference.export.export_policy, or call it with the policy")
        return self.exporter(self, file, format)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.env.name!r}, checkpoint={self.checkpoint!r}, "
                f"step={self.global_step}, greedy; "
                f"{'samples given a key' if self.stochastic else 'deterministic'})")


class RecurrentPolicy(Policy):
    """A trained policy with memory (a recurrent core, ``network.core``):
    ``act(obs, carry, key=None) -> (action, carry)``, jitted.

    ``obs`` and the action as :class:`Policy`'s. ``carry`` is what the policy
    remembers of the episode so far: start every episode from
    :meth:`initial_carry` and pass each step the carry the previous step
    returned::

        carry = act.initial_carry()            # float32[core_size] for a gru core
        obs, state = env.reset(key, params)
        while not done:
            action, carry = act(obs, carry)
            obs, state, reward, done, info = env.step(key, state, action, params)

    For a batch of ``n`` observations ``[n, *observation_shape]`` use
    ``initial_carry(n)`` (leading axis ``[n]``; ``float32[n, core_size]``, or
    a pair of them for an ``lstm`` core).

    Raises (from ``act``):
      ValueError: as :class:`Policy`'s, or a carry whose shapes do not match
        the observation's batch (naming both).
    """

    def initial_carry(self, n: int | None = None) -> Any:
        """The carry an episode starts from (zeros): for one observation
        (``n=None``), or ``n`` of them (leading axis ``[n]``)."""
        carry = self.spec.initial_carry(1 if n is None else int(n))
        return jax.tree.map(lambda c: c[0], carry) if n is None else carry

    def __call__(self, obs: Any, carry: Any, key: jax.Array | None = None,
                 ) -> tuple[jax.Array, Any]:
        batch, batched = self._batch(obs)
        want = jax.tree.map(lambda c: c.shape, jax.eval_shape(  # shapes only, nothing built
            functools.partial(self.spec.initial_carry, batch.shape[0])))
        if not batched:
            carry = jax.tree.map(lambda c: jnp.asarray(c)[None], carry)
        got = jax.tree.map(jnp.shape, carry)
        if got != want:
            raise ValueError(f"carry of shape {got}: expected {want} for "
                             f"{'a batch of ' + str(batch.shape[0]) if batched else 'one'} "
                             "observation(s) (act.initial_carry(n) makes one)")
        if key is None or self._sample is None:
            actions, carry = self._greedy(self.params, batch, carry)
        else:
            actions, carry = self._sample(self.params, batch, key, carry)
        if batched:
            return actions, carry
        return actions[0], jax.tree.map(lambda c: c[0], carry)
