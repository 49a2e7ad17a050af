"""What PPO and A2C share, most of it with IMPALA: the configs' fields and
checks (:class:`OnPolicyConfig`; :class:`GAEConfig` for A2C and PPO,
:class:`MinibatchConfig` for PPO and IMPALA), the rollout, GAE (not IMPALA's),
the state, the learning-rate schedule, evaluation and device handling.

An on-policy update (:meth:`OnPolicyModule.training_step`), as in PureJaxRL's
``purejaxrl/ppo.py`` (``luchris429/purejaxrl``):

1. a ``num_steps`` rollout of this device's ``num_envs / num_devices`` envs in one
   ``lax.scan``, actions sampled from the current policy (:meth:`~OnPolicyModule.rollout`);
2. generalized advantage estimates and value targets in a reverse ``lax.scan``
   (:func:`compute_gae`; Schulman et al. 2016, arXiv:1506.02438). Truncation is
   not termination: a transition cut by the time limit bootstraps from
   ``V(final_obs)``, the value of the observation the episode reached;
3. the algorithm's :meth:`~OnPolicyModule.update` on the flattened rollout:
   PPO's epochs of clipped-surrogate minibatch steps, A2C's one full-batch step.
   Gradients are averaged over devices
   (:func:`~jaxtrainer.distributed.gradient_update`), so an update is the
   one-device update on the same global batch and replicas stay bitwise equal.

Sizes are global (over all devices). Hyperparameters that population-based
training may change live in the state as traced values (``hyperparams``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxtrainer import arguments, envs
from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms.acting import ParamsPolicy
from jaxtrainer.algorithms.cores import Carry, initial_carry
from jaxtrainer.algorithms.hyperparams import annealed, config_record
from jaxtrainer.algorithms.networks import (
    POLICIES,
    ActorCritic,
    Distribution,
    RecurrentActorCritic,
    TanhNormal,
    activation,
)
from jaxtrainer.algorithms.permutation import permutation
from jaxtrainer.algorithms.torsos import NetworkConfig, network_config, torso_factory
from jaxtrainer.distributed import axis_size, fold_in_device, local_size, pmean
from jaxtrainer.envs.evaluation import episode_metrics, evaluation_metrics
from jaxtrainer.metrics import Last, Mean
from jaxtrainer.module import Module

CRITIC_INPUTS = ("observation", "global_state")
"""What the critic of A2C and PPO reads (their configs' ``critic_input``)."""

CRITIC_ROWS = 32768
"""The most observations one critic pass over a rollout values at once
(:meth:`OnPolicyModule.critic_values`): a larger rollout is valued in chunks of
whole steps, so the critic's activations take a chunk's memory, not the
rollout's (at 4096 envs x 80 steps and 256 units, 320 MiB a layer)."""


@dataclasses.dataclass(frozen=True)
class OnPolicyConfig:
    """The fields every on-policy config has (A2C's, PPO's, IMPALA's), with
    PureJaxRL's CartPole PPO defaults (``purejaxrl/ppo.py``), and their checks.
    Sizes are global (over all devices). The algorithms' configs add their own
    fields (through :class:`GAEConfig` and :class:`MinibatchConfig` where they
    share them) and change defaults; subclasses check their own fields after
    ``super().__post_init__()``.

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make`.
      num_envs: parallel environments, over all devices.
      num_steps: rollout length per env per update; one update consumes
        ``num_envs * num_steps`` env steps.
      total_updates: the number of updates the learning rate anneals over (with
        ``anneal_lr``); after it the rate stays 0. ``None`` (default): the run's
        budget, which the Trainer passes in (``configure_budget``).
      lr: learning rate (the initial one when annealing), ``>= 0``.
      anneal_lr: anneal the learning rate linearly to 0 over ``total_updates``.
      gamma: discount factor.
      ent_coef: entropy bonus coefficient.
      vf_coef: value loss coefficient.
      max_grad_norm: global gradient-norm clip; ``float('inf')`` (YAML ``.inf``): none.
      normalize_advantages: standardise advantages (global mean and standard
        deviation over all devices).
      normalize_observations: normalise observations with running statistics of
        every observation seen (:mod:`jaxtrainer.algorithms.normalization`), kept
        in the state (``obs_stats``) and updated once per update before it.
      reward_scaling: rewards are multiplied by it for learning only; logged
        episode returns are unscaled.
      activation: hidden activation of the actor's and critic's MLPs.
      hidden_sizes: hidden layer widths of the actor (and of the critic when
        ``critic_hidden_sizes`` is ``None``).
      critic_hidden_sizes: hidden layer widths of the critic; ``None``: as the actor's.
      eval_episodes: fresh greedy episodes per evaluation, global.
      network: the torso before the hidden layers
        (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`, or a mapping of its
        fields such as ``{"torso": "cnn"}``); default: none, the flattened
        observation (``mlp``).
      policy: the distribution of continuous actions: ``gaussian`` (default; a
        Gaussian with a state-independent log standard deviation, PureJaxRL's
        and the PPO paper's, actions clipped to the bounds) or ``brax``
        (Brax's ``make_ppo_networks``: a tanh-squashed Gaussian whose scale the
        actor outputs, ``softplus + 0.001``, actions ``tanh`` of the sample
        scaled to the bounds, ``lecun_uniform`` layers; PPO's entropy bonus
        then uses one sample per minibatch, as Brax's). Discrete actions: unused.
    """

    env: str = "CartPole-v1"
    num_envs: int = 4
    num_steps: int = 128
    total_updates: int | None = None
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    normalize_observations: bool = False
    reward_scaling: float = 1.0
    activation: str = "tanh"
    hidden_sizes: tuple[int, ...] = (64, 64)
    critic_hidden_sizes: tuple[int, ...] | None = None
    eval_episodes: int = 32
    network: NetworkConfig = NetworkConfig()
    policy: str = "gaussian"

    def __post_init__(self) -> None:
        """Check and normalise the fields above: ``hidden_sizes`` (and
        ``critic_hidden_sizes``) to a tuple of ints, whole-float sizes to ints.

        Raises:
          ValueError: a size that is not a positive int, a negative coefficient, an
            on/off field that is not a bool, an unknown activation; the message names
            the config class and field (e.g. ``PPOConfig.lr='abc': expected a
            non-negative number``).
        """
        arguments.check_fields(self, arguments.sizes, ("hidden_sizes",))
        if self.critic_hidden_sizes is not None:
            arguments.check_fields(self, arguments.sizes, ("critic_hidden_sizes",))
        arguments.check_fields(self, arguments.positive_int,
                               ("num_envs", "num_steps", "eval_episodes"), allow_none=False)
        arguments.check_fields(self, arguments.positive_int, ("total_updates",))
        arguments.check_fields(self, arguments.number, ("lr", "ent_coef", "vf_coef",
                                                        "max_grad_norm", "reward_scaling"), low=0)
        arguments.check_fields(self, arguments.number, ("gamma",), low=0, high=1)  # a discount
        arguments.check_fields(self, arguments.flag, ("anneal_lr", "normalize_advantages",
                                                      "normalize_observations"))
        activation(self.activation, f"{type(self).__name__}.activation")
        arguments.one_of(f"{type(self).__name__}.policy", self.policy, POLICIES)
        object.__setattr__(self, "network", network_config(self.network, type(self).__name__))


@dataclasses.dataclass(frozen=True)
class GAEConfig(OnPolicyConfig):
    """:class:`OnPolicyConfig` with the fields of the generalized advantage
    estimates of :meth:`OnPolicyModule.advantages_and_targets` (A2C's and PPO's;
    Schulman et al. 2016, arXiv:1506.02438).

    Attributes:
      unroll_length: GAE runs over segments of this many steps, each bootstrapped
        from the value where it ends, as Brax's PPO computes it per unroll;
        ``None`` (default): over the whole rollout (PureJaxRL's). ``num_steps``
        must be a multiple of it.
      gae_lambda: GAE's lambda. With 1.0 the advantages are ``n``-step returns.
      bootstrap_truncation: a transition cut by the time limit bootstraps from
        ``V(final_obs)`` (the critic values the final observations of the
        rollout's last step and of its truncated steps). ``False``: PureJaxRL's terminal-only
        bootstrapping, every episode end (time limit included) is terminal and
        only the observations after the rollout are valued; faster, biased on
        time-limited tasks.
      critic_input: what the critic reads. ``"observation"`` (default): each
        env's own observation, as the actor. ``"global_state"``: a centralised
        critic (MAPPO: Yu et al. 2022, "The Surprising Effectiveness of PPO in
        Cooperative Multi-Agent Games", arXiv:2103.01955) on each env's critic
        input from the env (a multi-agent env seen through
        :class:`~jaxtrainer.envs.AgentsAsEnvs`: its game's global state and its
        agent's one-hot id), while the actor reads the agent's own
        observation. Needs a feedforward network on flat inputs (``network``'s
        default ``mlp`` torso, no core) and ``normalize_observations=False``.
    """

    unroll_length: int | None = None
    gae_lambda: float = 0.95
    bootstrap_truncation: bool = True
    critic_input: str = "observation"

    def __post_init__(self) -> None:
        """:meth:`OnPolicyConfig.__post_init__`, then the fields above.

        Raises:
          ValueError: as there, ``num_steps`` not a multiple of ``unroll_length``,
            ``critic_input`` not in :data:`CRITIC_INPUTS` (listing them), or
            ``critic_input="global_state"`` with a recurrent core, a torso other
            than ``mlp`` or ``normalize_observations`` (the message names the field).
        """
        super().__post_init__()
        arguments.check_fields(self, arguments.positive_int, ("unroll_length",))
        if self.unroll_length is not None and self.num_steps % self.unroll_length:
            raise ValueError(
                f"{type(self).__name__}: num_steps={self.num_steps} is not a multiple of "
                f"unroll_length={self.unroll_length}")
        arguments.check_fields(self, arguments.number, ("gae_lambda",), low=0, high=1)
        arguments.check_fields(self, arguments.flag, ("bootstrap_truncation",))
        arguments.check_fields(self, arguments.one_of, ("critic_input",), choices=CRITIC_INPUTS)
        if self.critic_input == "global_state":
            name = f"{type(self).__name__}: critic_input='global_state'"
            if self.network.core is not None:
                raise ValueError(f"{name} needs a feedforward network; got network.core="
                                 f"{self.network.core!r} (use network.core=null)")
            if self.network.torso != "mlp":
                raise ValueError(f"{name} reads flat inputs; got network.torso="
                                 f"{self.network.torso!r} (use network.torso='mlp')")
            if self.normalize_observations:
                raise ValueError(f"{name} does not normalise its inputs; got "
                                 "normalize_observations=True (use False)")


@dataclasses.dataclass(frozen=True)
class MinibatchConfig(OnPolicyConfig):
    """:class:`OnPolicyConfig` with epochs of minibatch steps over each rollout
    (PPO's and IMPALA's; how a minibatch is cut is the algorithm's).

    Attributes:
      update_epochs: passes over each rollout.
      num_minibatches: minibatches per epoch.
    """

    update_epochs: int = 4
    num_minibatches: int = 4

    def __post_init__(self) -> None:
        """:meth:`OnPolicyConfig.__post_init__`, then the fields above (positive ints).

        Raises:
          ValueError: as there, or a count that is not a positive int.
        """
        super().__post_init__()
        arguments.check_fields(self, arguments.positive_int,
                               ("update_epochs", "num_minibatches"), allow_none=False)


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


@struct.dataclass
class Rollout:
    """One rollout, every leaf ``[num_steps, num_envs_per_device, ...]``.

    ``obs``: observations acted on (raw, before any normalisation); ``action``: sampled (unclipped) actions;
    ``log_prob``, ``value``: ``float32``, under the rollout's parameters;
    ``info``: the env's :class:`jaxtrainer.envs.StepInfo`. With a recurrent
    core: ``start``, ``bool``, the observation began an episode (the carry was
    reset before it); ``carry``, the carry after each step (what the next
    observation, or ``info.final_obs``, is seen with). ``None`` without.
    With ``critic_input="global_state"``: ``critic_obs``,
    ``float32[..., critic_input_size]``, what the critic valued at each step
    (the env's ``critic_inputs``); ``None`` otherwise.
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    info: envs.StepInfo
    start: jax.Array | None = None
    carry: Any = None
    critic_obs: jax.Array | None = None


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: float,
    gae_lambda: float,
    unroll_length: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimates and value targets (arXiv:1506.02438, eq. 16).

    All inputs are ``[T, ...]`` with time first::

        delta_t = r_t + gamma * (1 - terminated_t) * next_value_t - value_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   A_T = 0

    ``next_value_t`` is the value of the observation step ``t`` reached, before
    any auto-reset, i.e. ``V(final_obs_t)``: the next step's value inside an
    episode, the bootstrap value on truncation (terminated=False, done=True) and
    ignored on termination. The bootstrap of the rollout's last step is thus
    ``next_value_{T-1}``.

    Args:
      rewards, values, next_values: ``float32[T, ...]``.
      terminated: ``bool[T, ...]``, a terminal state was reached (no bootstrap).
      done: ``bool[T, ...]``, the episode ended (terminated or truncated): the
        advantage recursion stops.
      gamma: discount. gae_lambda: GAE's lambda.
      unroll_length: cut the recursion after every ``unroll_length`` steps, so
        each segment's last step bootstraps from ``next_value`` alone: GAE per
        unroll, as Brax's PPO computes it on its ``unroll_length`` trajectories
        (``brax/training/agents/ppo/losses.py``, ``compute_gae``). ``None``: one
        recursion over all ``T`` steps.

    Returns:
      ``(advantages, targets)``, both ``float32[T, ...]``; ``targets = advantages + values``.
    """
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    if unroll_length is not None:
        segment_end = (jnp.arange(not_done.shape[0]) + 1) % unroll_length == 0
        not_done = not_done * (1.0 - segment_end.astype(jnp.float32)).reshape(
            (-1,) + (1,) * (not_done.ndim - 1))
    deltas = rewards + gamma * next_values * not_terminated - values

    def backward(gae, step):
        delta, cont = step
        gae = delta + gamma * gae_lambda * cont * gae
        return gae, gae

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(deltas[0]), (deltas, not_done),
                                 reverse=True, unroll=16)
    return advantages, advantages + values


def normalize_advantages(advantages: jax.Array, eps: float = 1e-8,
                         moments: jax.Array | None = None) -> jax.Array:
    """``(A - mean) / (std + eps)`` with the mean and (population) standard deviation
    of the GLOBAL minibatch. ``advantages``: ``float32[...]``, this device's share;
    ``moments``: ``float32[2]``, its global (mean, variance) when already reduced
    (:func:`minibatch_advantage_moments`).

    On one device (no device axis bound, or one of size 1): the two-pass ``mean``,
    ``mean((A - mean)^2)``. Over devices, one all-reduce (see :func:`global_moments`).
    """
    if moments is None:
        if axis_size() == 1:
            mean = jnp.mean(advantages)
            var = jnp.mean(jnp.square(advantages - mean))
            return (advantages - mean) / (jnp.sqrt(var) + eps)
        moments = global_moments(advantages.reshape(1, -1))[0]
    return (advantages - moments[0]) / (jnp.sqrt(moments[1]) + eps)


def global_moments(shares: jax.Array) -> jax.Array:
    """``float32[k, 2]``: the global (mean, population variance) of each row of
    ``shares`` (``float32[k, m]``, this device's equal-sized share of ``k`` batches),
    with one all-reduce for all rows: a collective's latency, which dominates
    between processes, is paid once. With each share's mean ``m_i`` and squared
    deviation ``v_i``, the global variance is ``mean_i(v_i) + mean_i(m_i^2) - m^2``,
    ``m = mean_i(m_i)`` (Chan, Golub & LeVeque's pairwise update, 1979)."""
    local_mean = jnp.mean(shares, axis=1)
    local_var = jnp.mean(jnp.square(shares - local_mean[:, None]), axis=1)
    mean, within, mean_sq = pmean(jnp.stack([local_mean, local_var, jnp.square(local_mean)]))
    return jnp.stack([mean, jnp.maximum(within + (mean_sq - jnp.square(mean)), 0.0)], axis=1)


def minibatch_advantage_moments(advantages: jax.Array, epoch_key: jax.Array,
                                num_minibatches: int) -> jax.Array | None:
    """``float32[num_minibatches, 2]``: the global advantage (mean, variance) of each
    minibatch of the epoch :func:`minibatch_epochs` cuts with ``epoch_key``, in one
    all-reduce for the epoch instead of one per minibatch; ``None`` on one device
    (each minibatch computes its own, as without a device axis). ``advantages``:
    ``float32[n, ...]``, this device's share, shuffled along its first axis."""
    if axis_size() == 1:
        return None
    perm = permutation(epoch_key, advantages.shape[0])
    shares = jnp.take(advantages, perm, axis=0).reshape(num_minibatches, -1)
    return global_moments(shares)


def minibatch_epochs(step: Callable[[Any, dict[str, jax.Array]], tuple[Any, dict]],
                     carry: Any, batch: dict[str, jax.Array], key: jax.Array, epochs: int,
                     num_minibatches: int,
                     extra: Callable[[jax.Array], dict[str, jax.Array]] | None = None,
                     ) -> tuple[Any, dict[str, jax.Array]]:
    """``epochs`` passes over ``batch`` (leaves ``[n, ...]``, this device's
    share), each shuffled with its own key and cut into ``num_minibatches``
    minibatches, ``carry, aux = step(carry, minibatch)`` on each in a
    ``lax.scan`` (PPO's and PQN's updates, as CleanRL's and PureJaxRL's).
    ``extra(epoch_key)``: leaves ``[num_minibatches, ...]`` added to the
    minibatches (PPO's Brax entropy keys). Returns the carry and ``aux`` stacked
    as ``[epochs, num_minibatches, ...]``."""
    size = jax.tree.leaves(batch)[0].shape[0]

    def epoch(carry, epoch_key):
        perm = permutation(epoch_key, size)
        shuffled = jax.tree.map(
            lambda x: jnp.take(x, perm, axis=0).reshape((num_minibatches, -1) + x.shape[1:]),
            batch)
        if extra is not None:
            shuffled = {**shuffled, **extra(epoch_key)}
        return jax.lax.scan(step, carry, shuffled)

    return jax.lax.scan(epoch, carry, jax.random.split(key, epochs))


class OnPolicyModule(ParamsPolicy, Module):
    """Base of :class:`~jaxtrainer.algorithms.PPO` and :class:`~jaxtrainer.algorithms.A2C`.

    Subclasses set :attr:`config_class` (a frozen dataclass with ``env``,
    ``num_envs``, ``num_steps``, ``total_updates``, ``lr``, ``anneal_lr``,
    ``max_grad_norm``, ``activation``, ``hidden_sizes``, ``eval_episodes`` and the
    :attr:`TUNABLE` names) and :attr:`TUNABLE`, and implement
    :meth:`base_optimizer` and :meth:`update`. Actor and critic are separate
    :class:`~jaxtrainer.algorithms.networks.ActorCritic` MLPs (with a recurrent
    ``network.core``, a :class:`~jaxtrainer.algorithms.networks.RecurrentActorCritic`
    sharing torso and core); the policy is categorical (discrete actions), a
    factorised categorical (multi-discrete actions, ``int32[n, len(action_nvec)]``:
    :class:`~jaxtrainer.algorithms.networks.MultiCategorical`) or a
    diagonal Gaussian (continuous; sampled actions are clipped to the env's
    bounds only when passed to the env, the unclipped action is what the
    log-probabilities refer to), or with ``policy="brax"`` Brax's tanh-squashed
    Gaussian (:class:`~jaxtrainer.algorithms.networks.TanhNormal`).

    Args:
      config: hyperparameters; ``config_class()`` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env`` (an environment name).
      **overrides: replace fields of ``config``, e.g. ``PPO(num_envs=8)``.
    """

    config_class: type = type(None)
    TUNABLE: tuple[str, ...] = ()
    """Hyperparameters kept in :attr:`OnPolicyState.hyperparams` (traced, tunable by PBT)."""

    def __init__(self, config: Any = None, *, env: envs.Env | str | None = None,
                 **overrides: Any) -> None:
        config = config or self.config_class()
        if isinstance(env, str):  # PPO(env="CartPole-v1"): a name, as in the config's env
            overrides["env"], env = env, None
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self.env = env if env is not None else envs.make(config.env)
        self.env_steps_per_step = config.num_envs * config.num_steps
        network = config.network
        self.recurrent = network.core is not None
        self.global_critic = getattr(config, "critic_input", "observation") == "global_state"
        if self.global_critic and not hasattr(self.env, "critic_inputs"):
            raise ValueError(
                f"{type(self).__name__}: critic_input='global_state' needs an env with a "
                f"global state (a multi-agent env through AgentsAsEnvs, e.g. "
                f"make('jaxmarl/MPE_simple_spread_v3')); {self.env.name!r} "
                f"({type(self.env).__name__}) has none: use critic_input='observation'")
        self.network = self.make_network()
        # learning_rate and max_grad_norm live in the optimizer state as traced
        # values (optax.inject_hyperparams), set from ``state.hyperparams`` before
        # every update. ``optax.flatten``: the optimizer runs on one vector of all
        # parameters, the same elementwise math in a few fused ops instead of a
        # few per parameter array (on CPU, 3-8% of a CartPole PPO update).
        def flat_optimizer(learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
            return optax.flatten(self.base_optimizer(learning_rate, max_grad_norm))

        self.optimizer = optax.inject_hyperparams(flat_optimizer)(
            learning_rate=config.lr, max_grad_norm=config.max_grad_norm)

    def make_network(self) -> Any:
        """The flax module :meth:`init_state` initialises: an
        :class:`~jaxtrainer.algorithms.networks.ActorCritic` (with ``network.core``
        a :class:`~jaxtrainer.algorithms.networks.RecurrentActorCritic`) laid out
        from the config and the env."""
        config, network = self.config, self.config.network
        layout = dict(
            action_dim=self.env.num_actions if self.env.discrete else self.env.action_size,
            discrete=self.env.discrete,
            obs_ndim=len(self.env.observation_shape),
            hidden_sizes=config.hidden_sizes,
            critic_hidden_sizes=config.critic_hidden_sizes,
            activation=config.activation,
            torso=torso_factory(network, self.env.observation_shape, math.sqrt(2),
                                observation_layout=self.env.observation_layout),
            distribution=config.policy,
            critic_ndim=1 if self.global_critic else None,
            action_nvec=self.env.action_nvec,
        )
        if self.recurrent:
            return RecurrentActorCritic(**layout, core=network.core, core_size=network.core_size)
        return ActorCritic(**layout)

    # ---- to implement -----------------------------------------------------
    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """The optimizer (for ``optax.inject_hyperparams``; the module runs it
        under ``optax.flatten``, on all parameters as one vector)."""
        raise NotImplementedError

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

    # ---- configuration ---------------------------------------------------
    def initial_hyperparams(self) -> dict[str, jax.Array]:
        """``{name: float32[]}`` for every name in :attr:`TUNABLE`, from the config:
        the strategy passes them to :meth:`init_state` as an argument."""
        return {name: jnp.asarray(getattr(self.config, name), jnp.float32)
                for name in self.TUNABLE}

    _budget: int | None = None

    def configure_budget(self, max_steps: int) -> None:
        """The Trainer's budget in updates; the learning rate anneals over it
        when ``config.total_updates`` is ``None``."""
        self._budget = int(max_steps)

    @property
    def total_updates(self) -> int | None:
        """Updates the learning rate anneals over: ``config.total_updates``, else
        the budget from :meth:`configure_budget` (``None`` before ``fit``)."""
        return self.config.total_updates if self.config.total_updates is not None else self._budget

    def _learning_rate(self, hyperparams: dict[str, jax.Array], update: jax.Array) -> jax.Array:
        """Learning rate of update number ``update`` (int32[], from 0): ``lr``, or
        with ``anneal_lr`` ``optax.linear_schedule`` from ``lr`` to 0 over
        ``total_updates`` (0 after it), i.e. ``lr * (1 - update / total_updates)``.

        Raises:
          ValueError: annealing with ``total_updates=None`` outside a Trainer
            (nothing has set the budget).
        """
        lr = hyperparams["lr"]
        if not self.config.anneal_lr:
            return lr
        if self.total_updates is None:
            raise ValueError(
                f"{type(self).__name__}: anneal_lr=True with total_updates=None needs the run's "
                "budget: train it with a Trainer (which calls configure_budget(max_steps)), "
                "or set total_updates, or anneal_lr=False")
        return annealed(lr, update, self.total_updates)

    def _set_optimizer_hyperparams(self, opt_state: Any, hyperparams: dict[str, jax.Array],
                                   update: jax.Array) -> Any:
        """``opt_state`` with this update's learning rate and gradient-norm clip."""
        inner = {**opt_state.hyperparams,
                 "learning_rate": self._learning_rate(hyperparams, update),
                 "max_grad_norm": hyperparams["max_grad_norm"]}
        return opt_state._replace(hyperparams=inner)

    def validate(self, num_devices: int) -> None:
        """Reject global sizes that do not split over ``num_devices``, before compiling.

        Raises:
          ValueError: ``num_envs`` or ``eval_episodes`` is not a multiple of
            ``num_devices`` (the message names the value and count), or of an
            env's whole games on each device (``batch_multiple``: a multi-agent
            game's agents).
        """
        multiple = int(getattr(self.env, "batch_multiple", 1))
        arguments.split_over_devices(
            type(self).__name__, num_devices, multiple=multiple,
            multiple_of=f"the {multiple} agents of a {self.env.name} game (each env is one agent)",
            num_envs=self.config.num_envs, eval_episodes=self.config.eval_episodes)

    def hparams(self) -> dict[str, Any]:
        return config_record(self.config, total_updates=self.total_updates)

    # ---- policy helpers --------------------------------------------------
    def _env_action(self, action: jax.Array) -> jax.Array:
        """Continuous actions clipped to the env's bounds (with ``policy=brax``:
        the pre-tanh sample squashed by ``tanh`` and scaled from ``[-1, 1]`` to
        the bounds); discrete ones as they are."""
        if self.env.discrete:
            return action
        low, high = self.env.action_low, self.env.action_high
        if self.network.tanh_normal:
            return low + (TanhNormal.squash(action) + 1.0) * (0.5 * (high - low))
        return jnp.clip(action, low, high)

    def _normalize_obs(self, obs_stats: normalization.RunningStatistics | None,
                       obs: jax.Array) -> jax.Array:
        """``obs`` normalised with ``obs_stats``; unchanged when ``None``."""
        return obs if obs_stats is None else normalization.normalize(obs_stats, obs)

    def initial_carry(self, batch: int) -> Carry | None:
        """The carry ``batch`` episodes start from (zeros; with a recurrent core,
        :func:`~jaxtrainer.algorithms.cores.initial_carry`); ``None`` without a core."""
        if not self.recurrent:
            return None
        return initial_carry(self.config.network.core, self.config.network.core_size, batch)

    def _policy_step(self, params: Any, obs: jax.Array, carry: Carry,
                     ) -> tuple[Any, Distribution]:
        """One acting step: ``(carry, dist)`` for ``obs[n, ...]``, ``dist`` of
        batch shape ``[n]`` (``[1, n]`` with a core, one step of a sequence that
        continues ``carry``; ``carry`` is ``None`` without a core)."""
        if self.config.normalize_observations:
            params, obs_stats = params
            obs = self._normalize_obs(obs_stats, obs)
        if not self.recurrent:
            return None, self.network.apply(params, obs, method=ActorCritic.policy)
        start = jnp.zeros(obs.shape[:1], jnp.bool_)
        carry, dist, _ = self.network.apply(params, carry, obs[None], start[None])
        return carry, dist

    def greedy_policy(self) -> Callable[..., Any]:
        """``policy(params, obs[n, ...], key) -> actions[n, ...]``: argmax or the mean
        action (clipped), for :func:`jaxtrainer.envs.evaluate_policy`. ``params`` is
        :meth:`policy_params`: with ``normalize_observations`` the pair
        ``(params, obs_stats)``, and raw observations are normalised first.

        With a recurrent core: ``policy(params, obs[n, ...], key, carry) ->
        (actions[n, ...], carry)``, ``carry`` as :meth:`initial_carry` ``(n)``
        (zeros at an episode's first observation)."""
        if self.recurrent:
            def recurrent_policy(params, obs, key, carry):
                del key
                carry, dist = self._policy_step(params, obs, carry)
                return self._env_action(dist.mode()[0]), carry
            return recurrent_policy

        def policy(params, obs, key):
            del key
            return self._env_action(self._policy_step(params, obs, None)[1].mode())
        return policy

    def sample_policy(self) -> Callable[..., Any]:
        """As :meth:`greedy_policy`, an action sampled from the policy
        distribution (clipped to the bounds) with ``key``."""
        if self.recurrent:
            def recurrent_sample(params, obs, key, carry):
                carry, dist = self._policy_step(params, obs, carry)
                return self._env_action(dist.sample(key)[0]), carry
            return recurrent_sample

        def sample(params, obs, key):
            return self._env_action(self._policy_step(params, obs, None)[1].sample(key))
        return sample

    def policy_params(self, state: OnPolicyState) -> Any:
        """What :meth:`greedy_policy` takes: ``state.params``, or with
        ``normalize_observations`` ``(state.params, state.obs_stats)``."""
        if self.config.normalize_observations:
            return state.params, state.obs_stats
        return state.params

    # ---- Module ------------------------------------------------------------
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
        elif self.global_critic:
            params = self.network.init(params_key, dummy,
                                       jnp.zeros((self.env.critic_input_size,), jnp.float32))
        else:
            params = self.network.init(params_key, dummy)
        num_envs = local_size(self.config.num_envs, "num_envs")
        env_key = fold_in_device(env_key)
        obs, env_state = self.env.reset_batch(env_key, num_envs)
        obs_stats = (normalization.init(self.env.observation_shape)
                     if self.config.normalize_observations else None)
        carry = self.initial_carry(num_envs)
        start = jnp.ones((num_envs,), jnp.bool_) if self.recurrent else None
        hp = self.initial_hyperparams() if hyperparams is None else dict(hyperparams)
        opt_state = self.optimizer.init(params)
        opt_state = opt_state._replace(hyperparams={
            **opt_state.hyperparams, "learning_rate": hp["lr"], "max_grad_norm": hp["max_grad_norm"]})
        return OnPolicyState(params, opt_state, jnp.zeros((), jnp.int32),
                             env_state, obs, hp, obs_stats, carry, start)

    def rollout(self, params: Any, env_state: envs.EnvState, obs: jax.Array,
                key: jax.Array, obs_stats: normalization.RunningStatistics | None = None,
                ) -> tuple[envs.EnvState, jax.Array, Rollout]:
        """``num_steps`` steps of this device's envs in one ``lax.scan``, actions
        sampled from the policy with ``params`` on observations normalised with
        ``obs_stats`` (when given). Returns the env state and (raw) observations
        after the rollout and the :class:`Rollout` (``[num_steps, n]``).

        Only the actor runs inside the loop; the critic values every observation
        of the rollout in batched passes after it (:meth:`critic_values`; the
        values do not steer the rollout), which on small env batches saves most
        of a step's critic cost.
        The actions' noise of every step (:meth:`Categorical.noise
        <jaxtrainer.algorithms.networks.Categorical.noise>`) is drawn before the
        loop in one batched call, the same bits as drawing inside it: on CPU
        every draw inside a loop body is a small loop of its own (XLA's CPU
        lowering of the threefry hash is a 5-round ``while``)."""
        num_envs = obs.shape[0]

        def policy(obs):
            return self.network.apply(params, self._normalize_obs(obs_stats, obs),
                                      method=ActorCritic.policy)

        def one_step(carry, step_draws):
            env_state, obs = carry
            noise, env_keys = step_draws
            critic_obs = self.env.critic_inputs(env_state) if self.global_critic else None
            dist = policy(obs)
            action = dist.sample_with(noise)
            log_prob = dist.log_prob(action)
            next_obs, env_state, info = jax.vmap(self.env.step)(
                env_keys, env_state, self._env_action(action))
            return (env_state, next_obs), (obs, action, log_prob, info, critic_obs)

        # a step's key -> (action key, env key -> one per env), as drawing inside the loop
        pairs = jax.vmap(jax.random.split)(jax.random.split(key, self.config.num_steps))
        noise = jax.vmap(jax.eval_shape(policy, obs).noise)(pairs[:, 0])
        env_keys = jax.vmap(lambda k: jax.random.split(k, num_envs))(pairs[:, 1])
        (env_state, obs), (traj_obs, action, log_prob, info, critic_obs) = jax.lax.scan(
            one_step, (env_state, obs), (noise, env_keys))
        value = self.critic_values(params, traj_obs if critic_obs is None else critic_obs,
                                   obs_stats)
        return env_state, obs, Rollout(traj_obs, action, log_prob, value, info,
                                       critic_obs=critic_obs)

    def critic_values(self, params: Any, obs: jax.Array,
                      obs_stats: normalization.RunningStatistics | None = None) -> jax.Array:
        """The critic's values of ``obs`` (``[steps, n, *observation_shape]``,
        normalised with ``obs_stats`` when given; with
        ``critic_input="global_state"`` the critic inputs,
        ``float32[steps, n, critic_input_size]``), ``float32[steps, n]``, for a
        feedforward network: one batched pass, or with more than
        :data:`CRITIC_ROWS` observations a ``lax.map`` over chunks of whole steps
        (the same values: each is a function of its own observation only)."""
        def value(obs):
            return self.network.apply(params, self._normalize_obs(obs_stats, obs),
                                      method=ActorCritic.value)

        steps, n = obs.shape[:2]
        chunk = max(1, CRITIC_ROWS // n)
        return value(obs) if chunk >= steps else jax.lax.map(value, obs, batch_size=chunk)

    def recurrent_rollout(self, params: Any, env_state: envs.EnvState, obs: jax.Array,
                          carry: Carry, start: jax.Array, key: jax.Array,
                          obs_stats: normalization.RunningStatistics | None = None,
                          ) -> tuple[envs.EnvState, jax.Array, Carry, jax.Array, Rollout]:
        """:meth:`rollout` with a recurrent core: the carry goes from step to
        step, reset to zeros before an episode's first observation (``start``,
        ``bool[n]``: the previous step ended its episode), and the critic's
        values come from the same core pass as the actions. The actions' noise
        is drawn before the loop, as :meth:`rollout` does.

        Returns ``(env_state, obs, carry, start)`` after the rollout (what the
        next rollout continues from) and the :class:`Rollout` with ``start``
        and ``carry`` (the carry after each step, ``[num_steps, n, ...]``)."""
        num_envs = obs.shape[0]

        def network_step(carry, obs, start):
            return self.network.apply(params, carry, self._normalize_obs(obs_stats, obs)[None],
                                      start[None])

        def one_step(loop, step_draws):
            env_state, obs, carry, start = loop
            noise, env_keys = step_draws
            carry, dist, value = network_step(carry, obs, start)
            action = dist.sample_with(noise)
            log_prob = dist.log_prob(action)[0]
            action = action[0]
            next_obs, env_state, info = jax.vmap(self.env.step)(
                env_keys, env_state, self._env_action(action))
            return ((env_state, next_obs, carry, info.done),
                    (obs, start, action, log_prob, value[0], carry, info))

        pairs = jax.vmap(jax.random.split)(jax.random.split(key, self.config.num_steps))
        noise = jax.vmap(jax.eval_shape(network_step, carry, obs, start)[1].noise)(pairs[:, 0])
        env_keys = jax.vmap(lambda k: jax.random.split(k, num_envs))(pairs[:, 1])
        (env_state, obs, carry, start), out = jax.lax.scan(
            one_step, (env_state, obs, carry, start), (noise, env_keys))
        traj_obs, traj_start, action, log_prob, value, carries, info = out
        return env_state, obs, carry, start, Rollout(traj_obs, action, log_prob, value, info,
                                                    traj_start, carries)

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
                                            state.obs_stats)
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
                               ) -> tuple[jax.Array, jax.Array]:
        """GAE advantages and value targets, ``float32[num_steps, num_envs_per_device]``.

        With ``config.bootstrap_truncation`` (default) the next-state value of
        every step is ``V(final_obs)``: inside an episode the value of the next
        observation, on truncation the bootstrap value of the observation the
        time limit cut, ignored on termination. Without a core only what
        ``traj.value`` lacks is valued: the last step's ``final_obs`` and those
        of the truncated steps (:meth:`_bootstrap_truncations`); inside an
        episode ``final_obs`` is the next step's observation (the
        :class:`~jaxtrainer.envs.StepInfo` contract), whose value ``traj.value``
        holds, and on termination any value is multiplied by 0. With a core, one
        critic pass over the rollout's ``final_obs``. Without it (PureJaxRL's terminal-only
        bootstrapping) every episode end is treated as terminal and the next
        value is the next step's ``traj.value``, the last step's ``V(last_obs)``
        (``last_obs``: ``[num_envs_per_device, ...]``, the observations after the
        rollout, required then; with ``critic_input="global_state"`` the
        critic inputs after it): one critic pass over ``last_obs`` only. With
        ``critic_input="global_state"`` the critic values the env's critic
        inputs (``traj.critic_obs``; at ``final_obs`` the env's
        ``final_critic_inputs`` of ``traj.info``).
        Observations are normalised with ``obs_stats`` (the rollout's
        statistics, as its values). Rewards are multiplied by
        ``config.reward_scaling`` here, for learning only.

        Raises:
          ValueError: ``bootstrap_truncation=False`` without ``last_obs``.
        """
        hp = self.initial_hyperparams() if hyperparams is None else hyperparams
        if self.config.bootstrap_truncation:
            if self.recurrent:  # V(final_obs) one step after each step's carry, no reset
                next_values = self._values_after(params, traj.carry, traj.info.final_obs,
                                                 jnp.zeros_like(traj.info.done), obs_stats)
            else:
                final = (self.env.final_critic_inputs(traj.info) if self.global_critic
                         else traj.info.final_obs)
                last = self.critic_values(params, jax.tree.map(lambda x: x[-1:], final),
                                          obs_stats)
                next_values = self._bootstrap_truncations(
                    params, traj, obs_stats, jnp.concatenate([traj.value[1:], last]), final)
            terminated = traj.info.terminated
        else:
            if last_obs is None:
                raise ValueError(f"{type(self).__name__}.advantages_and_targets: "
                                 "bootstrap_truncation=False needs last_obs")
            if self.recurrent:
                last_value = self._values_after(params, jax.tree.map(lambda c: c[-1], traj.carry),
                                                last_obs, traj.info.done[-1], obs_stats)
            else:
                last_value = self.network.apply(params, self._normalize_obs(obs_stats, last_obs),
                                                method=ActorCritic.value)
            next_values = jnp.concatenate([traj.value[1:], last_value[None]])
            terminated = traj.info.done
        rewards = traj.info.reward
        if self.config.reward_scaling != 1.0:
            rewards = rewards * jnp.asarray(self.config.reward_scaling, rewards.dtype)
        return compute_gae(rewards, traj.value, next_values, terminated,
                           traj.info.done, hp["gamma"], hp["gae_lambda"],
                           self.config.unroll_length)

    def _bootstrap_truncations(self, params: Any, traj: Rollout,
                               obs_stats: normalization.RunningStatistics | None,
                               next_values: jax.Array, final_obs: Any) -> jax.Array:
        """``next_values`` (``float32[num_steps, n]``) with ``V(final_obs)`` at
        every truncated step but the last (which ``next_values`` holds);
        ``final_obs`` (leaves ``[num_steps, n, ...]``) is what the critic values
        there: ``traj.info.final_obs``, or the final critic inputs. Each
        iteration of a ``lax.while_loop`` values every env's first truncated
        step not yet valued, a critic pass over ``n`` observations; it runs as
        many times as one env truncated most often in the rollout: at most once
        when the rollout is shorter than the time limit, not at all without
        truncations."""
        todo = traj.info.truncated.at[-1].set(False)
        steps, n = todo.shape
        envs_ = jnp.arange(n)

        def value_next_truncation(carry):
            todo, next_values = carry
            step = jnp.argmax(todo, axis=0)  # each env's first step still to value (0: none)
            final = jax.tree.map(lambda x: x[step, envs_][None], final_obs)
            value = self.critic_values(params, final, obs_stats)[0]
            hit = jnp.logical_and(todo, jnp.arange(steps)[:, None] == step)
            return jnp.logical_and(todo, ~hit), jnp.where(hit, value, next_values)

        return jax.lax.while_loop(lambda carry: jnp.any(carry[0]), value_next_truncation,
                                  (todo, next_values))[1]

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
        normalised with the merged statistics, which the new state keeps.
        """
        rollout_key, update_key = self.step_keys(key)
        env_state, obs, carry, start, traj = self.collect(state.params, state, rollout_key)
        hp = state.hyperparams
        last_obs = self.env.critic_inputs(env_state) if self.global_critic else obs
        advantages, targets = self.advantages_and_targets(state.params, traj, hp,
                                                          state.obs_stats, last_obs)
        obs_stats = state.obs_stats
        if obs_stats is not None:
            obs_stats = normalization.update(obs_stats, traj.obs)
        batch = {"obs": self._normalize_obs(obs_stats, traj.obs), "action": traj.action,
                 "log_prob": traj.log_prob, "value": traj.value, "advantage": advantages,
                 "target": targets}
        if self.global_critic:
            batch["critic_obs"] = traj.critic_obs
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
                                  obs_stats, carry, start)
        return new_state, metrics

    def forward(self, params: Any, batch: dict[str, Any],
                ) -> tuple[Distribution, jax.Array, dict[str, jax.Array]]:
        """The policy and values of a batch :meth:`update` was given (or a
        minibatch of it): ``(dist, value, batch)``, the batch's leaves in the
        shape of ``value``. Feedforward: ``batch`` leaves ``[B, ...]``, as they
        are. With a core: leaves ``[envs, num_steps, ...]`` with ``start`` and
        the ``carry`` the sequences started from; the sequences are run again
        from it and everything returned is time-major, ``[num_steps, envs]``.
        With ``critic_input="global_state"`` the critic reads ``batch["critic_obs"]``."""
        if not self.recurrent:
            dist, value = self.network.apply(params, batch["obs"], batch.get("critic_obs"))
            return dist, value, batch
        seq = {k: jnp.swapaxes(v, 0, 1) if k not in ("carry", "key") else v
               for k, v in batch.items() if k != "carry"}
        _, dist, value = self.network.apply(params, batch["carry"], seq["obs"], seq["start"])
        return dist, value, seq

    def evaluation_step(self, state: OnPolicyState, key: jax.Array) -> dict[str, Mean]:
        """The greedy policy on ``eval_episodes`` fresh episodes (split over devices),
        each run up to the env's time limit, completed episodes only:
        ``eval/episode_return``, ``eval/episode_length``."""
        return evaluation_metrics(self.env, self.greedy_policy(), self.policy_params(state),
                                  key, self.config.eval_episodes,
                                  self.initial_carry if self.recurrent else None)
