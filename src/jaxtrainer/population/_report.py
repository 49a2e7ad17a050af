"""The base of the population runs' report callbacks (search, sweep, front)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.module import unwrap

if TYPE_CHECKING:
    from jaxtrainer.trainer import Trainer


class RunReport(Callback):
    """A callback that reports one kind of run from its metrics and state at
    boundaries it reads anyway: it never asks the Trainer to hold the state
    (``needs_state`` false), and its ``setup`` refuses a run whose module is
    not (or wraps no) :attr:`reports`, before anything compiles.

    Raises:
      TypeError: in ``setup``, naming the callback, what it reports and the
        module the run trains.
    """

    reports: type
    """The module class (or runtime-checkable protocol) this callback reports."""
    does: str
    """What it does, for the error: ``"writes an NSGA2 run's fronts"``."""

    def needs_state(self, trainer: Trainer, module: Any, step: int) -> bool:
        return False

    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        if unwrap(module, self.reports) is None:
            raise TypeError(f"{type(self).__name__} {self.does}; this run trains "
                            f"{type(unwrap(module)).__name__}")
