"""Hook calls an exception kept from some callbacks, and their replay on resume.

An exception raised by a callback in ``on_evaluation_end`` or
``on_train_steps_end`` at step N ends step N's hooks: the callbacks after it
never see the step. A checkpoint written then (``save_on_exception``) records
those calls (hook, metrics, the ``state_key`` of each callback it did not
reach), and a resume from that checkpoint makes them, after
``on_train_start``, for those callbacks only: the resumed run logs step N's row
and counts step N's checks, as a run without the exception does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxtrainer.callbacks.base import Callback
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer

REPLAYED = ("on_evaluation_end", "on_train_steps_end")
"""The hooks whose unfinished calls a resume makes."""


class UnfinishedHooks:
    """One ``fit``'s record of unfinished hook calls.

    Attributes:
      cut: calls of this step that an exception kept from some callbacks, as
        JSON (``{"hook", "metrics", "callbacks"}``), written with a checkpoint.
      to_replay: the calls a resumed checkpoint recorded, made by :meth:`replay`.
    """

    def __init__(self) -> None:
        self.cut: list[dict[str, Any]] = []
        self.to_replay: list[dict[str, Any]] = []

    def record(self, hook: str, metrics: dict[str, Any], callbacks: list[Callback]) -> None:
        """``hook`` with ``metrics`` did not reach ``callbacks`` (numbers kept only)."""
        numbers = {k: v for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.cut.append({"hook": hook, "metrics": numbers,
                         "callbacks": [cb.state_key for cb in callbacks]})

    def replay(self, trainer: Trainer, module: Module) -> None:
        """Make the recorded calls for the callbacks of ``trainer`` they did not
        reach (matched by ``state_key``), in their order; then forget them."""
        calls, self.to_replay = self.to_replay, []
        for call in calls:
            if call.get("hook") not in REPLAYED:
                continue
            metrics, keys = dict(call.get("metrics") or {}), set(call.get("callbacks") or ())
            for cb in [cb for cb in trainer.callbacks if cb.state_key in keys]:
                getattr(cb, call["hook"])(trainer, module, metrics)
            if call["hook"] == "on_train_steps_end":
                trainer.callback_metrics.update(metrics)
