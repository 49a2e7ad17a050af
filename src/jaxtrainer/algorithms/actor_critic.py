"""What an on-policy actor-critic module is apart from its training step, the
base of :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyModule` (PPO's, A2C's,
IMPALA's, PQN's): the config, env, network and optimizer it is built from, its
traced hyperparameters and learning-rate schedule, the Trainer's hooks
(``validate``, ``configure_budget``, ``hparams``), and how it acts: env actions
from the policy's samples, observation normalisation, the greedy and sampling
policies and evaluation. The training step is in
:mod:`jaxtrainer.algorithms.onpolicy`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms import normalization
from jaxtrainer.algorithms._evaluated import EvaluatedParamsPolicy
from jaxtrainer.algorithms.cores import Carry, initial_carry
from jaxtrainer.algorithms.distributions import Distribution, TanhNormal
from jaxtrainer.algorithms.hyperparams import annealed, config_record
from jaxtrainer.algorithms.networks import POLICIES, ActorCritic, RecurrentActorCritic
from jaxtrainer.algorithms.torsos import torso_factory


@dataclasses.dataclass(frozen=True)
class ActorCriticConfig:
    """The actor-critic fields of PPO's, A2C's and IMPALA's configs (not PQN's),
    composed (flat) into each on top of
    :class:`~jaxtrainer.algorithms.onpolicy.OnPolicyConfig`'s, with PureJaxRL's
    CartPole PPO defaults; checked by :func:`check_actor_critic`.

    Attributes:
      ent_coef: entropy bonus coefficient.
      vf_coef: value loss coefficient.
      normalize_advantages: standardise advantages (global mean and standard
        deviation over all devices).
      critic_hidden_sizes: hidden layer widths of the critic; ``None``: as the actor's.
      policy: the distribution of continuous actions: ``gaussian`` (default; a
        Gaussian with a state-independent log standard deviation, PureJaxRL's
        and the PPO paper's, actions clipped to the bounds) or ``brax``
        (Brax's ``make_ppo_networks``: a tanh-squashed Gaussian whose scale the
        actor outputs, ``softplus + 0.001``, actions ``tanh`` of the sample
        scaled to the bounds, ``lecun_uniform`` layers; PPO's entropy bonus
        then uses one sample per minibatch, as Brax's). Discrete actions: unused.
    """

    ent_coef: float = 0.01
    vf_coef: float = 0.5
    normalize_advantages: bool = True
    critic_hidden_sizes: tuple[int, ...] | None = None
    policy: str = "gaussian"


def check_actor_critic(config: Any) -> None:
    """Check and normalise :class:`ActorCriticConfig`'s fields of a config
    composing it (``critic_hidden_sizes`` to a tuple of ints).

    Raises:
      ValueError: a bad field, named (e.g. ``PPOConfig.policy='x'``).
    """
    if config.critic_hidden_sizes is not None:
        arguments.check_fields(config, arguments.sizes, ("critic_hidden_sizes",))
    arguments.check_fields(config, arguments.number, ("ent_coef", "vf_coef"), low=0)
    arguments.check_fields(config, arguments.flag, ("normalize_advantages",))
    arguments.check_fields(config, arguments.one_of, ("policy",), choices=POLICIES)


class ActorCriticBase(EvaluatedParamsPolicy):
    """Everything of an on-policy module but its training step (see the module
    docstring). Actor and critic are separate
    :class:`~jaxtrainer.algorithms.networks.ActorCritic` MLPs (with a recurrent
    ``network.core``, a :class:`~jaxtrainer.algorithms.networks.RecurrentActorCritic`
    sharing torso and core); the policy is categorical (discrete actions), a
    factorised categorical (multi-discrete actions, ``int32[n, len(action_nvec)]``:
    :class:`~jaxtrainer.algorithms.distributions.MultiCategorical`) or a
    diagonal Gaussian (continuous; sampled actions are clipped to the env's
    bounds only when passed to the env, the unclipped action is what the
    log-probabilities refer to), or with ``policy="brax"`` Brax's tanh-squashed
    Gaussian (:class:`~jaxtrainer.algorithms.distributions.TanhNormal`).

    Subclasses set :attr:`config_class` (a frozen dataclass with ``env``,
    ``num_envs``, ``num_steps``, ``total_updates``, ``lr``, ``anneal_lr``,
    ``max_grad_norm``, ``activation``, ``hidden_sizes``, ``eval_episodes`` and the
    :attr:`TUNABLE` names) and :attr:`TUNABLE`, and implement :meth:`base_optimizer`.

    Args:
      config: hyperparameters; ``config_class()`` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``;
        a string is taken as ``config.env`` (an environment name).
      **overrides: replace fields of ``config``, e.g. ``PPO(num_envs=8)``.
    """

    config_class: type = type(None)
    TUNABLE: tuple[str, ...] = ()
    """Hyperparameters kept in the state's ``hyperparams`` (traced, tunable by PBT)."""

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
        self.asymmetric = getattr(self.env, "critic_observation_shape", None) is not None
        if self.asymmetric:
            self._check_asymmetric(config)
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

    def _check_asymmetric(self, config: Any) -> None:
        """Refuse, in one line, what an env whose critic has its own observation
        (``critic_observation_shape``: a ``value_obs_key``) cannot train with.

        Raises:
          ValueError: an algorithm without a critic of its own input
            (``_ASYMMETRIC`` false), ``critic_input="global_state"``, a
            recurrent core or a torso other than ``mlp``.
        """
        name = (f"{type(self).__name__} on {self.env.name} (its critic sees its own "
                f"observation, shape {self.env.critic_observation_shape}: value_obs_key)")
        if not self._ASYMMETRIC:
            raise ValueError(f"{name}: {type(self).__name__} has no critic that reads another "
                             "input; train it with PPO or A2C, or drop env.value_obs_key")
        if self.global_critic:
            raise ValueError(f"{name}: critic_input='global_state' is a second critic input; "
                             "use critic_input='observation'")
        if config.network.core is not None or config.network.torso != "mlp":
            raise ValueError(f"{name}: needs a feedforward network on flat inputs; got "
                             f"network.torso={config.network.torso!r}, network.core="
                             f"{config.network.core!r} (use torso 'mlp' and core null)")

    _ASYMMETRIC = True
    """Whether the module trains an env whose critic has its own observation
    (:attr:`~jaxtrainer.envs.Env.critic_observation_shape`): its critic then
    reads that observation (normalised with statistics of its own) and its
    actor the policy's."""

    @property
    def _critic_input_shape(self) -> tuple[int, ...] | None:
        """The shape of the critic's input when it is not the observation:
        ``(critic_input_size,)`` with ``critic_input="global_state"``, the env's
        ``critic_observation_shape`` with an asymmetric env; ``None`` otherwise."""
        if self.global_critic:
            return (int(self.env.critic_input_size),)
        return self.env.critic_observation_shape if self.asymmetric else None

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
            critic_ndim=(None if self._critic_input_shape is None
                         else len(self._critic_input_shape)),
            action_nvec=self.env.action_nvec,
        )
        if self.recurrent:
            return RecurrentActorCritic(**layout, core=network.core, core_size=network.core_size)
        return ActorCritic(**layout)

    def base_optimizer(self, learning_rate: Any, max_grad_norm: Any) -> optax.GradientTransformation:
        """The optimizer (for ``optax.inject_hyperparams``; the module runs it
        under ``optax.flatten``, on all parameters as one vector)."""
        raise NotImplementedError

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

    def policy_params(self, state: Any) -> Any:
        """What :meth:`greedy_policy` takes: ``state.params``, or with
        ``normalize_observations`` ``(state.params, state.obs_stats)``."""
        if self.config.normalize_observations:
            return state.params, state.obs_stats
        return state.params
