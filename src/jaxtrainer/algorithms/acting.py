"""The shipped RL modules' :meth:`~jaxtrainer.Module.policy`, from their policy functions."""

from __future__ import annotations

from typing import Any

import jax

from jaxtrainer.envs.evaluation import evaluation_metrics
from jaxtrainer.metrics import Mean
from jaxtrainer.policy import PolicyFn, acting


class ParamsPolicy:
    """``policy(state)`` and ``evaluation_step`` for a module that defines ``greedy_policy()`` and
    ``policy_params(state)`` (and ``sample_policy()`` where it samples): batched
    ``policy(params, obs[n, ...], key) -> actions[n, ...]`` functions over the
    params its state holds (with observation statistics where it normalises).

    ``recurrent``: whether the policy has memory (then the module defines
    ``initial_carry(n)``)."""

    recurrent: bool = False

    def sample_policy(self) -> PolicyFn | None:
        """The stochastic policy the module trains with; ``None``: deterministic."""
        return None

    @property
    def stochastic_policy(self) -> bool:
        return self.sample_policy() is not None

    def policy(self, state: Any) -> Any:
        """``act(obs, key=None)``: greedy without a key, sampled with one where
        the policy is stochastic (:func:`jaxtrainer.policy.acting`); with memory
        (a module whose ``recurrent`` is true) ``act(obs, carry, key=None) ->
        (actions, carry)``, ``carry`` from the module's ``initial_carry(n)``."""
        return acting(self.greedy_policy(), self.sample_policy(), self.policy_params(state),
                      recurrent=self.recurrent)

    def evaluation_step(self, state: Any, key: jax.Array) -> dict[str, Mean]:
        """The greedy policy on :meth:`policy_params` (the trained params; ERL's
        champion, CEM-RL's mean actor; on normalised observations with
        ``normalize_observations``) on ``config.eval_episodes`` fresh episodes
        (split over devices), each up to the env's time limit, completed episodes
        only: ``eval/episode_return``, ``eval/episode_length``."""
        return evaluation_metrics(self.env, self.greedy_policy(), self.policy_params(state),
                                  key, self.config.eval_episodes,
                                  self.initial_carry if self.recurrent else None)
