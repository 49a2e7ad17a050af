"""The Callback base class: host-side hooks around ``Trainer.fit``.

Hook order for one ``fit`` (each hook receives ``trainer, module`` first)::

    setup -> [on_load_checkpoint] -> on_fit_start -> on_train_start
      -> (on_train_steps_end [-> on_evaluation_end] [-> on_save_checkpoint])*
      -> on_train_end -> on_fit_end -> teardown

On an exception: ``on_exception(exc)`` then ``teardown``; the exception is then
re-raised unchanged. Callbacks run on every process (so collectives inside them
stay in step); only I/O is limited to ``trainer.is_global_zero``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class Callback:
    """Base class: override the hooks you need. All hooks are no-ops here.

    ``metrics`` arguments are ``dict[str, float]`` (Python floats, reduced over
    devices, averaged over the log interval) and include ``step`` (global
    training steps done) and ``env_steps``.
    """

    @property
    def state_key(self) -> str:
        """Key of this callback's ``state_dict`` in checkpoints (unique per class)."""
        return type(self).__qualname__

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None: ...

    def on_fit_start(self, trainer: Trainer, module: Module) -> None: ...

    def on_train_start(self, trainer: Trainer, module: Module) -> None: ...

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        """After each fused interval of ``log_every_n_steps`` training steps."""

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None: ...

    def on_save_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None:
        """Called with the checkpoint's JSON metadata before it is written; may add keys."""

    def on_load_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None: ...

    def on_train_end(self, trainer: Trainer, module: Module) -> None: ...

    def on_fit_end(self, trainer: Trainer, module: Module) -> None: ...

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None: ...

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state saved in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...
