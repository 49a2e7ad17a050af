"""The greedy evaluation the shipped params-policy RL modules share."""

from __future__ import annotations

from typing import Any

import jax

from jaxtrainer.algorithms.acting import ParamsPolicy
from jaxtrainer.envs.evaluation import evaluation_metrics
from jaxtrainer.metrics import Mean


class EvaluatedParamsPolicy(ParamsPolicy):
    """A :class:`~jaxtrainer.algorithms.acting.ParamsPolicy` with an
    ``evaluation_step``, for a module with ``env`` and ``config.eval_episodes``
    (PPO's family, the off-policy modules, ERL, CEM-RL)."""

    def evaluation_step(self, state: Any, key: jax.Array) -> dict[str, Mean]:
        """The greedy policy on :meth:`policy_params` (the trained params; ERL's
        champion, CEM-RL's mean actor; on normalised observations with
        ``normalize_observations``) on ``config.eval_episodes`` fresh episodes
        (split over devices), each up to the env's time limit, completed episodes
        only: ``eval/episode_return``, ``eval/episode_length``."""
        return evaluation_metrics(self.env, self.greedy_policy(), self.policy_params(state),
                                  key, self.config.eval_episodes,
                                  self.initial_carry if self.recurrent else None)
