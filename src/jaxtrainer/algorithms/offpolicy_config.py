"""The fields every replay learner's config shares, and their checks.

Each algorithm's config is one flat dataclass (its keys are the YAML keys of
its recipe) over at most two bases:

* :class:`ReplayLearnerConfig`: the replay, discount, target-rate and network
  fields of every replay learner, whoever steps its envs (the base of SAC's,
  TD3's and ERL's configs);
* :class:`OffPolicyConfig` (DQN's base): plus how the module steps its own
  envs (:func:`check_stepping`).

The checks are functions, so a config that lists the same fields as another
(SAC's and TD3's: how the module steps its envs, observation normalisation and
reward scaling, :func:`check_normalization`) runs the same checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxtrainer import _arguments as arguments
from jaxtrainer import envs
from jaxtrainer.algorithms.networks import ACTIVATIONS
from jaxtrainer.algorithms.torsos import NetworkConfig, network_config
from jaxtrainer.envs.base import refuse_critic_observation, refuse_multi_discrete


def check_replay_learner(config: Any) -> None:
    """The checks of :class:`ReplayLearnerConfig`'s fields; normalises
    ``hidden_sizes`` to a tuple of ints, whole-float sizes to ints and
    ``network`` to a :class:`~jaxtrainer.algorithms.torsos.NetworkConfig`.

    Raises:
      ValueError: a size that is not a positive int, ``learning_starts < 0``,
        ``tau`` outside ``(0, 1]``, a negative discount or an unknown
        activation; the message names the config class and field.
    """
    arguments.check_fields(config, arguments.sizes, ("hidden_sizes",))
    arguments.check_fields(config, arguments.positive_int,
                           ("buffer_size", "batch_size", "eval_episodes"), allow_none=False)
    arguments.check_fields(config, arguments.non_negative_int, ("learning_starts",))
    arguments.check_fields(config, arguments.number, ("tau",), low=0, high=1, low_open=True)
    arguments.check_fields(config, arguments.number, ("gamma",), low=0, high=1)  # a discount
    arguments.check_fields(config, arguments.one_of, ("activation",), choices=tuple(ACTIVATIONS))
    object.__setattr__(config, "network", network_config(config.network, type(config).__name__))


def check_stepping(config: Any) -> None:
    """The checks of ``num_envs``, ``train_frequency`` and ``gradient_steps``.

    Raises:
      ValueError: one of them is not a positive int (named).
    """
    arguments.check_fields(config, arguments.positive_int,
                           ("num_envs", "train_frequency", "gradient_steps"), allow_none=False)


def check_normalization(config: Any) -> None:
    """The checks of ``normalize_observations`` and ``reward_scaling``.

    Raises:
      ValueError: ``normalize_observations`` is not a bool, or ``reward_scaling``
        is not a number >= 0; the message names the config class and field
        (e.g. ``SACConfig.reward_scaling=-1: expected a non-negative number``).
    """
    arguments.check_fields(config, arguments.flag, ("normalize_observations",))
    arguments.check_fields(config, arguments.number, ("reward_scaling",), low=0)


@dataclasses.dataclass(frozen=True)
class ReplayLearnerConfig:
    """The fields of every replay learner, whoever steps its envs: an
    off-policy module (:class:`OffPolicyConfig`, :class:`~jaxtrainer.algorithms.sac.SACConfig`,
    :class:`~jaxtrainer.algorithms.td3.TD3Config`) or a population method's
    learner (:class:`~jaxtrainer.algorithms.erl.ERLConfig`). Defaults:
    CleanRL's continuous-control ones (SAC's and TD3's). Sizes and step counts
    are global (over all devices); subclasses check their own fields after
    ``super().__post_init__()`` (:func:`check_replay_learner`).

    Attributes:
      env: environment name for :func:`jaxtrainer.envs.make`.
      buffer_size: replay capacity in transitions.
      batch_size: transitions per update.
      learning_starts: env steps collected before the first update.
      gamma: discount factor.
      tau: Polyak rate of the target networks, in ``(0, 1]`` (1: a hard copy).
      hidden_sizes: hidden layer widths of the networks.
      activation: their activation.
      eval_episodes: fresh deterministic episodes per evaluation.
      network: the torso every network puts before its hidden layers, as on-policy
        configs take it (:class:`~jaxtrainer.algorithms.torsos.NetworkConfig`).
    """

    env: str = "Pendulum-v1"
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 5_000
    gamma: float = 0.99
    tau: float = 0.005
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    eval_episodes: int = 16
    network: NetworkConfig = NetworkConfig()

    def __post_init__(self) -> None:
        """:func:`check_replay_learner`."""
        check_replay_learner(self)


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(ReplayLearnerConfig):
    """:class:`ReplayLearnerConfig` with how the module steps its own envs: the
    fields every off-policy module's config has (DQN's, SAC's, TD3's).

    Attributes:
      num_envs: parallel environments.
      train_frequency: vectorised env steps per training step; one training step
        consumes ``num_envs * train_frequency`` env steps.
      gradient_steps: updates per training step (once learning started).
      buffer_size: replay capacity in transitions (a multiple of ``num_envs``).
    """

    num_envs: int = 4
    train_frequency: int = 1
    gradient_steps: int = 4

    def __post_init__(self) -> None:
        """:func:`check_replay_learner`, then :func:`check_stepping`.

        Raises:
          ValueError: as there.
        """
        super().__post_init__()
        check_stepping(self)

def configure(module: Any, config: Any, env: envs.Env | str | None, overrides: dict[str, Any],
              discrete_actions: bool) -> None:
    """Set ``module.config`` (``config`` with the fields in ``overrides`` replaced;
    ``env`` as a string is the ``env`` field) and ``module.env`` (``env``, or
    ``envs.make(config.env)``), as every replay-based algorithm takes them.

    Raises:
      ValueError: the env's actions are not of the kind the module needs
        (``discrete_actions``), naming the module and the env; in one line, a
        multi-discrete env or one whose critic sees an observation of its own
        (:mod:`jaxtrainer.envs.base`'s ``refuse_*``).
    """
    if isinstance(env, str):
        overrides, env = {**overrides, "env": env}, None
    module.config = dataclasses.replace(config, **overrides) if overrides else config
    module.env = env if env is not None else envs.make(module.config.env)
    refuse_multi_discrete(module.env, module.name,
                          "Discrete(n)" if discrete_actions else "Box (continuous)")
    if discrete_actions and not module.env.discrete:
        raise ValueError(f"{module.name} needs discrete actions; {module.env.name} is continuous")
    if module.env.discrete and not discrete_actions:
        raise ValueError(f"{module.name} needs continuous actions; {module.env.name} is discrete")
    refuse_critic_observation(module.env, module.name)
