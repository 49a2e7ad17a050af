"""Neuroevolution: :class:`NeuroES` evolves a flax policy's parameters on a
:mod:`jaxtrainer.envs` environment with any evosax algorithm
(:class:`~jaxtrainer.algorithms.es.EvosaxES`); fitness = mean undiscounted return
of ``num_episodes`` episodes.

Sources: evosax (Lange 2022, https://github.com/RobertTLange/evosax, v0.3), its
``BraxProblem`` (observation normalisation, fixed-length rollouts); OpenAI-ES
(Salimans et al. 2017, https://arxiv.org/abs/1703.03864).

Example::

    es = NeuroES("CartPole-v1", algorithm="Open_ES", learning_rate=0.05, std=0.1)
    PopulationTrainer(population_size=64, max_generations=50).fit(es)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms.acting import ParamsPolicy
from jaxtrainer.algorithms.es import ESState, EvosaxES
from jaxtrainer.algorithms.networks import MLP, categorical
from jaxtrainer.algorithms.networks import activation as activation_fn
from jaxtrainer.algorithms.normalization import normalizing_policy
from jaxtrainer.distributed import local_size
from jaxtrainer.metrics import Mean

EPISODE_LOOPS = ("while", "scan")
"""How :class:`NeuroES` runs a member's episodes (its ``episode_loop``)."""


class MLPPolicy(MLP):
    """Deterministic MLP policy for neuroevolution: the shared
    :class:`~jaxtrainer.algorithms.networks.MLP` with ``out`` action units.

    ``__call__(obs: float32[..., obs_size]) -> float32[..., out]``: logits for
    discrete actions (act with ``argmax``; multi-discrete: per component), ``tanh`` outputs in ``[-1, 1]`` for
    continuous ones (scaled to the bounds by :class:`NeuroES`).
    ``hidden_sizes=()`` is a linear policy.
    """

    discrete: bool = True

    def __call__(self, x: jax.Array) -> jax.Array:
        x = super().__call__(x)
        return x if self.discrete else nn.tanh(x)


class NeuroES(ParamsPolicy, EvosaxES):
    """Neuroevolution: evolve a flax MLP policy's parameters on an environment.

    Fitness of a member (maximised) = mean undiscounted return of the first
    episode of each of ``num_episodes`` fresh environments, run for the env's
    ``max_episode_steps`` with the greedy action of the member's policy
    (:func:`jaxtrainer.envs.evaluate_policy`). Members are flax parameter pytrees
    (with ``normalize_observations``, the pair ``(params, obs_stats)``, the
    statistics the same for every member).

    Args:
      env: an environment name for :func:`jaxtrainer.envs.make`
        (``"CartPole-v1"``) or an :class:`~jaxtrainer.envs.Env`.
      algorithm: evosax name (``"Open_ES"``, ``"CMA_ES"``, ...).
      hidden_sizes: policy hidden layers (``()``: linear policy).
      activation: a name in :data:`jaxtrainer.algorithms.networks.ACTIVATIONS`.
      num_episodes: episodes per member per generation (k).
      eval_episodes: episodes of the mean policy in ``evaluation_step``
        (global; must divide over the devices).
      init: ``"network"`` (the flax initialiser) or ``"zeros"`` for the
        initial mean.
      episode_loop: how a member's episodes run: ``"while"`` (default) stops once
        every one has ended; ``"scan"`` runs the env's ``max_episode_steps`` in a
        ``lax.scan`` (as evosax's ``BraxProblem`` rolls out), the same fitness.
      normalize_observations: the policies act on observations normalised by
        running statistics (:func:`~jaxtrainer.algorithms.normalization.normalize_obs`)
        of every observation the members acted on in their counted episodes, merged
        in after each generation (``ESState.obs_stats``), as evosax's
        ``BraxProblem(use_normalize_obs=True)``; the mean's evaluation and its
        exported policy normalise with them too.
      **kwargs: :class:`EvosaxES` options (``learning_rate``, ``std``,
        ``fitness_shaping``, ``weight_decay``, ``learning_rate_decay``, ...).

    Raises:
      ValueError: an unknown ``episode_loop`` (listing the choices), and as
        :class:`EvosaxES`.

    Metrics: ``member/episode_length``; evaluation gives ``eval/episode_return``
    and ``eval/episode_length`` over completed episodes.
    """

    def __init__(
        self,
        env: Any = "CartPole-v1",
        algorithm: str = "Open_ES",
        *,
        hidden_sizes: Sequence[int] = (16,),
        activation: str = "tanh",
        num_episodes: int = 1,
        eval_episodes: int = 16,
        init: str = "network",
        episode_loop: str = "while",
        normalize_observations: bool = False,
        **kwargs: Any,
    ) -> None:
        from jaxtrainer import envs  # local import: gymnax loads only for NeuroES
        if episode_loop not in EPISODE_LOOPS:
            raise ValueError(f"episode_loop={episode_loop!r}: choose one of "
                             f"{', '.join(EPISODE_LOOPS)}")
        self.episode_loop = episode_loop
        self.normalize_observations = bool(normalize_observations)
        self.tell_extras = self.normalize_observations  # tell merges the members' observations

        self.env = envs.make(env) if isinstance(env, str) else env
        if num_episodes < 1 or eval_episodes < 1:
            raise ValueError(f"num_episodes={num_episodes}, eval_episodes={eval_episodes}: "
                             "expected >= 1")
        if init not in ("network", "zeros"):
            raise ValueError(f"init={init!r}: choose 'network' or 'zeros'")
        activation_fn(activation)  # ValueError listing the choices
        self.num_episodes, self.eval_episodes, self.init = num_episodes, eval_episodes, init
        e = self.env
        self.network = MLPPolicy(tuple(hidden_sizes), out=e.num_actions if e.discrete else e.action_size,
                                activation=activation, discrete=e.discrete)
        self._obs = jnp.zeros((e.observation_size,), jnp.float32)
        template = jax.eval_shape(self.network.init, jax.random.key(0), self._obs)
        kwargs.setdefault("maximize", True)
        super().__init__(algorithm, template, **kwargs)

    @property
    def env_steps_per_generation(self) -> int:
        """Transitions simulated per generation: ``P * num_episodes * max_episode_steps``."""
        return (self.population_size or 0) * self.num_episodes * self.env.max_episode_steps

    def validate(self, num_devices: int) -> None:
        local_size(self.eval_episodes, "eval_episodes", num_devices)

    def initial_mean(self, key: jax.Array) -> Any:
        if self.init == "zeros":
            return self.zero_solution()
        return self.network.init(key, self._obs)

    def act(self, params: Any, obs: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """Greedy actions for ``obs: [B, *observation_shape]``: ``int32[B]``,
        ``int32[B, len(action_nvec)]`` for a multi-discrete env (each
        component's argmax) or ``float32[B, action_size]`` within the action bounds."""
        out = self.network.apply(params, obs.reshape(obs.shape[0], -1).astype(jnp.float32))
        e = self.env
        if e.discrete:
            return categorical(out, e.action_nvec).mode()
        low, high = jnp.asarray(e.action_low), jnp.asarray(e.action_high)
        return low + (out + 1.0) * 0.5 * (high - low)

    def greedy_policy(self) -> Any:
        """``policy(params, obs[n, ...], key) -> actions[n, ...]``: :meth:`act`
        (with ``normalize_observations``, of ``params = (params, obs_stats)``)."""
        return normalizing_policy(lambda params, obs, key: self.act(params, obs, key),
                                  self.normalize_observations)

    def policy_params(self, state: ESState) -> Any:
        """The mean solution (:meth:`mean`): the parameters :meth:`act` takes;
        with ``normalize_observations`` the pair ``(mean, state.obs_stats)``."""
        if self.normalize_observations:
            return self.mean(state), state.obs_stats
        return self.mean(state)

    def init_state(self, key: jax.Array) -> ESState:
        state = super().init_state(key)
        if self.normalize_observations:
            state = state.replace(obs_stats=normalization.init(self.env.observation_shape))
        return state

    def ask(self, state: ESState, key: jax.Array) -> tuple[Any, ESState]:
        """As :meth:`EvosaxES.ask`; with ``normalize_observations`` the members are
        ``(params, obs_stats)``, the statistics repeated for each."""
        population, state = super().ask(state, key)
        if self.normalize_observations:
            size = jax.tree.leaves(population)[0].shape[0]
            stats = jax.tree.map(lambda x: jnp.broadcast_to(x, (size, *x.shape)), state.obs_stats)
            population = (population, stats)
        return population, state

    def tell(self, state: ESState, population: Any, fitness: jax.Array,
             extras: dict[str, Any] | None = None) -> tuple[ESState, dict[str, Any]]:
        """As :meth:`EvosaxES.tell`; with ``normalize_observations`` (``extras``:
        ``evaluate``'s, gathered over the members) the members' observations are
        merged into ``state.obs_stats`` after the update."""
        if not self.normalize_observations:
            return super().tell(state, population, fitness)
        state, metrics = super().tell(state, population[0], fitness)
        count, total, square = extras["obs_moments"]  # [P], [P, *shape], [P, *shape]
        stats = normalization.merge_shifted(state.obs_stats, jnp.sum(count), jnp.sum(total, 0),
                                            jnp.sum(square, 0))
        return state.replace(obs_stats=stats), metrics

    def _episodes(self, params: Any, key: jax.Array, num_episodes: int,
                  first_episode: int | jax.Array = 0, moments: bool = False):
        """:func:`~jaxtrainer.envs.evaluation.run_episodes` of :meth:`greedy_policy`
        on ``params`` (:meth:`policy_params`' form), ``episode_loop``'s loop;
        ``moments``: with the observations' sums about the statistics' mean."""
        from jaxtrainer.envs.evaluation import run_episodes

        shift = params[1].mean if moments else None
        return run_episodes(self.env, self.greedy_policy(), params, key, num_episodes,
                            first_episode=first_episode,
                            fixed_length=self.episode_loop == "scan", obs_shift=shift)

    def _rollout(self, params: Any, key: jax.Array, num_episodes: int,
                 first_episode: int | jax.Array = 0) -> dict[str, Mean]:
        episodes = self._episodes(params, key, num_episodes, first_episode)
        return {"episode_return": Mean.of(episodes.returns, mask=episodes.finished),
                "episode_length": Mean.of(episodes.lengths, mask=episodes.finished)}

    def evaluate(self, member: Any, key: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """Fitness ``float32[]``: mean return of ``num_episodes`` episodes; with
        ``normalize_observations`` also ``obs_moments`` (the count, sum and
        square sum about the statistics' mean of the observations acted on)."""
        episodes = self._episodes(member, key, self.num_episodes,
                                  moments=self.normalize_observations)
        ret = Mean.of(episodes.returns, mask=episodes.finished)
        length = Mean.of(episodes.lengths, mask=episodes.finished)
        fitness = ret.total / jnp.maximum(ret.count, 1.0)
        extras = {"episode_length": length.total / jnp.maximum(length.count, 1.0)}
        if self.normalize_observations:
            extras["obs_moments"] = episodes.obs_moments
        return fitness, extras

    def evaluation_step(self, state: ESState, key: jax.Array) -> dict[str, Any]:
        """The mean policy on ``eval_episodes`` episodes numbered over all
        devices (each runs its share), the same on any device count."""
        from jaxtrainer.envs.evaluation import episode_share

        res = self._rollout(self.policy_params(state), key, *episode_share(self.eval_episodes))
        return {"eval/episode_return": res["episode_return"],
                "eval/episode_length": res["episode_length"]}

    def hparams(self) -> dict[str, Any]:
        extra = {"episode_loop": self.episode_loop} if self.episode_loop != "while" else {}
        if self.normalize_observations:
            extra["normalize_observations"] = True
        return {**super().hparams(), "env": self.env.name, "num_episodes": self.num_episodes,
                "hidden_sizes": list(self.network.hidden_sizes), **extra}
