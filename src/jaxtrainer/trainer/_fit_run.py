"""One ``Trainer.fit`` around its loop: what runs before the first step (the
``setup`` hook, one trace of ``init_state``, checking the checkpoint, compiling
ahead, then restoring or initialising the state) and what runs when it fails
(every callback's ``on_exception`` and ``teardown``, however many raise), and
one evaluation of the current state.

:meth:`jaxtrainer.Trainer.fit` calls :func:`start`, runs the
:class:`~jaxtrainer.trainer._fit_loop.FitLoop`, and on any exception :func:`fail` before
re-raising it unchanged; the loop and :meth:`jaxtrainer.Trainer.evaluate`
evaluate through :func:`evaluate`.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxtrainer import metrics as metrics_lib
from jaxtrainer.callbacks import model_checkpoint
from jaxtrainer.distributed import keys
from jaxtrainer.runtime import _lost_process as lost_process
from jaxtrainer.runtime import _slurm as slurm
from jaxtrainer.runtime._lost_process import ProcessLost
from jaxtrainer.runtime._signals import Preempted
from jaxtrainer.trainer import _fit_loop as fit_loop
from jaxtrainer.trainer import _fit_setup as fit_setup
from jaxtrainer.trainer import _hook_replay as hook_replay
from jaxtrainer.trainer._connectors import checkpoint_connector

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


def evaluates_ahead(trainer: Trainer) -> bool:
    """Whether ``fit`` compiles the evaluation program while training starts:
    ``compile_evaluation_ahead``, where ``"auto"`` means when ``fit`` itself
    evaluates (``eval_every_n_steps`` set)."""
    if trainer.compile_evaluation_ahead == "auto":
        return trainer.eval_every_n_steps is not None
    return bool(trainer.compile_evaluation_ahead)


def init_state(trainer: Trainer, module: Module) -> None:
    """A fresh run's root key (``key(seed)``, replicated) and ``init_state``
    from its init stream (:mod:`jaxtrainer.distributed.keys`)."""
    trainer.root_key = trainer.strategy.to_global(keys.root_key(trainer.seed))
    trainer.state = trainer.strategy.init_state(module, keys.stream_key(trainer.root_key,
                                                                        keys.INIT_STREAM))


def reset(trainer: Trainer) -> None:
    """The counters and flags a new ``fit`` starts from (step 0, nothing stopped)."""
    trainer.global_step, trainer.env_steps, trainer.should_stop, trainer.stop_reason = 0, 0, False, None
    trainer.state_is_valid, trainer.received_signal, trainer.callback_metrics = True, None, {}
    trainer.state_ahead = trainer.more_metrics_pending = False
    trainer.unfinished_hooks = hook_replay.UnfinishedHooks()
    trainer.hook_seconds = {}  # this fit's hooks only (callbacks of earlier fits leave no keys)


def start(trainer: Trainer, module: Module, resume: Path | None) -> None:
    """``setup("fit")``, then the state: ``init_state`` traced once for the
    shapes, the programs (compiled in the background) and the restore, so that
    a damaged or mismatched checkpoint fails before any compile; then the
    checkpoint restored (``on_load_checkpoint``) or a fresh state."""
    trainer.call_hook("setup", module, "fit")
    abstract = trainer.strategy.abstract_state(module, keep=resume is None)
    if resume is not None:
        checkpoint_connector.check(trainer, resume, abstract, module)
    trainer.programs.compile_ahead(module, abstract, checkpoint_connector.abstract_key(trainer.strategy),
                                   module.has_evaluation() and evaluates_ahead(trainer))
    if resume is not None:
        seed = trainer.seed
        trainer.call_hook("on_load_checkpoint", module,
                          trainer.restore_checkpoint(module, resume, abstract))
        checkpoint_connector.report_kept_seed(trainer, seed)
        checkpoint_connector.report_kept_hyperparams(trainer, module)
    else:
        init_state(trainer, module)


def call_all_safely(trainer: Trainer, hook: str, module: Module, *args: Any) -> None:
    """Call ``hook`` on every callback even if some raise (error paths: the
    original exception is never hidden; each failure is printed on stderr)."""
    for cb in trainer.callbacks:
        try:
            getattr(cb, hook)(trainer, module, *args)
        except Exception:
            print(f"jaxtrainer: {type(cb).__name__}.{hook} raised while handling another "
                  f"error:\n{traceback.format_exc()}", file=sys.stderr)


def fail(trainer: Trainer, module: Module, exc: BaseException) -> ProcessLost | None:
    """After ``exc`` ended a fit: cancel a compile waiting for training, run
    every callback's ``on_exception`` and ``teardown``, and after a preemption
    say (process 0, stderr) how to resume or requeue the SLURM job. Returns the
    :class:`~jaxtrainer.runtime._lost_process.ProcessLost` to raise instead when ``exc``
    says another process of the run died (its line printed), else ``None``."""
    trainer.programs.cancel()
    call_all_safely(trainer, "on_exception", module, exc)
    try:  # save_on_exception
        model_checkpoint.save_due(trainer, module)
    except Exception:
        print(f"jaxtrainer: saving a checkpoint raised while handling another error:\n"
              f"{traceback.format_exc()}", file=sys.stderr)
    call_all_safely(trainer, "teardown", module, "fit")
    if isinstance(exc, Preempted) and trainer.is_global_zero:
        then = slurm.requeue_after(exc.signum, trainer.requeue) or \
            f"Resume with {fit_setup.resume_hint(trainer, exc.checkpoint)}"
        print(f"jaxtrainer: {exc}. Loggers are closed. {then}.", file=sys.stderr, flush=True)
        return None
    return lost_process.lost_process(trainer, exc, fit_loop.checkpoint_paths(trainer))


def evaluate(trainer: Trainer, module: Module, seed: int | None = None) -> dict[str, float]:
    """Run ``module.evaluation_step`` once on the current state with the key
    of (seed, step), report the metrics to ``on_evaluation_end`` and return
    them (Python floats, plus ``step`` and ``env_steps``). ``seed``: the key
    folded from ``key(seed)`` instead of the run's root key (``None``: the run's).

    Raises:
      ValueError: ``module`` has no ``evaluation_step``.
    """
    if not module.has_evaluation():
        raise ValueError(f"{type(module).__name__} has no evaluation_step: define it to "
                         "evaluate (Trainer.evaluate, eval_every_n_steps)")
    root = trainer.root_key if seed is None else trainer.strategy.to_global(keys.root_key(seed))
    key = keys.sub_key(keys.stream_key(root, keys.EVAL_STREAM), trainer.global_step)
    state = trainer.peek_state()
    program = trainer.programs.evaluation(module, state, key)
    trainer.rendezvous("evaluation")  # the processes enter its collectives together
    result = metrics_lib.to_host(program.fn(state, key))
    result.update(step=trainer.global_step, env_steps=trainer.env_steps)
    trainer.callback_metrics.update(result)
    trainer.call_hook("on_evaluation_end", module, result)
    return result
