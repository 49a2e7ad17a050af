"""Deep Deterministic Policy Gradient as a :class:`jaxtrainer.Module`.

DDPG (Lillicrap et al. 2016, "Continuous control with deep reinforcement
learning", arXiv:1509.02971): a deterministic actor ``mu`` trained to maximise
one critic ``Q(s, mu(s))``, the critic regressed on ``y = r + gamma (1 -
terminated) Q'(s', mu'(s'))`` from slowly moving (Polyak) target networks, and
Gaussian exploration noise on the actor's actions.

It is :class:`~jaxtrainer.algorithms.td3.TD3` with TD3's three additions
switched off (``twin_critics=False``: one critic and the plain target;
``policy_noise=0``: no target policy smoothing; ``policy_delay=1``: the actor
and the targets move after every critic update), so it shares TD3's losses,
updates, observation normalisation, reward scaling and data-parallel training
(device-averaged gradients, replicas bitwise equal); its state is a
:class:`~jaxtrainer.algorithms.td3.TD3State` whose ``critic_params`` hold the
one critic (``q1``).

The other defaults are TD3's (CleanRL's), which are those of the re-tuned DDPG
that Fujimoto et al. compare TD3 with ("OurDDPG.py" in ``sfujim/TD3``): 256-256
ReLU networks, Adam 3e-4 for actor and critic, ``tau = 0.005``, batch 256,
exploration noise ``N(0, 0.1 * scale)``. Lillicrap et al.'s own choices
(400-300 networks, learning rates 1e-4 / 1e-3, critic weight decay,
``tau = 0.001``, Ornstein-Uhlenbeck noise) are not reproduced.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxtrainer import envs
from jaxtrainer.algorithms.td3 import TD3, TD3Config


@dataclasses.dataclass(frozen=True)
class DDPGConfig(TD3Config):
    """DDPG hyperparameters: :class:`~jaxtrainer.algorithms.td3.TD3Config` with
    ``twin_critics=False``, ``policy_noise=0.0`` and ``policy_delay=1`` by
    default (every field as documented there; setting one of the three back
    gives the corresponding TD3 ablation). Sizes and step counts are global."""

    twin_critics: bool = False
    policy_delay: int = 1
    policy_noise: float = 0.0


class DDPG(TD3):
    """DDPG on a continuous-action :mod:`jaxtrainer.envs` environment: a
    :class:`~jaxtrainer.algorithms.td3.TD3` run with a :class:`DDPGConfig`.

    Metrics of :meth:`training_step`: ``train/episode_return``,
    ``train/episode_length``, and once learning started ``loss/critic`` and
    ``loss/actor`` (one actor update per critic update). :meth:`evaluation_step`:
    the deterministic actor on fresh episodes.

    Args:
      config: hyperparameters; :class:`DDPGConfig` defaults when ``None``.
      env: use this :class:`~jaxtrainer.envs.Env` instead of ``make(config.env)``.
      **overrides: replace fields of ``config``.

    Raises:
      ValueError: ``config`` is not a :class:`DDPGConfig` (a plain
        :class:`~jaxtrainer.algorithms.td3.TD3Config` would train TD3), a
        discrete-action environment, or a bad config value (named).
    """

    name = "DDPG"
    config_class = DDPGConfig

    def __init__(self, config: DDPGConfig | None = None, *,
                 env: envs.Env | str | None = None, **overrides: Any) -> None:
        if config is not None and not isinstance(config, DDPGConfig):
            raise ValueError(f"DDPG(config=...): expected a DDPGConfig, got a "
                             f"{type(config).__name__} (whose defaults are TD3's); use "
                             "DDPGConfig, or TD3 for a TD3Config")
        super().__init__(config, env=env, **overrides)
