"""A run's budget as one value: training steps, env steps or both, for the whole run
or for each member of a population.

A sweep's or a search's budget is each member's, as a recipe states it
(``trainer.max_env_steps`` of one run); a search's member slots may train a share
of it (``search.runs``). :meth:`Budget.total` is the budget of the whole program,
which the Trainer counts: every member trains at every step, so a step budget is
the members' own, while env steps add up over the members. :meth:`Budget.in_steps`
turns it into training steps for a module.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import TYPE_CHECKING

from jaxtrainer import _arguments as arguments
from jaxtrainer.module import counted_members

if TYPE_CHECKING:
    from jaxtrainer.module import Module


@dataclasses.dataclass(frozen=True)
class Budget:
    """Training steps and/or env steps (the smaller wins where both are set).

    Attributes:
      max_steps: training steps (updates; generations for an evolution strategy).
      max_env_steps: environment transitions.
      per_member: both are each member's (a recipe's sweep or search) rather
        than the whole run's.
      share: the fraction of a member's budget each member slot trains, in
        ``(0, 1]`` (a search's ``search.runs`` over its slots; 1 otherwise).
      rounds: the rounds the training steps are spent in (``steps // rounds``
        each), where the host acts at each round's end (an Optuna search tells
        the results and asks for the next trials): each round ends on a log
        boundary (:meth:`log_interval`). ``None``: no rounds.

    Raises:
      ValueError: a budget that is not a positive int (or None), a share
        outside ``(0, 1]``, or rounds that are not a positive int or None, naming
        the value.
    """

    max_steps: int | None = None
    max_env_steps: int | None = None
    per_member: bool = False
    share: Fraction | float = 1
    rounds: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_steps", arguments.positive_int("max_steps", self.max_steps))
        object.__setattr__(self, "max_env_steps",
                           arguments.positive_int("max_env_steps", self.max_env_steps))
        if isinstance(self.share, bool) or not isinstance(self.share, int | float | Fraction) \
                or not 0 < self.share <= 1:
            raise ValueError(f"share={self.share!r}: expected a number in (0, 1]")
        object.__setattr__(self, "rounds", arguments.positive_int("rounds", self.rounds))

    @property
    def is_set(self) -> bool:
        """Whether ``max_steps`` or ``max_env_steps`` is set (``fit`` needs one)."""
        return self.max_steps is not None or self.max_env_steps is not None

    def total(self, members: int = 1) -> Budget:
        """The whole program's budget for ``members`` members: each slot's share
        of a member's steps (at least one), and of its env steps times
        ``members`` where the budget is per member; ``self`` for a whole run's."""
        if not self.per_member and self.share == 1:
            return self
        steps = None if self.max_steps is None else max(int(self.max_steps * self.share), 1)
        env = None if self.max_env_steps is None else \
            int(self.max_env_steps * self.share) * (members if self.per_member else 1)
        return Budget(steps, env, rounds=self.rounds)

    def steps_of(self, module: Module) -> int:
        """The training steps ``module`` runs: the whole program's budget
        (:meth:`total` over its counted members,
        :func:`jaxtrainer.module.counted_members`) :meth:`in_steps` of its
        ``env_steps_per_step`` (ValueError as there)."""
        return self.total(counted_members(module)).in_steps(int(module.env_steps_per_step),
                                                            type(module).__name__)

    def log_interval(self, log_every_n_steps: int, steps: int) -> int:
        """The log interval of a run of ``steps`` training steps: ``log_every_n_steps``,
        or with :attr:`rounds` its greatest common divisor with a round
        (``steps // rounds``, at least 1), so that every round ends on a log boundary."""
        if self.rounds is None:
            return log_every_n_steps
        return math.gcd(log_every_n_steps, max(steps // self.rounds, 1))

    def in_steps(self, env_steps_per_step: int, module_name: str = "the module") -> int:
        """Training steps: ``max_steps``, or the whole training steps that fit in
        ``max_env_steps`` env transitions of ``env_steps_per_step`` each; the
        smaller with both.

        Raises:
          ValueError: no budget, a negative ``env_steps_per_step``, ``max_env_steps``
            for a module that consumes no env steps, or less than one training step.
        """
        if not self.is_set:
            raise ValueError("no budget: set max_steps or max_env_steps")
        if env_steps_per_step < 0:
            raise ValueError(f"{module_name}.env_steps_per_step={env_steps_per_step}: expected >= 0")
        budgets = [] if self.max_steps is None else [self.max_steps]
        if self.max_env_steps is not None:
            if env_steps_per_step == 0:
                raise ValueError(f"max_env_steps={self.max_env_steps} needs a module with "
                                 f"env_steps_per_step > 0; {module_name} has 0")
            if self.max_env_steps < env_steps_per_step:
                raise ValueError(f"max_env_steps={self.max_env_steps} is less than one training "
                                 f"step ({env_steps_per_step} env steps)")
            budgets.append(self.max_env_steps // env_steps_per_step)
        return min(budgets)
