"""The shipped RL modules' :meth:`~jaxtrainer.Module.policy`, from their policy functions."""

from __future__ import annotations

from typing import Any

from jaxtrainer.policy import PolicyFn, acting


class ParamsPolicy:
    """``policy(state)`` for a module that defines ``greedy_policy()`` and
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
