"""The networks of the shipped RL algorithms, built from one :class:`MLP`.

* :data:`ACTIVATIONS` / :func:`activation`: the one activation table; an unknown
  name is a ValueError listing the choices.
* :func:`_flatten_obs`: ``[..., *observation_shape] -> float32[..., size]``, the
  input of every network here without a torso (the ``mlp`` torso); with one
  (:mod:`jaxtrainer.algorithms.torsos`) the observation keeps its shape up to it.
* :class:`MLP`: dense layers with an activation after each and an optional
  linear head; PPO's orthogonal initialisation or flax's default (CleanRL's).
* PPO/A2C/IMPALA: :class:`ActorCritic` (and :class:`RecurrentActorCritic`) with
  the action distributions of :mod:`jaxtrainer.algorithms.distributions`.
* DQN: :class:`QNetwork`. SAC: :class:`SquashedGaussianActor`. TD3, DDPG and
  CEM-RL: :class:`DeterministicActor`. SAC, TD3 and CEM-RL: :class:`TwinCritic`
  (DDPG: its one-critic form).

Parameter trees keep the names flax gives the submodules (``MLP_0/Dense_0``,
``actor_body/Dense_0``, ``q1/Dense_0``, ...), so checkpoints keep their layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.initializers import constant, orthogonal

from jaxtrainer import _arguments as arguments
from jaxtrainer import aliases
from jaxtrainer.algorithms.cores import Carry, Core
from jaxtrainer.algorithms.distributions import DiagGaussian, Distribution, TanhNormal, categorical
from jaxtrainer.algorithms.torsos import TorsoFactory, features

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}
"""Hidden-layer activations by name (the configs' ``activation`` fields)."""


def activation(name: str, argument: str = "activation") -> Callable[[jax.Array], jax.Array]:
    """The function :data:`ACTIVATIONS` maps ``name`` to.

    Raises:
      ValueError: an unknown name, e.g. ``activation='elu': choose one of 'tanh',
        'relu', 'gelu', 'silu'`` (``argument`` names the setting in the message).
    """
    return ACTIVATIONS[arguments.one_of(argument, name, tuple(ACTIVATIONS))]


def _flatten_obs(obs: jax.Array, obs_ndim: int) -> jax.Array:
    """``obs: [..., *observation_shape]`` (``obs_ndim`` trailing axes) as
    ``float32[..., observation_size]``."""
    return features(None, obs, obs_ndim)


def _torso(factory: TorsoFactory | None, name: str) -> nn.Module | None:
    """The torso ``factory`` builds, named ``name`` (inside a compact method); ``None``: none."""
    return None if factory is None else factory(name=name)


class MLP(nn.Module):
    """``float32[..., d] -> float32[..., hidden_sizes[-1]]`` (or ``[..., out]``).

    Dense layers of ``hidden_sizes`` units with ``activation`` after each, then a
    linear head of ``out`` units when ``out > 0``.

    Attributes:
      hidden_sizes: widths of the hidden layers (may be empty).
      out: units of the linear head; 0: none.
      activation: a name in :data:`ACTIVATIONS`.
      orthogonal_scale: hidden layers initialised ``orthogonal(scale)`` with zero
        bias (PPO's and PureJaxRL's layout, scale ``sqrt(2)``); ``None``: flax's
        default LeCun-normal kernels (CleanRL's DQN/SAC/TD3). The head always uses
        flax's default.
      kernel_init: the hidden layers' kernel initialiser, replacing the above
        (Brax's networks: ``lecun_uniform``); ``None``: as above.
      layer_norm: a ``LayerNorm`` after each hidden layer, before its activation
        (PQN's Q-network, Gallici et al. 2024, arXiv:2407.04811; CleanRL's ``pqn.py``).
      head_scale: the head initialised ``orthogonal(head_scale)`` with zero bias;
        ``None``: flax's default.
    """

    hidden_sizes: Sequence[int]
    out: int = 0
    activation: str = "tanh"
    orthogonal_scale: float | None = None
    kernel_init: Callable[..., jax.Array] | None = None
    layer_norm: bool = False
    head_scale: float | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation(self.activation)
        dense = nn.Dense
        if self.kernel_init is not None:
            dense = partial(nn.Dense, kernel_init=self.kernel_init)
        elif self.orthogonal_scale is not None:
            dense = partial(nn.Dense, kernel_init=orthogonal(self.orthogonal_scale),
                            bias_init=constant(0.0))
        for size in self.hidden_sizes:
            x = dense(size)(x)
            x = act(nn.LayerNorm()(x) if self.layer_norm else x)
        if self.out:
            head = {} if self.head_scale is None else dict(
                kernel_init=orthogonal(self.head_scale), bias_init=constant(0.0))
            x = nn.Dense(self.out, **head)(x)
        return x


__getattr__, __dir__ = aliases.attach(__name__)
"""Names that moved to :mod:`jaxtrainer.algorithms.distributions`: found here, with a
DeprecationWarning, until 0.3.0 (``jaxtrainer.aliases.ALIASES``)."""

POLICIES = ("gaussian", "brax")
"""Continuous-action policies of :class:`ActorCritic` (``distribution``; the
on-policy configs' ``policy`` field)."""

_BRAX_MIN_STD = 0.001
"""Brax's ``NormalTanhDistribution(min_std=0.001)``: the scale is ``softplus(x) + min_std``."""


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (the PPO paper's and PureJaxRL's layout).

    ``__call__(obs) -> (dist, value)`` where ``obs`` has shape
    ``[..., *observation_shape]`` (cast to float32, then flattened to
    ``[..., observation_size]`` or given to the torsos as it is), ``dist`` is a
    :class:`~jaxtrainer.algorithms.distributions.Categorical`, :class:`~jaxtrainer.algorithms.distributions.MultiCategorical` (with ``action_nvec``) or
    :class:`~jaxtrainer.algorithms.distributions.DiagGaussian` with batch shape ``[...]`` and ``value: float32[...]``. :meth:`policy` runs the actor only, :meth:`value`
    the critic only.

    Attributes:
      action_dim: number of discrete actions, or of continuous action dimensions
        (multi-discrete: ``sum(action_nvec)``, the logits of all components).
      discrete: categorical (True) or diagonal Gaussian (False) policy.
      action_nvec: with ``discrete``, a multi-discrete env's ``action_nvec``: the
        policy is a :class:`~jaxtrainer.algorithms.distributions.MultiCategorical` over actions ``int32[...,
        len(action_nvec)]``; ``()`` (default): one :class:`~jaxtrainer.algorithms.distributions.Categorical`.
      obs_ndim: number of trailing observation axes to flatten.
      hidden_sizes: widths of the actor's hidden layers (and the critic's when
        ``critic_hidden_sizes`` is ``None``).
      critic_hidden_sizes: widths of the critic's hidden layers; ``None``: as
        the actor's. (Brax's PPO networks, e.g., use a ``(32,) * 4`` policy and a
        ``(256,) * 5`` value MLP: ``brax/training/agents/ppo/networks.py``.)
      activation: ``"tanh"``, ``"relu"``, ``"gelu"`` or ``"silu"``.
      torso: a :data:`~jaxtrainer.algorithms.torsos.TorsoFactory`: the actor and
        the critic each get one (``actor_torso``, ``critic_torso``) between the
        observation (its shape kept) and the hidden layers; ``None``: the
        observation flattened, no torso parameters.
      distribution: for continuous actions, ``"gaussian"`` (default: a
        :class:`~jaxtrainer.algorithms.distributions.DiagGaussian` with a state-independent ``log_std``, PPO
        paper's and PureJaxRL's, orthogonal initialisation) or ``"brax"``
        (Brax's ``make_ppo_networks``: a :class:`~jaxtrainer.algorithms.distributions.TanhNormal` whose scale the
        actor outputs, ``softplus(x) + 0.001``, and every layer
        ``lecun_uniform`` with zero bias).
      critic_ndim: number of trailing axes of the critic's input to flatten
        when it is not the observation (a centralised critic's
        ``float32[..., critic_input_size]``: 1, with no torso); ``None``: the
        critic reads the observation, as ``obs_ndim``.
    """

    action_dim: int
    discrete: bool
    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    critic_hidden_sizes: Sequence[int] | None = None
    torso: TorsoFactory | None = None
    distribution: str = "gaussian"
    critic_ndim: int | None = None
    action_nvec: tuple[int, ...] = ()

    def setup(self) -> None:
        self.actor_torso = self.torso() if self.torso is not None else None
        self.critic_torso = self.torso() if self.torso is not None else None
        self.setup_heads()

    def setup_heads(self) -> None:
        """The actor's and critic's hidden layers and heads (and ``log_std``)."""
        activation(self.activation)  # an unknown name fails here, before any layer
        critic_sizes = (self.hidden_sizes if self.critic_hidden_sizes is None
                        else self.critic_hidden_sizes)
        if self.tanh_normal:  # Brax's make_ppo_networks: lecun_uniform everywhere
            init = nn.initializers.lecun_uniform()
            body = partial(MLP, activation=self.activation, kernel_init=init)
            self.actor_body = body(self.hidden_sizes)
            self.actor_head = nn.Dense(2 * self.action_dim, kernel_init=init)
            self.critic_body = body(critic_sizes)
            self.critic_head = nn.Dense(1, kernel_init=init)
            return
        body = partial(MLP, activation=self.activation, orthogonal_scale=math.sqrt(2))
        self.actor_body = body(self.hidden_sizes)
        self.actor_head = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01),
                                   bias_init=constant(0.0))
        self.critic_body = body(critic_sizes)
        self.critic_head = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))

    @property
    def tanh_normal(self) -> bool:
        """Whether the policy is Brax's :class:`~jaxtrainer.algorithms.distributions.TanhNormal` (continuous actions,
        ``distribution="brax"``).

        Raises:
          ValueError: ``distribution`` not in :data:`POLICIES` (listing them).
        """
        arguments.one_of("policy", self.distribution, POLICIES)
        return not self.discrete and self.distribution == "brax"

    def value_head(self, x: jax.Array) -> jax.Array:
        """``float32[..., features] -> float32[...]``: the critic's hidden layers and head."""
        return self.critic_head(self.critic_body(x))[..., 0]

    def policy_head(self, x: jax.Array) -> Distribution:
        """``float32[..., features] ->`` the action distribution, batch shape ``[...]``."""
        out = self.actor_head(self.actor_body(x))
        if self.discrete:
            return categorical(out, self.action_nvec)
        if self.tanh_normal:
            loc, scale = jnp.split(out, 2, axis=-1)
            return TanhNormal(loc, jax.nn.softplus(scale) + _BRAX_MIN_STD)
        return DiagGaussian(out, self.log_std)

    def value(self, obs: jax.Array) -> jax.Array:
        """The critic alone: ``float32[...]`` of its input ``obs`` (the
        observation, or with ``critic_ndim`` a centralised critic's input)."""
        ndim = self.obs_ndim if self.critic_ndim is None else self.critic_ndim
        return self.value_head(features(self.critic_torso, obs, ndim))

    def policy(self, obs: jax.Array) -> Distribution:
        """The actor alone: the action distribution, batch shape ``[...]``."""
        return self.policy_head(features(self.actor_torso, obs, self.obs_ndim))

    def __call__(self, obs: jax.Array, critic_obs: jax.Array | None = None,
                 ) -> tuple[Distribution, jax.Array]:
        """``(policy(obs), value(critic_obs))``; ``critic_obs=None``: the critic
        values ``obs``."""
        return self.policy(obs), self.value(obs if critic_obs is None else critic_obs)


class RecurrentActorCritic(ActorCritic):
    """:class:`ActorCritic` with memory: one torso and one recurrent core
    (:mod:`jaxtrainer.algorithms.cores`) shared by the actor and the critic,
    then their hidden layers and heads, as PureJaxRL's ``purejaxrl/ppo_rnn.py``.

    ``__call__(carry, obs, start) -> (carry, dist, value)`` over a sequence:
    ``obs: [T, batch, *observation_shape]``, ``start: bool[T, batch]`` (the
    observation is an episode's first: the carry is reset to zeros before it),
    ``carry`` as :func:`~jaxtrainer.algorithms.cores.initial_carry` of
    ``batch``; ``dist`` has batch shape ``[T, batch]`` and ``value`` is
    ``float32[T, batch]``. One step is ``T = 1``.

    Parameters: ``shared_torso`` (with a torso), ``core/cell``, and
    :class:`ActorCritic`'s heads.

    Attributes (beyond :class:`ActorCritic`'s):
      core: ``"gru"`` or ``"lstm"``. core_size: its units.
    """

    core: str = "gru"
    core_size: int = 128

    def setup(self) -> None:
        self.shared_torso = self.torso() if self.torso is not None else None
        self.core_cell = Core(self.core, self.core_size, name="core")
        self.setup_heads()

    def sequence(self, carry: Carry, obs: jax.Array, start: jax.Array,
                 ) -> tuple[Carry, Distribution, jax.Array]:
        """As ``__call__``, with every step's carry after it (leading axes
        ``[T, batch]``) in place of the last one."""
        x = features(self.shared_torso, obs, self.obs_ndim)
        _, (h, carries) = self.core_cell(carry, (x, start))
        return carries, self.policy_head(h), self.value_head(h)

    def __call__(self, carry: Carry, obs: jax.Array, start: jax.Array,
                 ) -> tuple[Carry, Distribution, jax.Array]:
        x = features(self.shared_torso, obs, self.obs_ndim)
        carry, (h, _) = self.core_cell(carry, (x, start))
        return carry, self.policy_head(h), self.value_head(h)


class QNetwork(nn.Module):
    """DQN's and PQN's action values: ``obs[..., *observation_shape] ->
    float32[..., num_actions]`` (an :class:`MLP` with a ``num_actions`` head,
    flax's default init as CleanRL's ``dqn_jax.py``; ``torso``: as
    :class:`ActorCritic`'s, one named ``torso``). ``layer_norm``,
    ``orthogonal_scale`` and ``head_scale``: as :class:`MLP`'s (PQN: all three,
    CleanRL's ``layer_init``).

    ``num_atoms > 1`` (C51): ``num_atoms`` outputs per action, flattened
    action-major, ``float32[..., num_actions * num_atoms]``. ``dueling``: a value
    head and an advantage head over the hidden layers, combined as
    ``V + A - mean_a A`` (per atom) (Wang et al. 2016, "Dueling Network
    Architectures for Deep Reinforcement Learning", arXiv:1511.06581, eq. 9)."""

    num_actions: int
    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (120, 84)
    activation: str = "relu"
    torso: TorsoFactory | None = None
    layer_norm: bool = False
    orthogonal_scale: float | None = None
    head_scale: float | None = None
    num_atoms: int = 1
    dueling: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = features(_torso(self.torso, "torso"), obs, self.obs_ndim)
        outputs = self.num_actions * self.num_atoms
        if not self.dueling:
            return MLP(self.hidden_sizes, outputs, self.activation,
                       orthogonal_scale=self.orthogonal_scale, layer_norm=self.layer_norm,
                       head_scale=self.head_scale)(x)
        x = MLP(self.hidden_sizes, 0, self.activation, orthogonal_scale=self.orthogonal_scale,
                layer_norm=self.layer_norm)(x)
        value = nn.Dense(self.num_atoms, name="value")(x)[..., None, :]
        advantage = nn.Dense(outputs, name="advantage")(x).reshape(
            x.shape[:-1] + (self.num_actions, self.num_atoms))
        q = value + advantage - jnp.mean(advantage, axis=-2, keepdims=True)
        return q.reshape(x.shape[:-1] + (outputs,))


class TwinCritic(nn.Module):
    """Two independent Q(s, a) MLPs (clipped double Q, Fujimoto et al. 2018,
    arXiv:1802.09477): ``(obs[..., *obs_shape], action[..., d]) -> float32[2, ...]``.

    ``num_critics=1`` keeps only the first (DDPG's single critic, Lillicrap et al.
    2016, arXiv:1509.02971): parameters ``q1`` alone, output ``float32[1, ...]``,
    so the losses written for the stacked axis serve both. ``torso``: as
    :class:`ActorCritic`'s; each critic owns one (``q1_torso``, ``q2_torso``),
    the action joins its features.
    """

    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    num_critics: int = 2
    torso: TorsoFactory | None = None

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        if self.num_critics not in (1, 2):
            raise ValueError(f"TwinCritic.num_critics={self.num_critics!r}: expected 1 or 2")
        action = action.astype(jnp.float32)
        q = []
        for i in range(self.num_critics):
            obs_features = features(_torso(self.torso, f"q{i + 1}_torso"), obs, self.obs_ndim)
            x = jnp.concatenate([obs_features, action], -1)
            q.append(MLP(self.hidden_sizes, 1, self.activation, name=f"q{i + 1}")(x)[..., 0])
        return jnp.stack(q)


class _ContinuousActor(nn.Module):
    """The fields of a continuous-action actor: ``action_dim`` outputs per
    head, an MLP of ``hidden_sizes`` over the features of ``obs`` (``obs_ndim``
    trailing observation axes; ``torso``: as :class:`QNetwork`'s)."""

    action_dim: int
    obs_ndim: int = 1
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    torso: TorsoFactory | None = None


class DeterministicActor(_ContinuousActor):
    """TD3's and CEM-RL's actor: ``obs -> tanh(MLP(obs))``, ``float32[..., action_dim]``
    in ``[-1, 1]`` (scaled to the action box by the algorithm); ``torso``: as
    :class:`QNetwork`'s."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return jnp.tanh(MLP(self.hidden_sizes, self.action_dim, self.activation)(
            features(_torso(self.torso, "torso"), obs, self.obs_ndim)))


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SquashedGaussianActor(_ContinuousActor):
    """SAC's actor: ``obs -> (mean, log_std)``, each ``float32[..., action_dim]``;
    ``log_std`` is squashed into ``[LOG_STD_MIN, LOG_STD_MAX]`` with a tanh
    (SpinningUp's and CleanRL's ``sac_continuous_action.py``); ``torso``: as
    :class:`QNetwork`'s."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = MLP(self.hidden_sizes, 0, self.activation)(
            features(_torso(self.torso, "torso"), obs, self.obs_ndim))
        mean = nn.Dense(self.action_dim, name="mean")(x)
        log_std = jnp.tanh(nn.Dense(self.action_dim, name="log_std")(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return mean, log_std
