"""Trainer: the host loop around a Module's jitted steps."""

from __future__ import annotations

import numbers
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import _args
from jaxtrainer import checkpoint as ckpt
from jaxtrainer import metrics as metrics_lib
from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.model_checkpoint import ModelCheckpoint
from jaxtrainer.callbacks.progress import RichProgressBar
from jaxtrainer.distributed.process import broadcast_from_zero
from jaxtrainer.loggers import CSVLogger, Logger, TensorBoardLogger
from jaxtrainer.module import Module
from jaxtrainer.strategies import Strategy, resolve
from jaxtrainer.strategies.base import CompiledTrain, DevicesArg

# Streams derived from the seed: fold_in(key(seed), stream).
INIT_STREAM, TRAIN_STREAM, EVAL_STREAM = 0, 1, 2

# Signals that ask a running ``fit`` to checkpoint and exit (preemption).
PREEMPTION_SIGNALS = ("SIGTERM", "SIGINT")


class Preempted(SystemExit):
    """Raised by :meth:`Trainer.fit` after a SIGTERM or SIGINT: a checkpoint of the
    step boundary after the signal is on disk and the loggers are closed.

    A ``SystemExit`` (exit status ``128 + signal number``: 143 for SIGTERM, 130
    for SIGINT), so an uncaught one ends a script without a traceback; rerun with
    ``ckpt_path="last"`` to finish the budget.

    Attributes:
      signum: the signal received.
      step: global training step of the checkpoint.
      checkpoint: path of the checkpoint's step directory.
    """

    def __init__(self, signum: int, step: int, checkpoint: str) -> None:
        super().__init__(128 + int(signum))
        self.signum, self.step, self.checkpoint = int(signum), step, checkpoint

    def __str__(self) -> str:
        return (f"stopped by {signal.Signals(self.signum).name} at step {self.step}; "
                f"checkpoint {self.checkpoint}")


def _callback_order(cb: Callback) -> int:
    # Guards first (a NaN state is flagged before anything saves it), checkpoints
    # last (they save every other callback's state after it was updated).
    return int(getattr(cb, "order", 0))


@jax.jit
def _copy_tree(tree: Any) -> Any:
    """Fresh device buffers holding ``tree``'s values (same shardings)."""
    return jax.tree.map(jnp.copy, tree)


def _lower_thread_priority() -> None:
    """Nice the calling thread (Linux: priorities are per thread) so it only uses
    CPU time the training loop leaves idle. Best effort; a no-op elsewhere."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


@dataclass(frozen=True)
class _Call:
    """One enqueued training call: ``lengths[j]`` steps per log interval from
    step ``start``; ``state`` and ``metrics`` are still being computed."""

    state: Any
    metrics: Any
    start: int
    lengths: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + sum(self.lengths)


class Trainer:
    """Train a :class:`~jaxtrainer.Module` on any device layout.

    The trainer fuses ``log_every_n_steps`` training steps (a *log interval*)
    into a compiled ``shard_map``-ed loop, never transfers anything to the host
    inside it, and passes each interval's metrics to the callbacks at the
    interval's last step. Everything runs from one compilation: intervals of
    any length, and any number of them per call, share it.

    Fused intervals: when no callback needs the state at a log boundary
    (:meth:`Callback.needs_state` False for all: loggers, progress bars,
    throughput; no evaluation or checkpoint due there), the following interval
    runs in the same compiled call, up to about ``sync_every_n_seconds`` of
    device time per call (measured on the previous call) and 128 intervals.
    When the call returns, its metrics are fetched in one transfer and the
    callbacks get every interval's metrics at that interval's step, in order;
    during all but the last ``trainer.state_ahead`` is True (``trainer.state``
    is already at the call's end) and ``trainer.more_metrics_pending`` is True
    (loggers may write those rows together). Results are bit for bit those of
    one call per interval: step keys depend on (seed, step, device) only.

    Run-ahead: when no callback needs the state at a boundary
    (:meth:`Callback.needs_state` False for all: loggers and progress bars; no
    evaluation, checkpoint, stop or signal due there), the next interval is
    enqueued before the boundary's metrics are fetched and its callbacks run,
    so the devices never idle while the host logs. Those callbacks see
    ``trainer.state_ahead`` True (``trainer.state`` is then one interval past
    ``global_step``); a stop requested there takes effect after the interval
    already enqueued. Single-process only; by default (``run_ahead="auto"``)
    only on GPU/TPU.

    Args:
      strategy: ``"auto"`` (``"single"`` on one device, ``"pmap"`` on several),
        ``"single"``, ``"pmap"``, ``"shard_map"``, ``"multi_node"`` (where
        registered) or a :class:`~jaxtrainer.strategies.Strategy` instance.
      devices: ``"auto"``, an int (first ``n`` devices; also a digit string
        such as ``"4"``), a list of device indices (``[0, 2]``: those local
        devices, as in Lightning) or a list of ``jax.Device``.
      max_steps: training steps (global updates) to run.
      max_env_steps: alternative budget in environment transitions; the run
        stops after the last whole training step that fits
        (``max_env_steps // module.env_steps_per_step`` steps), the same count
        under any device count. With both set, the smaller budget wins.
      log_every_n_steps: training steps per log interval: callbacks and loggers
        get metrics averaged over each interval, at its last step.
      eval_every_n_steps: run ``evaluation_step`` every this many training steps
        (``None``: only through :meth:`evaluate`).
      callbacks: callbacks and loggers.
      seed: root of every PRNG stream (init, per-step per-device keys, evaluation).
      default_root_dir: runs go to ``<default_root_dir>/version_<n>``.
      jit: ``False`` runs every step eagerly (slow; for debugging with prints).
      enable_progress_bar: add a :class:`RichProgressBar` if none is given.
      enable_checkpointing: add a :class:`ModelCheckpoint` (save at the end)
        if none is given.
      logger: ``True`` adds a :class:`CSVLogger` and a :class:`TensorBoardLogger`
        when no logger is given; ``False`` adds none.
      run_ahead: enqueue the next interval before a boundary's hooks when no
        callback needs the state there (see "Run-ahead" above). ``"auto"``: on
        GPU/TPU devices, off on CPU, where an execution queued behind a running
        one was measured to cost CPU time and slow the run (PPO, 2 cores: 2.4 s
        instead of 1.6 s for 300 updates).
      sync_every_n_seconds: target device time (seconds) of one compiled call
        when log intervals are fused (see "Fused intervals"): how long metrics
        may wait on the devices before the host sees them. ``None`` or ``0``:
        one call, and one host sync, per log interval.
      compile_evaluation_ahead: compile the evaluation program (modules with an
        ``evaluation_step``) in a background thread at the start of ``fit``,
        after the training program, so the first scheduled evaluation or a later
        :meth:`evaluate` does not wait for it (PPO recipe, 2 CPU cores: about
        2-3 s less wall time). ``False``: compile it when first needed, sparing
        the CPU time when nothing evaluates (a background compile competes with
        training on a small CPU machine).

    Raises:
      ValueError: an unknown strategy (listing the choices), a non-positive
        budget or interval, a negative ``sync_every_n_seconds``, no budget at
        all, a malformed ``devices`` (a float, a mapping, an empty list, a
        negative or repeated index; the message lists the accepted forms), or
        an on/off argument (``jit``, ``enable_progress_bar``,
        ``enable_checkpointing``, ``logger``, ``compile_evaluation_ahead``,
        ``run_ahead``) that is not a bool (``run_ahead`` also takes
        ``"auto"``): a string such as ``"flase"`` or a number such as ``100``
        is an error, never "on". Raised here, before the strategy starts JAX or
        anything is written; a device index beyond the devices there raises
        when the devices are picked, before any compile.
    """

    def __init__(
        self,
        strategy: str | Strategy = "auto",
        devices: DevicesArg = "auto",
        max_steps: int | None = None,
        max_env_steps: int | None = None,
        log_every_n_steps: int = 10,
        eval_every_n_steps: int | None = None,
        callbacks: list[Callback] | None = None,
        seed: int = 0,
        default_root_dir: str | os.PathLike = "runs",
        jit: bool = True,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        logger: bool = True,
        run_ahead: bool | str = "auto",
        sync_every_n_seconds: float | None = 1.0,
        compile_evaluation_ahead: bool = True,
    ) -> None:
        # Every argument is checked here, before the strategy starts JAX (or waits for
        # other processes): on/off switches take real bools only (a YAML/CLI typo such
        # as logger=flase, or enable_checkpointing=100, is an error, not "on").
        self.run_ahead = _args.flag("run_ahead", run_ahead, also=("auto",))
        jit = _args.flag("jit", jit)
        enable_progress_bar = _args.flag("enable_progress_bar", enable_progress_bar)
        enable_checkpointing = _args.flag("enable_checkpointing", enable_checkpointing)
        logger = _args.flag("logger", logger, hint="True adds a CSVLogger and a TensorBoardLogger; "
                            "pass other loggers (e.g. jaxtrainer.loggers.WandbLogger) in callbacks")
        self.compile_evaluation_ahead = _args.flag("compile_evaluation_ahead",
                                                   compile_evaluation_ahead)
        if sync_every_n_seconds is not None and (
                isinstance(sync_every_n_seconds, bool)
                or not isinstance(sync_every_n_seconds, numbers.Real)
                or not sync_every_n_seconds >= 0):
            raise ValueError(f"sync_every_n_seconds={sync_every_n_seconds!r}: expected seconds "
                             ">= 0 or None")
        self.sync_every_n_seconds = float(sync_every_n_seconds or 0.0)
        self.max_steps_arg = _args.positive_int("max_steps", max_steps)
        self.max_env_steps = _args.positive_int("max_env_steps", max_env_steps)
        if max_steps is None and max_env_steps is None:
            raise ValueError("no training budget: set max_steps or max_env_steps")
        self.log_every_n_steps = _args.positive_int("log_every_n_steps", log_every_n_steps, False)
        self.eval_every_n_steps = _args.positive_int("eval_every_n_steps", eval_every_n_steps)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed={seed!r}: expected an int")
        self.seed = seed
        if not isinstance(default_root_dir, (str, os.PathLike)):
            raise ValueError(f"default_root_dir={default_root_dir!r}: expected a directory path "
                             "(a str or os.PathLike)")
        self.default_root_dir = os.fspath(default_root_dir)
        self.jit = jit
        devices = _args.devices(devices)  # ValueError naming the value and the accepted forms
        callbacks = list(callbacks or [])
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks must be jaxtrainer.Callback instances, got {cb!r}")
        self.strategy = resolve(strategy, devices, jit=jit)
        if logger and not any(isinstance(c, Logger) for c in callbacks):
            callbacks += [CSVLogger(), TensorBoardLogger()]
        if enable_checkpointing and not any(isinstance(c, ModelCheckpoint) for c in callbacks):
            callbacks.append(ModelCheckpoint())
        if enable_progress_bar and not any(isinstance(c, RichProgressBar) for c in callbacks):
            callbacks.append(RichProgressBar())
        # Stable sort by ``Callback.order``: NaN guards (-100) run first at every
        # boundary, ModelCheckpoint (100) last; the rest keep the order given.
        self.callbacks = sorted(callbacks, key=_callback_order)
        self.config = dict(strategy=strategy if isinstance(strategy, str) else type(strategy).__name__,
                           devices=str(devices), max_steps=max_steps, max_env_steps=max_env_steps,
                           log_every_n_steps=log_every_n_steps, eval_every_n_steps=eval_every_n_steps,
                           seed=seed, jit=jit, sync_every_n_seconds=sync_every_n_seconds)

        self._state: Any = None
        self._state_copy: Any = None  # what hooks read while the loop donates ``_state``
        self._donating = False
        self.ckpt_path: str | None = None
        self.global_step = 0
        self.env_steps = 0
        self.max_steps = 0
        self.env_steps_per_step = 0
        self.should_stop = False
        self.stop_reason: str | None = None
        self.state_is_valid = True
        self.state_ahead = False
        self.more_metrics_pending = False
        self.received_signal: int | None = None
        self.callback_metrics: dict[str, float] = {}
        self.compile_seconds: dict[str, float] = {}
        self.log_dir: str = ""
        self._root_key: jax.Array | None = None
        self._eval_cache: dict[int, Any] = {}
        self._seconds_per_step: float | None = None

    # ------------------------------------------------------------------ info
    @property
    def state(self) -> Any:
        """The module state: a pytree of global arrays, one logical copy.

        During ``fit`` the Trainer donates the state's device buffers to the next
        compiled call, which deletes them. So that what a callback reads stays
        readable after training moves on (a callback may keep it, e.g. the
        parameters at some step), reading ``trainer.state`` from a hook returns a
        copy, made on the first read at each boundary (one device-to-device copy
        of the whole state; nothing is copied where no hook reads it). Outside
        ``fit`` it is the state itself. :meth:`peek_state` reads without a copy.
        """
        if self._donating and self._state is not None:
            if self._state_copy is None:
                self._state_copy = _copy_tree(self._state)
            return self._state_copy
        return self._state

    @state.setter
    def state(self, value: Any) -> None:
        self._state, self._state_copy = value, None

    def peek_state(self) -> Any:
        """The state without a copy, for reading values at once in a hook (a
        learning rate, a finiteness check). During ``fit`` its buffers are
        donated to (deleted by) the next compiled call: keep :attr:`state`
        instead when you need the arrays after the hook returns."""
        return self._state

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def num_devices(self) -> int:
        return self.strategy.num_devices

    def hparams(self, module: Module) -> dict[str, Any]:
        return {"trainer": {**self.config, "num_devices": self.num_devices},
                "module": {"class": type(module).__name__, **module.hparams()}}

    # --------------------------------------------------------------- helpers
    def _call(self, hook: str, module: Module, *args: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(self, module, *args)

    def _call_all_safely(self, hook: str, module: Module, *args: Any) -> None:
        """Call ``hook`` on every callback even if some raise (error paths)."""
        for cb in self.callbacks:
            try:
                getattr(cb, hook)(self, module, *args)
            except Exception:  # never hide the original exception (F22)
                print(f"jaxtrainer: {type(cb).__name__}.{hook} raised while handling another "
                      f"error:\n{traceback.format_exc()}", file=sys.stderr)

    def _budget(self, module: Module) -> int:
        esps = int(module.env_steps_per_step)
        if esps < 0:
            raise ValueError(f"{type(module).__name__}.env_steps_per_step={esps}: expected >= 0")
        budgets = []
        if self.max_steps_arg is not None:
            budgets.append(self.max_steps_arg)
        if self.max_env_steps is not None:
            if esps == 0:
                raise ValueError(f"max_env_steps={self.max_env_steps} needs a module with "
                                 f"env_steps_per_step > 0; {type(module).__name__} has 0")
            if self.max_env_steps < esps:
                raise ValueError(f"max_env_steps={self.max_env_steps} is less than one training step "
                                 f"({esps} env steps)")
            budgets.append(self.max_env_steps // esps)
        return min(budgets)

    def _new_log_dir(self) -> str:
        """Create and return ``<default_root_dir>/version_<n>`` for a new run,
        ``n`` one past the highest taken. The directory is created exclusively,
        so runs started at the same instant in one root (several processes, or
        several machines on a shared filesystem) each get their own: one that
        loses the race takes the next number."""
        root = Path(self.default_root_dir)
        root.mkdir(parents=True, exist_ok=True)
        taken = [int(p.name[8:]) for p in root.glob("version_*") if p.name[8:].isdigit()]
        n = max(taken, default=-1) + 1
        while True:
            try:
                (root / f"version_{n}").mkdir()
            except FileExistsError:
                n += 1
                continue
            return os.fspath(root / f"version_{n}")

    def _budget_spent(self, module: Module, resume: Path) -> bool:
        """When the checkpoint ``resume`` is already at or past the budget: load
        its state into ``trainer.state``, say why nothing will run, and return
        True. No hook runs and no file is written or changed."""
        step = int(ckpt.read_meta(resume)["global_step"])
        if step < self.max_steps:
            return False
        self._restore(module, resume)
        self.log_dir = os.fspath(resume.parent.parent)
        budget = (f"max_steps={self.max_steps_arg}" if self.max_env_steps is None else
                  f"max_env_steps={self.max_env_steps} ({self.max_steps} training steps)"
                  if self.max_steps_arg is None else
                  f"max_steps={self.max_steps_arg}, max_env_steps={self.max_env_steps}")
        self.stop_reason = (f"the checkpoint is at step {step} and the budget is {self.max_steps} "
                            f"training steps ({budget})")
        if self.is_global_zero:
            print(f"jaxtrainer: nothing to train: {resume} is at step {step}, and the budget of "
                  f"{self.max_steps} training steps ({budget}) is not above it; nothing was "
                  f"run or written. Raise the budget above {step} to continue that run.",
                  file=sys.stderr, flush=True)
        return True

    def _abstract_state(self, module: Module) -> Any:
        shapes = jax.eval_shape(lambda k: self.strategy.init_state(module, k), jax.random.key(0))
        return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                            shapes, self.strategy.shardings(module))

    def _key_abstract(self) -> jax.ShapeDtypeStruct:
        key = jax.random.key(0)
        return jax.ShapeDtypeStruct(key.shape, key.dtype,
                                    sharding=jax.sharding.NamedSharding(self.strategy.mesh,
                                                                        jax.sharding.PartitionSpec()))

    def _resolve(self, ckpt_path: str | os.PathLike) -> Path:
        """``ckpt_path`` as a step directory, the same on every process.

        Process 0 resolves it (``"last"`` included) and every process uses that
        path, which must be visible on each of them (a shared filesystem); one
        tiny exchange when there are several processes.

        Raises:
          FileNotFoundError: on every process, when process 0 finds no
            checkpoint or some process cannot see the one it found.
        """
        if self.strategy.process_count <= 1:
            return ckpt.resolve(ckpt_path, self.default_root_dir)
        from jax.experimental import multihost_utils

        try:
            found, error = os.fspath(ckpt.resolve(ckpt_path, self.default_root_dir)), ""
        except FileNotFoundError as e:
            found, error = "", str(e)
        found = broadcast_from_zero(found)
        if not found:
            raise FileNotFoundError(broadcast_from_zero(error) + " (on process 0)")
        path = Path(found)
        seen = np.asarray(multihost_utils.process_allgather(
            np.int32((path / ckpt.META).is_dir()))).reshape(-1)
        if not seen.all():
            blind = [int(i) for i in np.flatnonzero(seen == 0)]
            raise FileNotFoundError(
                f"checkpoint {path} (chosen on process 0) is not visible on process(es) {blind}: "
                "with several processes checkpoints must be on a filesystem every process sees")
        return path

    def _check_env_steps(self, module: Module, path: Path) -> None:
        """Refuse, before anything is written, a resume whose module consumes
        another number of env steps per training step than the run it continues
        (``env_steps`` would jump back and ``max_env_steps`` be overrun)."""
        meta = ckpt.read_meta(path)
        steps, env_steps = int(meta["global_step"]), int(meta["env_steps"])
        if env_steps != steps * self.env_steps_per_step:
            per_step = f"{env_steps // steps}" if steps else "?"
            raise ValueError(
                f"checkpoint {path} counted {env_steps} env steps in {steps} training steps "
                f"({per_step} per step), but {type(module).__name__}.env_steps_per_step is "
                f"{self.env_steps_per_step}: resume with the sizes the run started with "
                "(e.g. num_envs, num_steps), or start a new run")

    def _restore(self, module: Module, path: Path) -> dict[str, Any]:
        abstract = {"module": self._abstract_state(module), "rng": self._key_abstract()}
        restored, meta = ckpt.restore(path, abstract)
        self.state, self._root_key = restored["module"], restored["rng"]
        self.global_step = int(meta["global_step"])
        self.env_steps = int(meta["env_steps"])
        states = meta.get("callbacks", {})
        for cb in self.callbacks:
            if cb.state_key in states:
                cb.load_state_dict(states[cb.state_key])
        return meta

    def save_checkpoint(self, manager: Any, metrics: dict[str, float] | None = None) -> None:
        """Write the current state, counters, root key and callback states with
        ``manager`` (a :func:`jaxtrainer.checkpoint.manager`; in a single process
        also a plain orbax ``CheckpointManager``).

        Every process must call it: the sharded arrays are gathered over all
        processes, then only process 0 writes (see
        :meth:`jaxtrainer.checkpoint.Manager.save`).

        Raises:
          TypeError: a plain orbax manager with several processes.
          RuntimeError: on every process but 0, when writing failed on process 0.
        """
        meta = {
            "global_step": self.global_step,
            "env_steps": self.env_steps,
            "seed": self.seed,
            "strategy": type(self.strategy).__name__,
            "num_devices": self.num_devices,
            "run_dir": os.path.abspath(self.log_dir),  # whose checkpoint this is
            "callbacks": {cb.state_key: cb.state_dict() for cb in self.callbacks},
        }
        self._call("on_save_checkpoint", self._module, meta)
        ckpt.save(manager, self.global_step, {"module": self._state, "rng": self._root_key}, meta,
                  metrics=metrics)

    # ------------------------------------------------------------------- fit
    def fit(self, module: Module, ckpt_path: str | os.PathLike | None = None) -> None:
        """Train ``module`` until the budget is spent or a callback sets
        ``trainer.should_stop``.

        Args:
          module: the algorithm.
          ckpt_path: ``None`` (start fresh), ``"last"`` (newest checkpoint under
            ``default_root_dir``) or a checkpoint path; resuming continues the
            run exactly and appends to its logs.

        Preemption: a SIGTERM or SIGINT received during ``fit`` (main thread
        only; the previous handlers are restored afterwards) saves a checkpoint
        at the next step boundary (the end of the running fused interval) with
        every :class:`ModelCheckpoint`, or into ``<log_dir>/checkpoints`` when
        there is none, closes the loggers and raises :class:`Preempted`. A
        second signal raises ``KeyboardInterrupt`` at once.

        Raises:
          ValueError: sizes that do not split over the devices, or a bad budget,
            before anything compiles. Exceptions from the module or callbacks
            are re-raised unchanged after ``on_exception`` and ``teardown``.
          Preempted: after SIGTERM/SIGINT, once the checkpoint is written
            (a ``SystemExit``: status 143 for SIGTERM, 130 for SIGINT).
          FileNotFoundError: ``ckpt_path`` names no checkpoint (with several
            processes: none that process 0 finds and every process sees).

        Processes (``multi_node``): call it on every process. Process 0 picks
        the run directory and resolves ``ckpt_path``; every process restores
        from that path itself; only process 0 writes logs and checkpoints, and
        every process waits for its checkpoint files at the end of ``fit`` and
        on preemption.
        """
        if not isinstance(module, Module):
            raise TypeError(f"fit expects a jaxtrainer.Module, got {type(module).__name__}")
        self._module = module
        self.strategy.setup()
        self.max_steps = self._budget(module)
        module.configure_budget(self.max_steps)
        module.validate(self.num_devices)
        self.env_steps_per_step = int(module.env_steps_per_step)
        resume = self._resolve(ckpt_path) if ckpt_path is not None else None
        self.ckpt_path = os.fspath(resume) if resume is not None else None
        self.global_step, self.env_steps, self.should_stop = 0, 0, False
        self.stop_reason, self.state_is_valid, self.received_signal = None, True, None
        self.state_ahead = self.more_metrics_pending = False
        self.callback_metrics = {}
        if resume is not None:
            self._check_env_steps(module, resume)
            if self._budget_spent(module, resume):
                return
        if resume is not None:
            self.log_dir = os.fspath(resume.parent.parent)
        else:  # process 0 reserves a new run directory; every process uses it
            self.log_dir = broadcast_from_zero(self._new_log_dir() if self.is_global_zero else "")
        if self.is_global_zero:
            print(f"jaxtrainer: {self.strategy.describe()}; run directory {self.log_dir}", flush=True)

        previous_handlers = self._install_signal_handlers()
        try:
            self._call("setup", module, "fit")
            self._compile_ahead(module)
            if resume is not None:
                meta = self._restore(module, resume)
                self._call("on_load_checkpoint", module, meta)
            else:
                self._root_key = self.strategy.to_global(jax.random.key(self.seed))
                self.state = self.strategy.init_state(
                    module, jax.random.fold_in(self._root_key, INIT_STREAM))
            self._donating = True  # hooks now read copies (see ``state``)
            self._call("on_fit_start", module)
            self._train(module)
            self._donating = False
            self._call("on_fit_end", module)
        except BaseException as exc:
            self._call_all_safely("on_exception", module, exc)
            self._call_all_safely("teardown", module, "fit")
            if isinstance(exc, Preempted) and self.is_global_zero:
                print(f"jaxtrainer: {exc}. Loggers are closed. Resume with "
                      f"fit(..., ckpt_path='last') (default_root_dir={self.default_root_dir!r}) "
                      f"or ckpt_path={exc.checkpoint!r}.", file=sys.stderr, flush=True)
            raise
        finally:
            self._donating = False
            self._restore_signal_handlers(previous_handlers)
        self._call("teardown", module, "fit")

    # ------------------------------------------------------------ preemption
    def _install_signal_handlers(self) -> dict[int, Any]:
        """Turn SIGTERM/SIGINT into a request to checkpoint at the next step
        boundary. Only possible in the main thread; elsewhere nothing changes."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}

        def handler(signum: int, frame: Any) -> None:
            if self.received_signal is not None:  # a second signal: stop right now
                raise KeyboardInterrupt(f"second signal {signal.Signals(signum).name}")
            self.received_signal = signum
            if self.is_global_zero:
                print(f"\njaxtrainer: received {signal.Signals(signum).name}; saving a checkpoint at "
                      "the next step boundary, then exiting (send it again to stop at once)",
                      file=sys.stderr, flush=True)

        for name in PREEMPTION_SIGNALS:
            signum = getattr(signal, name)
            try:
                previous[signum] = signal.signal(signum, handler)
            except (ValueError, OSError):  # not allowed here (e.g. embedded interpreter)
                pass
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)

    def _checkpoint_now(self, module: Module) -> str:
        """Save the current state with every ModelCheckpoint (or a plain manager
        under ``<log_dir>/checkpoints`` when there is none), wait until the files
        are complete, and return the newest checkpoint path."""
        path = ""
        savers = [cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)]
        for cb in savers:
            path = cb.save_now(self, module) or path
        if not savers:
            directory = os.path.join(self.log_dir, "checkpoints")
            with ckpt.manager(directory, async_save=False) as mgr:
                self.save_checkpoint(mgr, metrics=dict(self.callback_metrics))
            path = os.path.join(directory, str(self.global_step))
        return path

    def _agree_on_stopping(self, plan: list[int]) -> list[int]:
        """With several processes, make ``received_signal``, ``should_stop`` and
        the next call's intervals the same everywhere (a signal, a wall-clock
        Timer or the measured call time can differ between processes; every
        process must run the same program and save at the same boundary): the
        plan is cut to the shortest one proposed. One tiny all-gather per
        compiled call, only when ``process_count > 1``. Returns the plan."""
        if self.strategy.process_count <= 1:
            return plan
        from jax.experimental import multihost_utils

        mine = np.array([self.received_signal or 0, int(self.should_stop), len(plan)], np.int32)
        every = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 3)
        signals = every[every[:, 0] > 0, 0]
        if self.received_signal is None and signals.size:
            self.received_signal = int(signals[0])
        if every[:, 1].any() and not self.should_stop:
            self.should_stop = True
            self.stop_reason = self.stop_reason or "another process asked to stop"
        return plan[:int(every[:, 2].min())]

    def _on_boundary_signal(self, module: Module, plan: list[int]) -> list[int]:
        """Agree on stopping and the next plan; checkpoint and raise
        :class:`Preempted` when a signal arrived. Returns the plan to run."""
        plan = self._agree_on_stopping(plan)
        if self.received_signal is None:
            return plan
        if self.global_step >= self.max_steps:
            # The signal came during the last call: the run is complete; finish
            # normally (on_train_end, final checkpoint) instead of reporting a
            # preemption that would ask for a resume with nothing left to do.
            if self.is_global_zero:
                print(f"jaxtrainer: {signal.Signals(self.received_signal).name} arrived during the "
                      f"last steps; the budget of {self.max_steps} steps is done, finishing normally",
                      file=sys.stderr, flush=True)
            return []
        if not self.state_is_valid:
            path = "(none written: the state is not finite; the last good checkpoint stays)"
        else:
            path = self._checkpoint_now(module)
        raise Preempted(self.received_signal, self.global_step, path)

    def _interval_length(self, start: int) -> int:
        # Intervals end on multiples of log_every_n_steps (and eval_every_n_steps),
        # so a resumed run logs at the same steps as an uninterrupted one (F16).
        n = min(self.log_every_n_steps - start % self.log_every_n_steps,
                self.max_steps - start)
        if self.eval_every_n_steps:
            n = min(n, self.eval_every_n_steps - start % self.eval_every_n_steps)
        return n

    def _needs_boundary(self, module: Module, step: int) -> bool:
        """Whether the host must hold the state of step ``step`` before the next
        step runs: the end of the budget, an evaluation, a stop or signal, or a
        callback whose :meth:`~jaxtrainer.Callback.needs_state` is True."""
        if step >= self.max_steps or self.should_stop or self.received_signal is not None:
            return True
        if self.eval_every_n_steps and step % self.eval_every_n_steps == 0:
            return True
        return any(cb.needs_state(self, module, step) for cb in self.callbacks)

    def _plan(self, module: Module, start: int, max_intervals: int) -> list[int]:
        """Lengths of the log intervals the call starting at step ``start`` runs:
        consecutive intervals up to the first boundary that needs the state, about
        ``sync_every_n_seconds`` of device time at the last measured speed, and
        ``max_intervals``. One interval when nothing was measured yet, when
        ``sync_every_n_seconds`` is 0, or without ``jit``."""
        lengths: list[int] = []
        step = start
        fuse = self.strategy.jit and self.sync_every_n_seconds > 0
        while step < self.max_steps and len(lengths) < max_intervals:
            n = self._interval_length(step)
            lengths.append(n)
            step += n
            if not fuse or self._seconds_per_step is None or self._needs_boundary(module, step):
                break
            if (step - start) * self._seconds_per_step >= self.sync_every_n_seconds:
                break
        return lengths

    def _compile_ahead(self, module: Module) -> None:
        """Compile the training program, then the evaluation program, in a
        background thread from the state's shapes, while the main thread
        initialises or restores the state and then trains (XLA compiles release
        the GIL). The evaluation compile runs at the lowest thread priority, so it
        takes only CPU time the training loop leaves idle. Errors surface,
        unchanged, where a program is first needed."""
        self._compiling: dict[str, Any] = {}
        self._compiling_for = module  # evaluate(other_module) must not get these programs
        if not self.strategy.jit:
            return
        abstract, key = self._abstract_state(module), self._key_abstract()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxtrainer-compile")
        self._compiling["train"] = pool.submit(self.strategy.compile_train, module, abstract, key)
        if module.has_evaluation() and self.compile_evaluation_ahead:
            def compile_eval_in_idle_time():
                _lower_thread_priority()  # training runs meanwhile: let it have the cores
                return self.strategy.compile_eval(module, abstract, key)

            self._compiling["eval"] = pool.submit(compile_eval_in_idle_time)
        pool.shutdown(wait=False)

    def wait_for_compilation(self) -> None:
        """Block until programs compiling in the background are ready (e.g. in
        ``on_train_start``, to time the training loop without a concurrent
        evaluation compile). Compile errors are raised later, where the program
        is used."""
        for future in list(getattr(self, "_compiling", {}).values()):
            future.exception()

    def _compiled(self, name: str, module: Module, key: jax.Array) -> CompiledTrain:
        future = None
        if getattr(self, "_compiling_for", None) is module:
            future = self._compiling.pop(name, None)
        if future is not None:
            compiled = future.result()
        elif name == "train":
            compiled = self.strategy.compile_train(module, self._state, key)
        else:
            compiled = self.strategy.compile_eval(module, self._state, key)
        self.compile_seconds[name] = compiled.compile_seconds
        return compiled

    def _dispatch(self, compiled: CompiledTrain, state: Any, key: jax.Array, start: int,
                  lengths: list[int]) -> _Call:
        """Enqueue one call running ``lengths`` intervals from step ``start``
        (asynchronous; donates ``state``)."""
        padded = np.zeros(compiled.max_intervals, np.int32)
        padded[:len(lengths)] = lengths
        new_state, device_metrics = compiled.program(state, key, np.int32(start), padded)
        return _Call(new_state, device_metrics, start, tuple(lengths))

    def _can_run_ahead(self, module: Module, boundary: int) -> bool:
        """Whether the call after ``boundary`` may be enqueued before the
        callbacks of ``boundary`` run: nothing at that boundary needs the state
        of step ``boundary`` (see :meth:`_needs_boundary`), run-ahead is on, and
        there is one process."""
        if not self.strategy.jit:
            return False
        if self.run_ahead is False or (
                self.run_ahead == "auto" and self.strategy.devices[0].platform == "cpu"):
            return False
        if self.strategy.process_count > 1:
            return False  # processes would have to agree on it at every boundary
        return not self._needs_boundary(module, boundary)

    def _train(self, module: Module) -> None:
        """The host loop. Each call (one or more fused log intervals, see
        :meth:`_plan`) is enqueued, then its metrics are fetched (the one host
        sync per call) and the callbacks run once per interval, in step order.
        With run-ahead, the next call is enqueued *before* that fetch when no
        callback needs the state at the call's end, so the devices never wait
        for the host; callbacks then see ``trainer.state_ahead`` True."""
        train_key = jax.random.fold_in(self._root_key, TRAIN_STREAM)
        compiled = self._compiled("train", module, train_key)
        self._call("on_train_start", module)
        self._seconds_per_step = None
        rows = compiled.max_intervals
        current = None
        if self.global_step < self.max_steps and not self.should_stop:
            current = self._dispatch(compiled, self._state, train_key, self.global_step,
                                     self._plan(module, self.global_step, rows))
            self.state, self.state_ahead = current.state, False
        last_time = time.perf_counter()
        while current is not None:
            ahead = None
            if self._can_run_ahead(module, current.end):
                ahead = self._dispatch(compiled, current.state, train_key, current.end,
                                       self._plan(module, current.end, rows))
                self.state = ahead.state
            host_rows = metrics_lib.rows_to_host(current.metrics, len(current.lengths))  # host sync
            now = time.perf_counter()
            seconds, last_time = now - last_time, now
            steps = current.end - current.start
            self._seconds_per_step = seconds / steps
            self.global_step = current.start
            for j, (n, host) in enumerate(zip(current.lengths, host_rows, strict=True)):
                self.more_metrics_pending = j < len(current.lengths) - 1
                self.state_ahead = ahead is not None or self.more_metrics_pending
                self.global_step += n
                self.env_steps = self.global_step * self.env_steps_per_step
                host.update(step=self.global_step, env_steps=self.env_steps,
                            steps_per_second=steps / seconds,
                            env_steps_per_second=steps * self.env_steps_per_step / seconds)
                self.callback_metrics.update(host)
                if (not self.state_ahead and self.eval_every_n_steps
                        and self.global_step % self.eval_every_n_steps == 0):
                    self._evaluate(module)
                self._call("on_train_steps_end", module, host)
                self.callback_metrics.update(host)  # with what callbacks added (lr, throughput)
            self.state_ahead = self.more_metrics_pending = False
            if ahead is not None:
                current = ahead  # its end handles a signal or a stop request
                continue
            more = self.global_step < self.max_steps and not self.should_stop
            plan = self._plan(module, self.global_step, rows) if more else []
            plan = self._on_boundary_signal(module, plan)
            current = None
            if plan and self.global_step < self.max_steps and not self.should_stop:
                current = self._dispatch(compiled, self._state, train_key, self.global_step, plan)
                self.state = current.state
        if self.should_stop and not self.stop_reason:
            self.stop_reason = "a callback set trainer.should_stop"
        elif not self.should_stop and self.global_step >= self.max_steps:
            self.stop_reason = f"the budget of {self.max_steps} training steps is done"
        if self.should_stop and self.is_global_zero:
            print(f"jaxtrainer: stopping at step {self.global_step}: {self.stop_reason}", flush=True)
        self._call("on_train_end", module)

    # -------------------------------------------------------------- evaluate
    def _evaluate(self, module: Module) -> dict[str, float]:
        if not module.has_evaluation():
            raise ValueError(f"{type(module).__name__} has no evaluation_step: define it to "
                             "evaluate (Trainer.evaluate, eval_every_n_steps)")
        key = jax.random.fold_in(jax.random.fold_in(self._root_key, EVAL_STREAM), self.global_step)
        owner, fn = self._eval_cache.get(id(module), (None, None))
        if owner is not module:  # ids of collected modules are reused: compare objects
            fn = self._compiled("eval", module, key).program
            self._eval_cache[id(module)] = (module, fn)
        result = metrics_lib.to_host(fn(self._state, key))
        result.update(step=self.global_step, env_steps=self.env_steps)
        self.callback_metrics.update(result)
        self._call("on_evaluation_end", module, result)
        return result

    def evaluate(self, module: Module, ckpt_path: str | os.PathLike | None = None) -> dict[str, float]:
        """Run ``module.evaluation_step`` once on the current state (after
        ``fit``), the checkpoint at ``ckpt_path``, or a fresh ``init_state``.

        Returns metrics as Python floats (e.g. ``eval/episode_return``). With
        several processes, call it on every process; ``ckpt_path`` is resolved
        on process 0 and read by every process (see :meth:`fit`).

        Raises:
          FileNotFoundError: ``ckpt_path`` names no checkpoint (with several
            processes: none that process 0 finds and every process sees).
        """
        self.strategy.setup()
        module.configure_budget(self._budget(module))
        module.validate(self.num_devices)
        self._module = module
        if ckpt_path is not None:
            self._restore(module, self._resolve(ckpt_path))
        elif self._state is None:
            self._root_key = self.strategy.to_global(jax.random.key(self.seed))
            self.state = self.strategy.init_state(module, jax.random.fold_in(self._root_key, INIT_STREAM))
        return self._evaluate(module)
