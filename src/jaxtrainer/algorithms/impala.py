"""IMPALA's V-trace actor-critic, run synchronously, as a :class:`jaxtrainer.Module`.

IMPALA (Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with
Importance Weighted Actor-Learner Architectures", arXiv:1802.01561) decouples
acting from learning: actors roll out a *behaviour* policy ``mu`` that lags
behind the learner's policy ``pi``, and the learner corrects for the lag with
V-trace, truncated importance weights ``rho_t = min(rho_bar, pi/mu)`` and
``c_t = lambda * min(c_bar, pi/mu)`` (:func:`vtrace`).

Here acting and learning alternate in one ``training_step``, as EvoRL's
synchronous IMPALA workflow does (``evorl/algorithms/impala.py``,
``EMI-Group/evorl``), and the lag is explicit: the state keeps the learner's
parameters of the last ``policy_lag`` updates (:attr:`IMPALAState.behaviour_params`),
and update ``u`` (counted from 0) collects its rollout with the parameters that
update ``u - policy_lag`` started from (the initial ones while ``u < policy_lag``),
so ``policy_lag=1`` acts with the learner's previous parameters. The rollout's
log-probabilities are the behaviour's. ``policy_lag=0`` collects with the
learner's own parameters (EvoRL's choice, where lag comes only from reusing a
rollout for several minibatch steps). Epochs and minibatches over whole
trajectories (``update_epochs``, ``num_minibatches``) add the same reuse lag on top.

Each gradient step recomputes V-trace with the learner's current critic and
policy on its minibatch of ``[num_steps, envs]`` trajectories, as IMPALA's
learner does. Truncation is not termination (as the on-policy modules' GAE):
a transition cut by the time limit bootstraps from ``V(final_obs)`` and the
trace stops there; a terminal one does not bootstrap (EvoRL's V-trace treats
both ends alike, as terminal).

The rollout, state, learning-rate schedule, observation normalisation,
evaluation and device handling are :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyModule`'s
(shared with PPO and A2C). Gradients are averaged over devices
(:func:`~jaxtrainer.distributed.averaged_update`), so a step is the one-device
step on the same global minibatch and replicas stay bitwise equal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms._config_parts import composes
from jaxtrainer.algorithms.actor_critic import ActorCriticConfig, check_actor_critic
from jaxtrainer.algorithms.advantages import normalize_advantages
from jaxtrainer.algorithms.distributions import Distribution
from jaxtrainer.algorithms.networks import ActorCritic, RecurrentActorCritic
from jaxtrainer.algorithms.onpolicy import OnPolicyConfig, OnPolicyModule, OnPolicyState
from jaxtrainer.algorithms.rollout import check_minibatch_fields, trajectory_minibatch_epochs
from jaxtrainer.distributed._gradient_step import averaged_update
from jaxtrainer.envs.evaluation import episode_metrics
from jaxtrainer.metrics import Last


def _check_shapes(**arrays: jax.Array) -> None:
    """Raise :func:`vtrace`'s ValueError unless ``arrays`` (by argument name) all
    have one shape with a time axis."""
    shapes = {name: jnp.shape(x) for name, x in arrays.items()}
    if len(set(shapes.values())) != 1 or not shapes["values"]:
        raise ValueError("vtrace: expected arrays of one shape [T, ...], got "
                         + ", ".join(f"{name}{list(shape)}" for name, shape in shapes.items()))


def _corrections(deltas: jax.Array, cs: jax.Array, not_done: jax.Array,
                 gamma: Any) -> tuple[jax.Array, jax.Array]:
    """V-trace's backward recursion (arXiv:1802.01561, Remark 1) in a reverse
    ``lax.scan``: ``(v_t - V(x_t), v_{t+1} - V(x_{t+1}))``, both ``float32[T, ...]``
    like ``deltas``, from ``deltas``, ``cs`` (``c_t``) and ``not_done``
    (``1 - done_t``), all ``float32[T, ...]``; the second is 0 at ``t = T - 1``
    (``v_T = V(x_T)``)."""
    def backward(acc, step):
        # acc: v_{t+1} - V(x_{t+1}), 0 past the rollout's end (v_T = V(x_T))
        delta, c, cont = step
        new = delta + gamma * c * cont * acc
        return new, (new, acc)

    _, (corrections, next_corrections) = jax.lax.scan(
        backward, jnp.zeros_like(deltas[0]), (deltas, cs, not_done), reverse=True, unroll=1)
    return corrections, next_corrections


def vtrace(
    values: jax.Array,
    next_values: jax.Array,
    rewards: jax.Array,
    log_rhos: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: Any,
    lambda_: Any = 1.0,
    rho_bar: Any = 1.0,
    c_bar: Any = 1.0,
    pg_rho_bar: Any = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """V-trace value targets and policy-gradient advantages (arXiv:1802.01561, Sec. 4).

    All arrays are ``[T, ...]``, time first. With ``rho_t = min(rho_bar, pi/mu)``
    and ``c_t = lambda * min(c_bar, pi/mu)`` (the paper's truncated importance
    weights, with the optional trace decay ``lambda`` it borrows from Retrace),
    the targets follow the paper's Remark 1 recursion, backwards from
    ``v_T = V(x_T)``::

        delta_t = rho_t * (r_t + gamma * (1 - terminated_t) * next_value_t - value_t)
        v_t     = value_t + delta_t + gamma * c_t * (1 - done_t) * (v_{t+1} - V(x_{t+1}))

    and the advantage of the policy gradient (Sec. 4.2) is::

        A_t = min(pg_rho_bar, pi/mu) * (r_t + gamma * (1 - terminated_t) * v'_t - value_t)

    where ``v'_t`` is the V-trace target of the observation step ``t`` reached:
    ``v_{t+1}`` inside an episode, ``next_value_t`` when the episode ended or at
    the end of the rollout. ``next_value_t = V(final_obs_t)``, the value of the
    observation step ``t`` reached before any auto-reset: inside an episode the
    next step's value, on truncation (``terminated=False, done=True``) the
    bootstrap value, ignored on termination. The trace stops at every episode end.

    With on-policy data (``log_rhos = 0``) and ``rho_bar, c_bar >= 1`` the targets
    are GAE's (:func:`~jaxtrainer.algorithms.advantages.compute_gae`) with
    ``gae_lambda = lambda``, i.e. ``n``-step returns for ``lambda = 1``.

    Args:
      values: ``float32[T, ...]``, ``V(x_t)`` under the learner's critic.
      next_values: ``float32[T, ...]``, ``V(final_obs_t)``.
      rewards: ``float32[T, ...]``.
      log_rhos: ``float32[T, ...]``, ``log pi(a_t|x_t) - log mu(a_t|x_t)``
        (target minus behaviour log-probabilities).
      terminated: ``bool[T, ...]``, a terminal state was reached (no bootstrap).
      done: ``bool[T, ...]``, the episode ended (terminated or truncated).
      gamma: discount. lambda_: the trace's decay (1: the paper's default).
      rho_bar, c_bar: truncation levels of ``rho`` and ``c`` (the paper's
        ``rho-bar`` and ``c-bar``; 1 in its experiments). pg_rho_bar: truncation
        of the policy gradient's ``rho``.

    Returns:
      ``(targets, pg_advantages)``, both ``float32[T, ...]``. Neither carries a
      gradient (``stop_gradient``).

    Raises:
      ValueError: the six arrays do not all have one shape with a time axis
        (the message lists the shapes).
    """
    _check_shapes(values=values, next_values=next_values, rewards=rewards,
                  log_rhos=log_rhos, terminated=terminated, done=done)
    values, next_values, log_rhos = jax.lax.stop_gradient((values, next_values, log_rhos))
    rhos = jnp.exp(log_rhos)
    clipped_rhos = jnp.minimum(rho_bar, rhos)
    cs = lambda_ * jnp.minimum(c_bar, rhos)
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    deltas = clipped_rhos * (rewards + gamma * not_terminated * next_values - values)

    corrections, next_corrections = _corrections(deltas, cs, not_done, gamma)
    targets = values + corrections
    next_targets = next_values + not_done * next_corrections
    pg_advantages = jnp.minimum(pg_rho_bar, rhos) * (
        rewards + gamma * not_terminated * next_targets - values)
    return jax.lax.stop_gradient((targets, pg_advantages))


def impala_loss(dist: Distribution, values: jax.Array, next_values: jax.Array,
                batch: dict[str, jax.Array], hp: dict[str, jax.Array],
                normalize: bool = False) -> tuple[jax.Array, dict[str, jax.Array]]:
    """IMPALA's loss (arXiv:1802.01561, Sec. 4.2) on trajectories ``[T, B]``::

        total = -mean(A_t log pi(a_t|x_t)) + vf_coef * 0.5 * mean((v_t - V(x_t))^2)
                - ent_coef * mean(H)

    with the V-trace targets ``v_t`` and advantages ``A_t`` (:func:`vtrace`, held
    constant; standardised with ``normalize``) of the learner's policy ``dist``
    and critic ``values``, ``next_values`` (``V(final_obs)``), all ``[T, B]``.
    ``batch``: ``action``, ``log_prob`` (the behaviour's), ``reward`` (scaled),
    ``terminated``, ``done``; ``hp``: ``gamma``, ``vtrace_lambda``, ``rho_bar``,
    ``c_bar``, ``pg_rho_bar``, ``vf_coef``, ``ent_coef``. Returns ``(total,
    {"policy", "value", "entropy", "rho", "approx_kl"})``, all ``float32[]``
    (``rho``: mean ``pi/mu`` before truncation)."""
    log_prob = dist.log_prob(batch["action"])
    log_rho = jax.lax.stop_gradient(log_prob) - batch["log_prob"]
    targets, advantages = vtrace(values, next_values, batch["reward"], log_rho,
                                 batch["terminated"], batch["done"], hp["gamma"],
                                 hp["vtrace_lambda"], hp["rho_bar"], hp["c_bar"],
                                 hp["pg_rho_bar"])
    if normalize:
        advantages = normalize_advantages(advantages)
    policy_loss = -jnp.mean(advantages * log_prob)
    value_loss = 0.5 * jnp.mean(jnp.square(values - targets))
    entropy = jnp.mean(dist.entropy())
    total = policy_loss + hp["vf_coef"] * value_loss - hp["ent_coef"] * entropy
    rho = jnp.exp(log_rho)
    return total, {"policy": policy_loss, "value": value_loss, "entropy": entropy,
                   "rho": jnp.mean(rho), "approx_kl": jnp.mean((rho - 1.0) - log_rho)}


@struct.dataclass
class IMPALAState(OnPolicyState):
    """:class:`~jaxtrainer.algorithms.onpolicy.OnPolicyState` plus the behaviour policy.

    Attributes:
      behaviour_params: a tuple of ``policy_lag`` parameter trees (replicated),
        oldest first: the learner's parameters before each of the last
        ``policy_lag`` updates (the initial ones where there were fewer), so
        the next rollout acts with ``behaviour_params[0]``, the parameters
        ``policy_lag`` updates older than ``params``; ``()`` when
        ``policy_lag == 0`` (the rollout acts with ``params``).
    """

    behaviour_params: tuple = ()


@dataclasses.dataclass(frozen=True)
@composes(ActorCriticConfig, ent_coef=0.0, normalize_advantages=False)
class IMPALAConfig(OnPolicyConfig):
    """IMPALA hyperparameters. Sizes are global (over all devices).

    The fields of :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig`, the
    epochs and minibatches, the policy lag and V-trace's. The defaults are the CartPole-v1 recipe's
    (``recipes/configs/impala.yaml``), tuned in this project on CartPole-v1
    (seeds 0-2, 1 and 4 devices): the paper's ``rho_bar = c_bar = 1``,
    ``lambda = 1`` and baseline cost 0.5; Adam at 2.5e-4 annealed as PPO's; no
    entropy bonus, as RL-Zoo's A2C on CartPole (with 0.01 the return oscillated
    more late in training).

    Attributes:
      num_envs: parallel environments (actors), over all devices.
      num_steps: trajectory (unroll) length per env per update; one update
        consumes ``num_envs * num_steps`` env steps.
      update_epochs: passes over each rollout.
      policy_lag: updates the behaviour policy lags behind the learner: update
        ``u`` collects with the parameters update ``u - policy_lag`` started
        from (0: the learner's own; the state keeps ``policy_lag`` copies).
      num_minibatches: minibatches per epoch, each a set of whole trajectories
        (``num_envs / num_minibatches`` envs, over all devices).
      total_updates: updates the learning rate anneals over (with ``anneal_lr``);
        ``None``: the Trainer's budget (:meth:`IMPALA.configure_budget`).
      lr: Adam learning rate (initial one when annealing).
      anneal_lr: anneal it linearly to 0 over ``total_updates``.
      gamma: discount.
      vtrace_lambda: the trace's decay ``lambda`` in ``c_t = lambda * min(c_bar, rho)``.
      rho_bar, c_bar: V-trace's truncation levels (arXiv:1802.01561: 1 and 1).
      pg_rho_bar: truncation of the importance weight of the policy gradient.
      ent_coef, vf_coef: entropy bonus and value-loss coefficients.
      max_grad_norm: global gradient-norm clip (``float('inf')``: none).
      normalize_advantages: standardise the policy-gradient advantages per
        minibatch (global mean and standard deviation over all devices).
      normalize_observations: running observation statistics
        (:mod:`jaxtrainer.algorithms.normalization`), kept in the state and
        updated once per update, before the learner's steps.
      reward_scaling: rewards are multiplied by it for learning only.
      activation, hidden_sizes: the actor's and critic's MLPs.
      critic_hidden_sizes: the critic's widths when they differ (``None``: as the actor's).
      network: the torso before both MLPs
        (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`; default ``mlp``).
    """

    num_envs: int = 16
    num_steps: int = 32
    update_epochs: int = 4
    num_minibatches: int = 4
    policy_lag: int = 1
    vtrace_lambda: float = 1.0
    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0

    def __post_init__(self) -> None:
        """The shared checks (:class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig`'s,
        :func:`~jaxtrainer.algorithms.actor_critic.check_actor_critic`,
        :func:`~jaxtrainer.algorithms.rollout.check_minibatch_fields`), then the
        lag, V-trace's fields and the minibatch split.

        Raises:
          ValueError: a bad field (named), or ``num_envs`` not divisible by
            ``num_minibatches``.
        """
        super().__post_init__()
        check_actor_critic(self)
        check_minibatch_fields(self)
        arguments.check_fields(self, arguments.non_negative_int, ("policy_lag",))
        arguments.check_fields(self, arguments.number, ("vtrace_lambda",), low=0, high=1)
        arguments.check_fields(self, arguments.number, ("rho_bar", "c_bar", "pg_rho_bar"), low=0,
                               low_open=True)
        if self.num_envs % self.num_minibatches:
            raise ValueError(
                f"IMPALAConfig: num_envs={self.num_envs} is not divisible by "
                f"num_minibatches={self.num_minibatches} (minibatches are sets of whole "
                "trajectories)")


class IMPALA(OnPolicyModule):
    """Synchronous IMPALA on a :mod:`jaxtrainer.envs` environment, discrete or
    continuous actions.

    One :meth:`training_step`: a ``num_steps`` rollout of every env with the
    behaviour parameters (``policy_lag`` updates old), then ``update_epochs`` x
    ``num_minibatches`` gradient steps on the V-trace loss (:meth:`loss`); the
    parameters the update started from join the behaviour queue.

    Metrics: ``train/episode_return``, ``train/episode_length``, ``loss/total``,
    ``loss/policy``, ``loss/value``, ``loss/entropy``, ``loss/rho`` (mean
    ``pi/mu`` before truncation), ``loss/approx_kl`` (``E[(r - 1) - log r]``
    between behaviour and learner), ``lr``; :meth:`evaluation_step`:
    ``eval/episode_return``, ``eval/episode_length`` of the greedy policy.

    Args:
      config: hyperparameters; :class:`IMPALAConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env``.
      **overrides: replace fields of ``config``, e.g. ``IMPALA(policy_lag=2)``.
    """

    config_class = IMPALAConfig
    _ASYMMETRIC = False  # its own rollout and targets: the critic sees the observation
    TUNABLE = ("lr", "ent_coef", "vf_coef", "max_grad_norm", "gamma", "vtrace_lambda",
               "rho_bar", "c_bar", "pg_rho_bar")
    """Hyperparameters kept in :attr:`IMPALAState.hyperparams` (traced, tunable by PBT)."""

    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """Global-norm clip then Adam (eps 1e-5), for ``optax.inject_hyperparams``."""
        return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                           optax.adam(learning_rate=learning_rate, eps=1e-5))

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices``, before compiling.

        Raises:
          ValueError: ``num_envs``, ``eval_episodes`` or the envs of a minibatch
            (``num_envs / num_minibatches``) not a multiple of ``num_devices``.
        """
        super().validate(num_devices)
        cfg = self.config
        if (cfg.num_envs // cfg.num_minibatches) % num_devices:
            raise ValueError(
                f"IMPALA: the envs of a minibatch, num_envs/num_minibatches = {cfg.num_envs}/"
                f"{cfg.num_minibatches} = {cfg.num_envs // cfg.num_minibatches}, are not "
                f"divisible by the {num_devices} devices; change num_envs or num_minibatches")

    def init_state(self, key: jax.Array,
                   hyperparams: dict[str, jax.Array] | None = None) -> IMPALAState:
        """:meth:`OnPolicyModule.init_state` with ``policy_lag`` copies of the
        initial parameters as the behaviour queue."""
        state = super().init_state(key, hyperparams)
        fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
        return IMPALAState(**fields, behaviour_params=(state.params,) * self.config.policy_lag)

    def loss(self, params: Any, batch: dict[str, jax.Array],
             hp: dict[str, jax.Array]) -> tuple[jax.Array, dict]:
        """:func:`impala_loss` on a minibatch of trajectories (leaves ``[T, B, ...]``),
        with the V-trace targets and advantages computed from this ``params``'
        policy and critic. ``batch``: ``obs``, ``final_obs`` (normalised when
        observations are), ``action``, ``log_prob`` (the behaviour's),
        ``reward`` (scaled), ``terminated``, ``done``; with a recurrent core also
        ``start`` and ``carry`` (the carry the trajectories started from, with a
        leading axis of 1 so that envs are axis 1 as everywhere else): the
        learner replays the sequences with its own parameters.
        """
        if self.recurrent:  # the sequences again from the carry they started from
            carry = jax.tree.map(lambda c: c[0], batch["carry"])
            carries, dist, values = self.network.apply(params, carry, batch["obs"], batch["start"],
                                                       method=RecurrentActorCritic.sequence)
            next_values = self._values_after(params, carries, batch["final_obs"],
                                             jnp.zeros_like(batch["done"]), None)
        else:
            dist, values = self.network.apply(params, batch["obs"])
            next_values = self.network.apply(params, batch["final_obs"],
                                             method=ActorCritic.value)
        return impala_loss(dist, values, next_values, batch, hp,
                           self.config.normalize_advantages)

    def update(self, params: Any, opt_state: Any, batch: dict[str, jax.Array],
               hp: dict[str, jax.Array], key: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
        """``update_epochs`` x ``num_minibatches`` gradient steps of :meth:`loss`.

        ``batch`` leaves are ``[num_steps, num_envs_per_device, ...]``; each
        device shuffles its envs every epoch and contributes
        ``num_envs_per_device / num_minibatches`` whole trajectories to every
        global minibatch. Returns the losses as ``float32[update_epochs, num_minibatches]``.
        """
        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            params, opt_state, loss, aux = averaged_update(
                self.loss, params, opt_state, self.optimizer, minibatch, hp)
            return (params, opt_state), {"total": loss, **aux}

        (params, opt_state), losses = trajectory_minibatch_epochs(
            minibatch_step, (params, opt_state), batch, key, self.config.update_epochs,
            self.config.num_minibatches)
        return params, opt_state, losses

    def training_step(self, state: IMPALAState, key: jax.Array) -> tuple[IMPALAState, dict]:
        """One update: a rollout with the behaviour parameters, the learner's
        V-trace steps (:meth:`update`), then the behaviour queue moves on by one
        (the parameters this update started from join it, the oldest leave).

        Metrics as :meth:`OnPolicyModule.training_step`'s. With
        ``normalize_observations`` the rollout uses the statistics before this
        step; the rollout's observations are then merged into them and the
        learner sees observations normalised with the merged statistics.
        """
        rollout_key, update_key = self.step_keys(key)
        behaviour = state.behaviour_params[0] if state.behaviour_params else state.params
        env_state, obs, carry, start, traj = self.collect(behaviour, state, rollout_key)
        hp = state.hyperparams
        obs_stats = state.obs_stats
        if obs_stats is not None:
            obs_stats = normalization.update(obs_stats, traj.obs)
        rewards = traj.info.reward
        if self.config.reward_scaling != 1.0:
            rewards = rewards * jnp.asarray(self.config.reward_scaling, rewards.dtype)
        batch = {"obs": self._normalize_obs(obs_stats, traj.obs),
                 "final_obs": self._normalize_obs(obs_stats, traj.info.final_obs),
                 "action": traj.action, "log_prob": traj.log_prob, "reward": rewards,
                 "terminated": traj.info.terminated, "done": traj.info.done}
        if self.recurrent:
            batch["start"] = traj.start
            batch["carry"] = jax.tree.map(lambda c: c[None], state.carry)
        opt_state = self._set_optimizer_hyperparams(state.opt_state, hp, state.update_count)
        params, opt_state, losses = self.update(state.params, opt_state, batch, hp, update_key)
        metrics = {
            **episode_metrics(traj.info),
            **{f"loss/{name}": jnp.mean(value) for name, value in losses.items()},
            "lr": Last.of(self._learning_rate(hp, state.update_count)),
        }
        new_state = state.replace(
            params=params, opt_state=opt_state, update_count=state.update_count + 1,
            env_state=env_state, obs=obs, obs_stats=obs_stats, carry=carry, start=start,
            behaviour_params=(*state.behaviour_params[1:], state.params)[:self.config.policy_lag])
        return new_state, metrics


__all__ = ["IMPALA", "IMPALAConfig", "IMPALAState", "impala_loss", "vtrace"]
