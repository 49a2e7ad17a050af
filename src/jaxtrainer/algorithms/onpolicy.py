"""The on-policy base of PPO, A2C and IMPALA (and PQN's state and schedule): the shared
config fields (:class:`OnPolicyConfig`), the state, and :class:`OnPolicyModule`, which binds
the network and env to the pure pieces and runs one update
(:meth:`OnPolicyModule.training_step`), as PureJaxRL's ``purejaxrl/ppo.py`` (``luchris429/purejaxrl``):

1. a ``num_steps`` rollout of this device's ``num_envs / num_devices`` envs
   (:meth:`~OnPolicyModule.collect`: :func:`~jaxtrainer.algorithms.rollout.unroll`);
2. advantages and value targets (:meth:`~OnPolicyModule.advantages_and_targets`:
   :func:`~jaxtrainer.algorithms.advantages.compute_gae`). Truncation is not
   termination: a transition cut by the time limit bootstraps from
   ``V(final_obs)``, the value of the observation the episode reached;
3. the algorithm's :meth:`~OnPolicyModule.update` on the flattened rollout:
   PPO's epochs of clipped-surrogate minibatch steps, A2C's one full-batch step.
   Gradients are averaged over devices
   (:func:`~jaxtrainer.distributed.averaged_update`), so an update is the
   one-device update on the same global batch and replicas stay bitwise equal.

Sizes are global (over all devices). Hyperparameters that population-based
training may change live in the state as traced values (``hyperparams``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer import aliases, envs
from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms.actor_critic import ActorCriticBase
from jaxtrainer.algorithms.advantages import compute_gae
from jaxtrainer.algorithms.cores import Carry
from jaxtrainer.algorithms.distributions import Distribution
from jaxtrainer.algorithms.networks import ACTIVATIONS, ActorCritic
from jaxtrainer.algorithms.rollout import (
    Rollout,
    bootstrap_truncations,
    chunked_values,
    unroll,
    unroll_recurrent,
)
from jaxtrainer.algorithms.torsos import NetworkConfig, network_config
from jaxtrainer.distributed import fold_in_device, local_size
from jaxtrainer.envs.evaluation import episode_metrics
from jaxtrainer.metrics import Last
from jaxtrainer.module import Module

__getattr__, __dir__ = aliases.attach(__name__)  # moved names, with a warning until 0.3.0


@dataclasses.dataclass(frozen=True)
class OnPolicyConfig:
    """The fields every on-policy config has (A2C's, PPO's, IMPALA's, PQN's), with
    PureJaxRL's CartPole PPO defaults (``purejaxrl/ppo.py``), and their checks.
    Sizes are global (over all devices). The algorithms' configs add or compose
    their own fields (the actor-critic ones:
    :class:`~jaxtrainer.algorithms.actor_critic.ActorCriticConfig`; GAE's:
    :class:`~jaxtrainer.algorithms.advantages.GAEConfig`), change defaults, and
    check their fields after ``super().__post_init__()``.

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make`.
      num_envs: parallel environments, over all devices.
      num_steps: rollout length per env per update; one update consumes
        ``num_envs * num_steps`` env steps.
      total_updates: the number of updates the learning rate anneals over (with
        ``anneal_lr``); after it the rate stays 0. ``None`` (default): the run's
        budget, which the Trainer passes in (``configure_budget``); resuming with a
        larger budget then recomputes the line for the new total (the rate jumps up
        from where the shorter run ended): set it to keep one schedule.
      lr: learning rate (the initial one when annealing), ``>= 0``.
      anneal_lr: anneal the learning rate linearly to 0 over ``total_updates``.
      gamma: discount factor.
      max_grad_norm: global gradient-norm clip; ``float('inf')`` (YAML ``.inf``): none.
      normalize_observations: normalise observations with running statistics of
        every observation seen (:mod:`jaxtrainer.algorithms.normalization`), kept
        in the state (``obs_stats``) and updated once per update before it.
      reward_scaling: rewards are multiplied by it for learning only; logged
        episode returns are unscaled.
      activation: hidden activation of the actor's and critic's MLPs.
      hidden_sizes: hidden layer widths of the actor (and of the critic when
        ``critic_hidden_sizes`` is ``None``).
      eval_episodes: fresh greedy episodes per evaluation, global.
      network: the torso before the hidden layers
        (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`, or a mapping of its
        fields such as ``{"torso": "cnn"}``); default: none, the flattened
        observation (``mlp``).
    """

    env: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 128
    total_updates: int | None = None
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    max_grad_norm: float = 0.5
    normalize_observations: bool = False
    reward_scaling: float = 1.0
    activation: str = "tanh"
    hidden_sizes: tuple[int, ...] = (64, 64)
    eval_episodes: int = 32
    network: NetworkConfig = NetworkConfig()

    def __post_init__(self) -> None:
        """Check and normalise the fields above: ``hidden_sizes`` to a tuple of
        ints, whole-float sizes to ints.

        Raises:
          ValueError: a size that is not a positive int, a negative coefficient, an
            on/off field that is not a bool, an unknown activation; the message names
            the config class and field (e.g. ``PPOConfig.lr='abc': expected a
            non-negative number``).
        """
        arguments.check_fields(self, arguments.sizes, ("hidden_sizes",))
        arguments.check_fields(self, arguments.positive_int,
                               ("num_envs", "num_steps", "eval_episodes"), allow_none=False)
        arguments.check_fields(self, arguments.positive_int, ("total_updates",))
        arguments.check_fields(self, arguments.number, ("lr", "max_grad_norm", "reward_scaling"),
                               low=0)
        arguments.check_fields(self, arguments.number, ("gamma",), low=0, high=1)  # a discount
        arguments.check_fields(self, arguments.flag, ("anneal_lr", "normalize_observations"))
        arguments.check_fields(self, arguments.one_of, ("activation",), choices=tuple(ACTIVATIONS))
        object.__setattr__(self, "network", network_config(self.network, type(self).__name__))


@struct.dataclass
class OnPolicyState:
    """Training state. Replicated leaves are identical on every device; sharded
    ones hold this device's envs (global leading axis ``num_envs``).

    Attributes:
      params: actor-critic parameters (replicated).
      opt_state: optax state (replicated): ``optax.inject_hyperparams``'s around
        ``optax.flatten``'s, its moments one vector over all parameters.
      update_count: ``int32[]`` updates done so far (replicated).
      env_state: batched :class:`jaxtrainer.envs.EnvState`, leading axis
        ``[num_envs]`` (sharded).
      obs: ``[num_envs, *observation_shape]`` current observations (sharded).
      hyperparams: ``{name: float32[]}`` the tunable hyperparameters this state
        trains with (replicated), initialised from the config and read by
        ``training_step`` as traced values, so population-based training
        (:class:`~jaxtrainer.population.PBT`) can change them without
        recompiling. ``lr`` is the base learning rate (annealed per update when
        ``anneal_lr``); the names are the module's ``TUNABLE``.
      obs_stats: :class:`~jaxtrainer.algorithms.normalization.RunningStatistics`
        of every observation the rollouts saw (replicated) with
        ``normalize_observations``; ``None`` (no leaves) without.
      carry: with a recurrent core (``network.core``), each env's carry before
        ``obs`` (:func:`~jaxtrainer.algorithms.cores.initial_carry`, leading
        axis ``[num_envs]``, sharded); ``None`` (no leaves) without.
      start: with a core, ``bool[num_envs]``: ``obs`` is the first of an
        episode, so the carry is reset before it (sharded); ``None`` without.
      critic_obs_stats: with ``normalize_observations`` and an env whose
        critic has its own observation (``value_obs_key``), the statistics of
        every critic observation the rollouts saw (replicated), kept apart
        from ``obs_stats`` (the policy's); ``None`` (no leaves) otherwise.
    """

    params: Any
    opt_state: optax.OptState
    update_count: jax.Array
    env_state: envs.EnvState
    obs: jax.Array
    hyperparams: dict[str, jax.Array]
    obs_stats: normalization.RunningStatistics | None = None
    carry: Any = None
    start: jax.Array | None = None
    critic_obs_stats: normalization.RunningStatistics | None = None


class OnPolicyModule(ActorCriticBase, Module):
    """The training step of :class:`~jaxtrainer.algorithms.PPO`,
    :class:`~jaxtrainer.algorithms.A2C` and (its rollout and advantages)
    :class:`~jaxtrainer.algorithms.IMPALA`; the network, optimizer, schedule,
    acting and evaluation are :class:`~jaxtrainer.algorithms.actor_critic.ActorCriticBase`'s.
    Subclasses set ``config_class`` and ``TUNABLE`` and implement
    ``base_optimizer`` and :meth:`update`.
    """

    def update(self, params: Any, opt_state: Any, batch: dict[str, jax.Array],
               hp: dict[str, jax.Array], key: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
        """Gradient steps on this device's share of the rollout.

        Args:
          params, opt_state: before the update (replicated).
          batch: ``obs``, ``action``, ``log_prob``, ``value``, ``advantage`` and
            ``target``, each ``[num_steps * num_envs_per_device, ...]``.
          hp: :attr:`OnPolicyState.hyperparams`.
          key: the update's key from :meth:`step_keys`.

        Returns:
          ``(params, opt_state, losses)``; every loss array is averaged into a
          ``loss/<name>`` metric.
        """
        raise NotImplementedError

    def init_state(self, key: jax.Array,
                   hyperparams: dict[str, jax.Array] | None = None) -> OnPolicyState:
        """Parameters from ``key`` (replicated); this device's
        ``num_envs / num_devices`` envs reset from ``fold_in_device(key)`` (sharded).
        ``hyperparams``: the state's :attr:`TUNABLE` values, ``{name: float32[]}``
        (``None``: :meth:`initial_hyperparams`); the optimizer state's learning
        rate and gradient-norm clip are set from them."""
        params_key, env_key = jax.random.split(key)
        dummy = jnp.zeros(self.env.observation_shape, self.env.observation_dtype)
        if self.recurrent:
            params = self.network.init(params_key, self.initial_carry(1), dummy[None, None],
                                       jnp.ones((1, 1), jnp.bool_))
        elif self._critic_input_shape is not None:
            params = self.network.init(params_key, dummy,
                                       jnp.zeros(self._critic_input_shape, jnp.float32))
        else:
            params = self.network.init(params_key, dummy)
        num_envs = local_size(self.config.num_envs, "num_envs")
        env_key = fold_in_device(env_key)
        obs, env_state = self.env.reset_batch(env_key, num_envs)
        obs_stats = (normalization.init(self.env.observation_shape)
                     if self.config.normalize_observations else None)
        critic_obs_stats = (normalization.init(self._critic_input_shape)
                            if self.config.normalize_observations and self.asymmetric else None)
        carry = self.initial_carry(num_envs)
        start = jnp.ones((num_envs,), jnp.bool_) if self.recurrent else None
        hp = self.initial_hyperparams() if hyperparams is None else dict(hyperparams)
        opt_state = self.optimizer.init(params)
        opt_state = opt_state._replace(hyperparams={
            **opt_state.hyperparams, "learning_rate": hp["lr"], "max_grad_norm": hp["max_grad_norm"]})
        return OnPolicyState(params, opt_state, jnp.zeros((), jnp.int32),
                             env_state, obs, hp, obs_stats, carry, start, critic_obs_stats)

    def _env_step(self, keys: jax.Array, env_state: envs.EnvState,
                  action: jax.Array) -> tuple[jax.Array, envs.EnvState, envs.StepInfo]:
        """One step of this device's envs on the policy's ``action`` (:meth:`_env_action`)."""
        return jax.vmap(self.env.step)(keys, env_state, self._env_action(action))

    def rollout(self, params: Any, env_state: envs.EnvState, obs: jax.Array,
                key: jax.Array, obs_stats: normalization.RunningStatistics | None = None,
                critic_obs_stats: normalization.RunningStatistics | None = None,
                ) -> tuple[envs.EnvState, jax.Array, Rollout]:
        """``num_steps`` steps of this device's envs (:func:`~jaxtrainer.algorithms.rollout.unroll`),
        actions sampled from the policy with ``params`` on observations normalised
        with ``obs_stats`` (when given), then :meth:`critic_values` (of the
        critic's own inputs when it has them, normalised with
        ``critic_obs_stats`` for an env's ``value_obs_key``). Returns the env
        state and (raw) observations after the rollout and the :class:`Rollout`
        (``[num_steps, n]``)."""
        def policy(obs):
            return self.network.apply(params, self._normalize_obs(obs_stats, obs),
                                      method=ActorCritic.policy)

        critic_stats = self._critic_stats(obs_stats, critic_obs_stats)
        return unroll(policy, lambda obs: self.critic_values(params, obs, critic_stats),
                      self._env_step, env_state, obs, key, self.config.num_steps,
                      self._critic_inputs())

    def _critic_inputs(self) -> Any:
        """``critic_inputs(env_state) -> float32[n, ...]``, what the critic reads of
        a batch's state when it is not the observation (the env's
        ``critic_inputs`` with ``critic_input="global_state"``, its
        ``critic_observation`` with a ``value_obs_key``); ``None`` otherwise."""
        if self.global_critic:
            return self.env.critic_inputs
        return self.env.critic_observation if self.asymmetric else None

    def _critic_stats(self, obs_stats: normalization.RunningStatistics | None,
                      critic_obs_stats: normalization.RunningStatistics | None,
                      ) -> normalization.RunningStatistics | None:
        """The statistics the critic's inputs are normalised with: ``critic_obs_stats``
        for an env's ``value_obs_key``, else ``obs_stats`` (``None`` with a global state)."""
        return critic_obs_stats if self.asymmetric else obs_stats

    def critic_values(self, params: Any, obs: jax.Array,
                      obs_stats: normalization.RunningStatistics | None = None) -> jax.Array:
        """The critic's values of ``obs`` (``[steps, n, *observation_shape]``,
        normalised with ``obs_stats`` when given; with
        ``critic_input="global_state"`` the critic inputs), ``float32[steps, n]``,
        for a feedforward network (:func:`~jaxtrainer.algorithms.rollout.chunked_values`)."""
        def value(obs):
            return self.network.apply(params, self._normalize_obs(obs_stats, obs),
                                      method=ActorCritic.value)

        return chunked_values(value, obs)

    def recurrent_rollout(self, params: Any, env_state: envs.EnvState, obs: jax.Array,
                          carry: Carry, start: jax.Array, key: jax.Array,
                          obs_stats: normalization.RunningStatistics | None = None,
                          ) -> tuple[envs.EnvState, jax.Array, Carry, jax.Array, Rollout]:
        """:meth:`rollout` with a recurrent core
        (:func:`~jaxtrainer.algorithms.rollout.unroll_recurrent`): returns
        ``(env_state, obs, carry, start)`` after the rollout and the
        :class:`Rollout` with ``start`` and ``carry``."""
        def network_step(carry, obs, start):
            return self.network.apply(params, carry, self._normalize_obs(obs_stats, obs)[None],
                                      start[None])

        return unroll_recurrent(network_step, self._env_step, env_state, obs, carry, start, key,
                                self.config.num_steps)

    def collect(self, params: Any, state: OnPolicyState, key: jax.Array,
                ) -> tuple[envs.EnvState, jax.Array, Carry, jax.Array | None, Rollout]:
        """One rollout from ``state`` acting with ``params``: :meth:`recurrent_rollout`
        with a core, else :meth:`rollout`. Returns ``(env_state, obs, carry, start,
        traj)``, what the next state continues from (``carry``, ``start``:
        ``None`` without a core)."""
        if self.recurrent:
            return self.recurrent_rollout(params, state.env_state, state.obs, state.carry,
                                          state.start, key, state.obs_stats)
        env_state, obs, traj = self.rollout(params, state.env_state, state.obs, key,
                                            state.obs_stats, state.critic_obs_stats)
        return env_state, obs, None, None, traj

    def _values_after(self, params: Any, carry: Carry, obs: jax.Array, start: jax.Array,
                      obs_stats: normalization.RunningStatistics | None) -> jax.Array:
        """With a core: the critic's values of ``obs[..., *observation_shape]``,
        each seen one step after its ``carry`` (leading axes as ``obs``'s),
        reset where ``start``; ``float32[...]``."""
        lead = start.shape
        flat = lambda x: x.reshape((1, -1) + x.shape[len(lead):])  # noqa: E731
        carry = jax.tree.map(lambda c: c.reshape((-1,) + c.shape[len(lead):]), carry)
        _, _, value = self.network.apply(params, carry, flat(self._normalize_obs(obs_stats, obs)),
                                         start.reshape(1, -1))
        return value.reshape(lead)

    def advantages_and_targets(self, params: Any, traj: Rollout,
                               hyperparams: dict[str, jax.Array] | None = None,
                               obs_stats: normalization.RunningStatistics | None = None,
                               last_obs: jax.Array | None = None,
                               critic_obs_stats: normalization.RunningStatistics | None = None,
                               ) -> tuple[jax.Array, jax.Array]:
        """GAE advantages and value targets (:func:`~jaxtrainer.algorithms.advantages.compute_gae`),
        ``float32[num_steps, num_envs_per_device]``, of the rewards scaled by
        ``config.reward_scaling`` (for learning only), with observations
        normalised with ``obs_stats`` (the rollout's statistics, as its values).

        The next value of a step: with ``config.bootstrap_truncation`` (default)
        ``V(final_obs)``, ignored on termination. Without a core only what
        ``traj.value`` lacks is valued (inside an episode ``final_obs`` is the next
        step's observation): the last step's ``final_obs`` and those of the
        truncated steps (:func:`~jaxtrainer.algorithms.rollout.bootstrap_truncations`);
        with a core, one critic pass over the rollout's ``final_obs``. Without it
        (PureJaxRL's terminal-only bootstrapping) every episode end is terminal and
        the last step bootstraps from ``V(last_obs)`` (``last_obs``, required then:
        ``[num_envs_per_device, ...]``, the observations, or with
        ``critic_input="global_state"`` the critic inputs, after the rollout).
        With ``critic_input="global_state"`` the critic values the env's critic
        inputs (``traj.critic_obs``; at ``final_obs`` its ``final_critic_inputs``);
        with an env's ``value_obs_key`` its critic observations (``traj.critic_obs``;
        at ``final_obs`` ``info.final_critic_obs``), normalised with
        ``critic_obs_stats``.

        Raises:
          ValueError: ``bootstrap_truncation=False`` without ``last_obs``.
        """
        hp = self.initial_hyperparams() if hyperparams is None else hyperparams
        critic_stats = self._critic_stats(obs_stats, critic_obs_stats)
        if self.config.bootstrap_truncation:
            if self.recurrent:  # V(final_obs) one step after each step's carry, no reset
                next_values = self._values_after(params, traj.carry, traj.info.final_obs,
                                                 jnp.zeros_like(traj.info.done), obs_stats)
            else:
                if self.global_critic:
                    final = self.env.final_critic_inputs(traj.info)
                elif self.asymmetric:
                    final = traj.info.final_critic_obs
                else:
                    final = traj.info.final_obs
                last = self.critic_values(params, jax.tree.map(lambda x: x[-1:], final),
                                          critic_stats)
                next_values = bootstrap_truncations(
                    lambda obs: self.critic_values(params, obs, critic_stats),
                    traj.info.truncated, jnp.concatenate([traj.value[1:], last]), final)
            terminated = traj.info.terminated
        else:
            if last_obs is None:
                raise ValueError(f"{type(self).__name__}.advantages_and_targets: "
                                 "bootstrap_truncation=False needs last_obs")
            if self.recurrent:
                last_value = self._values_after(params, jax.tree.map(lambda c: c[-1], traj.carry),
                                                last_obs, traj.info.done[-1], obs_stats)
            else:
                last_value = self.network.apply(params,
                                                self._normalize_obs(critic_stats, last_obs),
                                                method=ActorCritic.value)
            next_values = jnp.concatenate([traj.value[1:], last_value[None]])
            terminated = traj.info.done
        rewards = traj.info.reward
        if self.config.reward_scaling != 1.0:
            rewards = rewards * jnp.asarray(self.config.reward_scaling, rewards.dtype)
        return compute_gae(rewards, traj.value, next_values, terminated,
                           traj.info.done, hp["gamma"], hp["gae_lambda"],
                           self.config.unroll_length)

    def step_keys(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(rollout_key, update_key)`` from a training step's key."""
        rollout_key, update_key = jax.random.split(key)
        return rollout_key, update_key

    def training_step(self, state: OnPolicyState,
                      key: jax.Array) -> tuple[OnPolicyState, dict]:
        """One update: a ``num_steps`` rollout of every env, GAE, then :meth:`update`
        on the rollout flattened to ``[num_steps * num_envs_per_device, ...]``.

        Metrics: ``train/episode_return``, ``train/episode_length`` (episodes
        completed during the rollout), ``loss/<name>`` (means of :meth:`update`'s
        losses) and ``lr`` (this update's learning rate, :class:`~jaxtrainer.Last`).

        With ``normalize_observations`` (as Brax's PPO): the rollout and GAE use
        the statistics before this step; then the rollout's observations (all
        devices') are merged into them, and :meth:`update` sees observations
        normalised with the merged statistics, which the new state keeps. With
        an env's ``value_obs_key`` the critic's observations have statistics of
        their own (``critic_obs_stats``), kept the same way.
        """
        rollout_key, update_key = self.step_keys(key)
        env_state, obs, carry, start, traj = self.collect(state.params, state, rollout_key)
        hp = state.hyperparams
        critic_inputs = self._critic_inputs()
        last_obs = obs if critic_inputs is None else critic_inputs(env_state)
        advantages, targets = self.advantages_and_targets(state.params, traj, hp,
                                                          state.obs_stats, last_obs,
                                                          state.critic_obs_stats)
        obs_stats, critic_obs_stats = state.obs_stats, state.critic_obs_stats
        if obs_stats is not None:
            obs_stats = normalization.update(obs_stats, traj.obs)
        if critic_obs_stats is not None:
            critic_obs_stats = normalization.update(critic_obs_stats, traj.critic_obs)
        batch = {"obs": self._normalize_obs(obs_stats, traj.obs), "action": traj.action,
                 "log_prob": traj.log_prob, "value": traj.value, "advantage": advantages,
                 "target": targets}
        if critic_inputs is not None:
            batch["critic_obs"] = self._normalize_obs(critic_obs_stats, traj.critic_obs)
        if self.recurrent:  # whole sequences, env-major, with the carry they started from
            batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), {**batch, "start": traj.start})
            batch["carry"] = state.carry
        else:
            size = self.config.num_steps * local_size(self.config.num_envs, "num_envs")
            batch = jax.tree.map(lambda x: x.reshape((size,) + x.shape[2:]), batch)
        opt_state = self._set_optimizer_hyperparams(state.opt_state, hp, state.update_count)
        params, opt_state, losses = self.update(state.params, opt_state, batch, hp, update_key)
        metrics = {
            **episode_metrics(traj.info),
            **{f"loss/{name}": jnp.mean(value) for name, value in losses.items()},
            "lr": Last.of(self._learning_rate(hp, state.update_count)),
        }
        new_state = OnPolicyState(params, opt_state, state.update_count + 1, env_state, obs, hp,
                                  obs_stats, carry, start, critic_obs_stats)
        return new_state, metrics

    def forward(self, params: Any, batch: dict[str, Any],
                ) -> tuple[Distribution, jax.Array, dict[str, jax.Array]]:
        """The policy and values of a batch :meth:`update` was given (or a
        minibatch of it): ``(dist, value, batch)``, the batch's leaves in the
        shape of ``value``. Feedforward: ``batch`` leaves ``[B, ...]``, as they
        are. With a core: leaves ``[envs, num_steps, ...]`` with ``start`` and
        the ``carry`` the sequences started from; the sequences are run again
        from it and everything returned is time-major, ``[num_steps, envs]``.
        With ``critic_input="global_state"`` or an env's ``value_obs_key`` the
        critic reads ``batch["critic_obs"]``."""
        if not self.recurrent:
            dist, value = self.network.apply(params, batch["obs"], batch.get("critic_obs"))
            return dist, value, batch
        seq = {k: jnp.swapaxes(v, 0, 1) if k not in ("carry", "key") else v
               for k, v in batch.items() if k != "carry"}
        _, dist, value = self.network.apply(params, batch["carry"], seq["obs"], seq["start"])
        return dist, value, seq
