"""The Callback base class: host-side hooks around ``Trainer.fit``.

Hook order for one ``fit`` (each hook receives ``trainer, module`` first)::

    setup("fit") -> [on_load_checkpoint(meta)] -> on_fit_start -> on_train_start
      -> ( [on_evaluation_end(metrics)] -> on_train_steps_end(metrics)
           [-> on_save_checkpoint(meta)] )*      # once per log interval
      -> on_train_end -> [on_save_checkpoint(meta)] -> on_fit_end -> teardown("fit")

A ModelCheckpoint's save is written once every callback has run the hook.

At an interval ending on a multiple of ``eval_every_n_steps`` the evaluation
runs first, so ``on_train_steps_end`` (and a checkpoint taken there) sees the
evaluation metrics of the same step. Within one hook, callbacks run sorted by
:attr:`Callback.order`. ``on_train_end`` runs exactly once, whether the budget
was spent or a callback set ``trainer.should_stop``.

On an exception (preemption included): ``on_exception(exc)`` then
``teardown("fit")`` on every callback, even if one of them raises; the
original exception is then re-raised unchanged. A checkpoint written on it
records the step's ``on_evaluation_end``/``on_train_steps_end`` calls that the
exception kept from some callbacks; a resume from it makes those calls (after
``on_train_start``) for those callbacks only. Callbacks run on every process (so collectives inside them
stay in step); only I/O is limited to ``trainer.is_global_zero``.

Reuse: one callback object may serve several ``fit`` calls (the same object in
two Trainers, or two fits of one Trainer). Each fresh ``fit`` is a new run:
keep per-run state (counters, best scores, paths, open files, run ids) in
attributes that ``setup`` resets, never only in ``__init__``; on a resume
(``ckpt_path``), ``load_state_dict`` then restores the checkpoint's state after
``setup``. The built-in callbacks and loggers all do so: a reused
:class:`ModelCheckpoint` saves under the new run's directory and reports the new
run's best and last paths, and no checkpoint directory another run wrote is
overwritten or deleted.

Donation: during ``fit`` the Trainer donates the state's device buffers to
each next compiled call, which deletes them. ``trainer.state`` read in a hook is
therefore a copy (made on the first read at a boundary), safe to keep after the
hook returns; ``trainer.peek_state()`` returns the state itself without a copy,
for values read at once.
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

    Attributes:
      order: the Trainer calls callbacks sorted by ``order`` (stable: equal
        orders keep the order given). Guards use -100 (they run first), loggers
        and most callbacks 0, :class:`ModelCheckpoint` 100 (it runs last, so it
        saves the other callbacks' states after they saw the step's metrics).
      writes_run_dir: whether it may write into ``trainer.log_dir``. The Trainer
        makes a new run's directory (and records the module there) only when
        one of its callbacks may: a ``Trainer(logger=False,
        enable_checkpointing=False)`` leaves no ``version_N`` behind. True
        unless a callback says otherwise (the progress bar, the guards and
        monitors that only read metrics).
    """

    order: int = 0
    writes_run_dir: bool = True

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        """Whether this callback may read ``trainer.state``, evaluate, save or end
        training (``should_stop``) at the boundary of step ``step``.

        Asked before the interval ending at ``step`` has run (possibly several
        intervals ahead). When every callback answers False, the Trainer may run
        the next interval in the same compiled call (fused intervals, see
        ``Trainer(sync_every_n_seconds=...)``) or enqueue it before this
        boundary's hooks (run-ahead), so the devices do not wait for the host;
        during those hooks ``trainer.state_ahead`` is True and ``trainer.state``
        is already further on. A stop requested there takes effect at the end of
        the running call. The default, True, is always safe (the host holds the
        state of ``step`` when the hooks run); metric-only callbacks (loggers,
        progress bars) return False.
        """
        return True

    @property
    def state_key(self) -> str:
        """Key of this callback's ``state_dict`` in checkpoints: the class name
        here. A callback with state of which a Trainer may hold several (one
        per metric, say) returns the class name plus the arguments that make
        instances distinct, e.g. ``f"Counter[what={self.what}]"`` (as in
        Lightning). ``fit`` refuses two callbacks with a ``state_dict`` whose
        keys are equal, before anything compiles; a resume restores each its
        own entry (where the arguments in a key changed, e.g. a longer
        ``patience``, the single callback of that class takes the single entry
        of its class)."""
        return type(self).__qualname__

    def _key_of(self, **arguments: Any) -> str:
        """``ClassName[a=1,b='x']``: a :attr:`state_key` from the arguments given."""
        return f"{type(self).__qualname__}[{','.join(f'{k}={v!r}' for k, v in arguments.items())}]"

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None: ...

    def on_fit_start(self, trainer: Trainer, module: Module) -> None: ...

    def on_train_start(self, trainer: Trainer, module: Module) -> None: ...

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        """After each fused interval of ``log_every_n_steps`` training steps."""

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None: ...

    def on_generation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        """PopulationTrainer only: after each fused interval of generations;
        ``metrics`` adds ``generation`` (generations done)."""

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
