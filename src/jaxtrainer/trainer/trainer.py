"""Trainer: the host loop around a Module's compiled steps.

The Trainer is a facade over small pieces, each in its own module:
:mod:`jaxtrainer.trainer._planner` (log intervals, fused calls, run-ahead; plain Python),
:mod:`jaxtrainer.strategies._program` (the compiled programs),
:mod:`jaxtrainer.trainer._compile_ahead` (compiling them in the background),
:mod:`jaxtrainer.checkpoint` (run directories, the checkpoint to resume, what it holds),
:mod:`jaxtrainer.runtime._signals` (preemption), :mod:`jaxtrainer.runtime._determinism`
(``deterministic``) and :mod:`jaxtrainer.distributed.keys` (every PRNG key). What
stays here: the order of hooks, counters, and resume.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer import _arguments as arguments
from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.model_checkpoint import ModelCheckpoint
from jaxtrainer.callbacks.progress import RichProgressBar
from jaxtrainer.loggers import CSVLogger, Logger, TensorBoardLogger
from jaxtrainer.module import Module, counted_members
from jaxtrainer.rundir import module_record, runs
from jaxtrainer.runtime import _determinism as determinism
from jaxtrainer.runtime import _slurm as slurm
from jaxtrainer.runtime import compilation_cache as compilation_cache_lib
from jaxtrainer.runtime._signals import Preempted
from jaxtrainer.strategies import Strategy, resolve
from jaxtrainer.strategies._program import MAX_INTERVALS_PER_CALL
from jaxtrainer.strategies.base import DevicesArg
from jaxtrainer.trainer import _fit_run as fit_run
from jaxtrainer.trainer import _fit_setup as fit_setup
from jaxtrainer.trainer import _hook_replay as hook_replay
from jaxtrainer.trainer._compile_ahead import Programs
from jaxtrainer.trainer._connectors import checkpoint_connector
from jaxtrainer.trainer._fit_loop import FitLoop, signals_and_phases
from jaxtrainer.trainer._planner import IntervalPlanner
from jaxtrainer.trainer.budget import Budget

__all__ = ["Preempted", "Trainer"]


@jax.jit
def _copy_tree(tree: Any) -> Any:
    """Fresh device buffers holding ``tree``'s values (same shardings)."""
    return jax.tree.map(jnp.copy, tree)


DEFAULT_LOGGERS: tuple[type[Logger], ...] = (CSVLogger, TensorBoardLogger)
"""The loggers ``logger=True`` adds, each unless one of its class is in ``callbacks``."""


def _with_defaults(callbacks: list[Callback] | None, logger: bool, checkpointing: bool,
                   progress_bar: bool) -> list[Callback]:
    """``callbacks`` plus the defaults where none of that kind was given, sorted
    by :attr:`Callback.order` (stable): guards (-100) first, ModelCheckpoint
    (100) last.

    With ``logger``, each of :data:`DEFAULT_LOGGERS` is added unless a logger of
    its class is given: another logger (e.g. a ``WandbLogger``) is added beside
    them, so ``metrics.csv`` (what ``jaxtrainer plot`` reads) stays unless
    ``logger=False``."""
    if isinstance(callbacks, Callback):  # Lightning takes one too: Trainer(callbacks=cb)
        callbacks = [callbacks]
    if callbacks is not None and not isinstance(callbacks, list | tuple):
        raise TypeError(f"callbacks={callbacks!r}: expected a list of jaxtrainer.Callback "
                        "instances (or one)")
    callbacks = list(callbacks or [])
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks must be jaxtrainer.Callback instances, got {cb!r}")
    if logger:
        callbacks += [cls() for cls in DEFAULT_LOGGERS
                      if not any(isinstance(c, cls) for c in callbacks)]
    if checkpointing and not any(isinstance(c, ModelCheckpoint) for c in callbacks):
        callbacks.append(ModelCheckpoint())
    if progress_bar and not any(isinstance(c, RichProgressBar) for c in callbacks):
        callbacks.append(RichProgressBar())
    return sorted(callbacks, key=lambda cb: int(getattr(cb, "order", 0)))


_LOGGER_HINT = ("True adds a CSVLogger and a TensorBoardLogger; pass other loggers "
                "(e.g. jaxtrainer.loggers.WandbLogger) in callbacks")


def _budget(budget: Budget | None, max_steps: int | None, max_env_steps: int | None) -> Budget:
    """``budget``, or one of ``max_steps`` and ``max_env_steps`` (ValueError: both forms)."""
    if budget is None:
        return Budget(max_steps, max_env_steps)
    if not isinstance(budget, Budget) or max_steps is not None or max_env_steps is not None:
        raise arguments.ArgumentError("budget", budget,
                                      ": expected a jaxtrainer.trainer.budget.Budget, "
                                      "given instead of max_steps and max_env_steps")
    return budget


def _recorded(strategy: str | Strategy, devices: Any, budget: Budget, deterministic: dict[str, str],
              **given: Any) -> dict[str, Any]:
    """``Trainer.config``: the arguments a Trainer records (the loggers' hyperparameters),
    the strategy by name, the budget as ``max_steps`` and ``max_env_steps``, and with
    ``deterministic`` what it set (``deterministic: {xla_flags, jax_default_matmul_precision}``)."""
    return dict(strategy=strategy if isinstance(strategy, str) else type(strategy).__name__,
                devices=str(devices), max_steps=budget.max_steps, max_env_steps=budget.max_env_steps,
                **given, **({"deterministic": deterministic} if deterministic else {}))


def call_hooks(trainer: Trainer, hook: str, module: Module, args: tuple) -> None:
    """``Trainer.call_hook``: each callback's ``hook`` in order, each call's seconds
    added to ``trainer.hook_seconds`` under ``(id(callback), hook)`` (what a
    ``ProfilerCallback`` reads).
    A callback raising in ``on_evaluation_end`` or ``on_train_steps_end`` leaves
    the call unfinished for it and the callbacks after it (:mod:`jaxtrainer.trainer._hook_replay`)."""
    for i, cb in enumerate(trainer.callbacks):
        start = time.perf_counter()
        try:
            getattr(cb, hook)(trainer, module, *args)
        except BaseException:
            if hook in hook_replay.REPLAYED:
                trainer.unfinished_hooks.record(hook, args[0], trainer.callbacks[i:])
            raise
        key = (id(cb), hook)
        trainer.hook_seconds[key] = trainer.hook_seconds.get(key, 0.0) + time.perf_counter() - start


class Trainer:
    """Train a :class:`~jaxtrainer.Module` on any device layout.

    Each *log interval* of ``log_every_n_steps`` training steps runs fused in a
    compiled ``shard_map``-ed loop with no host transfer inside; its metrics reach
    the callbacks at its last step. Intervals of any length, and any number per
    call, share one compilation. Consecutive intervals run in one call where no
    callback needs the state in between, and with run-ahead the next call is
    enqueued before a boundary's hooks (:mod:`jaxtrainer.trainer._planner`); callbacks then
    see ``trainer.state_ahead`` True (``trainer.state`` is already further on) and,
    for all but a call's last interval, ``trainer.more_metrics_pending`` True.
    Results are bit for bit those of one call per interval: step keys depend on
    (seed, step, device) only (:mod:`jaxtrainer.distributed.keys`).

    Args:
      strategy: ``"auto"`` (``"single"`` on one device, ``"pmap"`` on several,
        ``"multi_node"`` in a multi-process launch), ``"single"``, ``"pmap"``,
        ``"shard_map"``, ``"multi_node"`` or a :class:`~jaxtrainer.strategies.Strategy`.
      devices: ``"auto"``, an int ``n`` (the first ``n`` devices; also ``"4"``),
        device indices (``[0, 2]``, as in Lightning) or a list of ``jax.Device``.
      max_steps: training steps (global updates) to run.
      max_env_steps: budget in environment transitions: the whole training steps
        that fit (``max_env_steps // module.env_steps_per_step``), the same under
        any device count. With both set, the smaller budget wins. With neither,
        the Trainer can :meth:`evaluate` but :meth:`fit` raises ValueError.
      log_every_n_steps: training steps per log interval.
      eval_every_n_steps: run ``evaluation_step`` every this many training steps (``None``:
        only through :meth:`evaluate`). Evaluations cut no log interval: training metrics are
        reported on their own grid (multiples of ``log_every_n_steps``, each the reduction over
        the whole interval), and evaluation metrics at their own steps. An evaluation gives the
        same result on any device count (episodes are numbered over all devices and draw their
        keys from the seed, the step and their number).
      callbacks: callbacks and loggers, a list (or one ``Callback``); TypeError otherwise.
      seed: root of every PRNG key (init, per-step per-device keys, evaluation);
        any int, every bit used (``key(seed)`` in ``[0, 2**32)``); ValueError otherwise.
      default_root_dir: runs go to ``<default_root_dir>/version_<n>``.
      jit: ``False`` runs the programs under ``jax.disable_jit`` (debugging: slow);
        ``shard_map`` still traces the step (``jax.debug.print``, not ``print``).
      enable_progress_bar: add a :class:`RichProgressBar` if none is given.
      enable_checkpointing: add a :class:`ModelCheckpoint` (at the end) if none is given.
      logger: ``True`` adds a :class:`CSVLogger` and a :class:`TensorBoardLogger`, each unless
        a logger of its class is in ``callbacks``; other loggers (e.g. a ``WandbLogger``) are
        added beside them, so ``metrics.csv`` stays. ``False`` adds neither.
      run_ahead: enqueue the next call before a boundary's hooks when nothing
        needs the state there. ``"auto"``: on GPU/TPU; off on CPU, where an
        execution queued behind a running one slows the run. Single-process only.
      sync_every_n_seconds: target device time (seconds) of one call fusing log intervals: how
        long metrics may wait on the devices. ``None`` or ``0``: one call per log interval.
      compile_evaluation_ahead: compile the evaluation program in the background while the
        first training call runs; ``False`` compiles it when first needed (no CPU spent when
        nothing evaluates). ``"auto"`` (the Trainer's default; the recipes set ``True``): ahead
        when ``fit`` evaluates (``eval_every_n_steps`` set); pass ``True`` when :meth:`evaluate`
        follows ``fit`` (the recipes do). Ahead, a broken ``evaluation_step`` fails ``fit``
        before training (at a boundary if it compiles late).
      compilation_cache: JAX's persistent compilation cache, so a second run of the same
        programs (another seed or learning rate) loads them from disk instead of compiling:
        ``True`` (default) in ``~/.cache/jaxtrainer/jax`` (or ``JAX_COMPILATION_CACHE_DIR``), a
        directory, or ``False``/``None``: off. The environment variable
        ``JAXTRAINER_COMPILATION_CACHE`` overrides it (``0`` off, ``1`` on, or a directory).
        Process-wide: once on it stays on for later compiles
        (:mod:`jaxtrainer.runtime.compilation_cache`).
      requeue: after SIGUSR1 checkpointed the run, ``scontrol requeue`` the SLURM
        job: ``"auto"`` in a batch job, ``True``, ``False``; a requeued job
        resumes from ``"last"``.
      budget: a :class:`~jaxtrainer.trainer.budget.Budget` instead of ``max_steps`` and
        ``max_env_steps`` (one per member of a population is totalled at ``fit``).
      resume_hint: the preemption message's advice, formatted with ``{checkpoint}``
        and ``{default_root_dir}`` (``None``: the Python call, ``fit(..., ckpt_path=<checkpoint>)``).
      deterministic: ``--xla_gpu_deterministic_ops=true`` (GPU) and the highest float32 matmul
        precision for the process's programs (slower; one line says what it set, :attr:`config`
        records it). ValueError: a GPU backend already started without that flag.

    Attributes:
      root_key: the run's root PRNG key (``key(seed)``, replicated; restored on
        resume), which every key is folded from; ``None`` before ``fit``/``evaluate``.

    Raises:
      ValueError: before JAX starts or anything is written: an unknown strategy, a non-positive
        budget or interval, a negative ``sync_every_n_seconds``, malformed ``devices``, or an
        on/off argument that is not a bool (``"flase"`` or ``100``; ``run_ahead`` also takes
        ``"auto"``); each message names the value and the accepted forms. A device index beyond
        the devices there raises when the devices are picked, before any compile.
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
        compile_evaluation_ahead: bool | str = "auto",
        compilation_cache: bool | str | os.PathLike | None = True,
        requeue: bool | str = "auto",
        budget: Budget | None = None,
        resume_hint: str | None = None,
        deterministic: bool = False,
    ) -> None:
        self.requeue = slurm.check_requeue(requeue)
        self.run_ahead = arguments.flag("run_ahead", run_ahead, also=("auto",))
        self.jit = arguments.flag("jit", jit)
        self.compile_evaluation_ahead = arguments.flag("compile_evaluation_ahead",
                                                   compile_evaluation_ahead, also=("auto",))
        self.sync_every_n_seconds = float(arguments.number(
            "sync_every_n_seconds", sync_every_n_seconds, low=0, allow_none=True) or 0.0)
        self.budget = _budget(budget, max_steps, max_env_steps)
        self.log_every_n_steps = arguments.positive_int("log_every_n_steps", log_every_n_steps, False)
        self.eval_every_n_steps = arguments.positive_int("eval_every_n_steps", eval_every_n_steps)
        self.seed = arguments.integer("seed", seed)
        self.default_root_dir = runs.root_of_runs(arguments.directory("default_root_dir",
                                                                      default_root_dir))
        devices = arguments.devices(devices)  # ValueError naming the value and the accepted forms
        self.callbacks = _with_defaults(
            callbacks, arguments.flag("logger", logger, hint=_LOGGER_HINT),
            arguments.flag("enable_checkpointing", enable_checkpointing),
            arguments.flag("enable_progress_bar", enable_progress_bar))
        flags_set = determinism.apply() if arguments.flag("deterministic", deterministic) else {}
        self.strategy = resolve(strategy, devices, jit=self.jit)
        self.compilation_cache_dir = compilation_cache_lib.enable(compilation_cache)
        self.config = _recorded(strategy, devices, self.budget, flags_set,
                                log_every_n_steps=log_every_n_steps, eval_every_n_steps=eval_every_n_steps,
                                seed=seed, jit=self.jit, sync_every_n_seconds=sync_every_n_seconds)
        self.programs = Programs(self.strategy)
        self.planner = IntervalPlanner(1, self.log_every_n_steps)
        self._state: Any = None
        self._state_copy: Any = None  # what hooks read while the loop donates ``_state``
        self._donating = False
        self._module: Module | None = None
        self.root_key: jax.Array | None = None
        self.ckpt_path: str | None = None
        self.resume_hint = resume_hint
        self.log_dir = ""
        self.global_step = self.env_steps = self.max_steps = self.env_steps_per_step = 0
        self.should_stop, self.stop_reason = False, None
        self.state_is_valid, self.state_ahead, self.more_metrics_pending = True, False, False
        self.received_signal: int | None = None
        self.callback_metrics: dict[str, float] = {}
        self.hook_seconds: dict[tuple[int, str], float] = {}  # see call_hooks
        self.unfinished_hooks = hook_replay.UnfinishedHooks()  # an exception's, a resume's
        self.rendezvous_count = 0  # how many rendezvous this Trainer held (their names differ)

    # ------------------------------------------------------------------ info
    @property
    def state(self) -> Any:
        """The module state: a pytree of global arrays, one logical copy.

        During ``fit`` the Trainer donates the state's device buffers to the next
        compiled call, which deletes them. So that what a callback reads stays
        readable after training moves on, reading ``trainer.state`` from a hook
        returns a copy, made on the first read at each boundary (one on-device
        copy; nothing is copied where no hook reads it). Outside ``fit`` it is
        the state itself. :meth:`peek_state` reads without a copy.
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

    @property
    def compile_seconds(self) -> dict[str, float]:
        """Compile times of the training and evaluation programs (seconds)."""
        return self.programs.compile_seconds

    def wait_for_compilation(self) -> None:
        """Block until programs compiling in the background are ready (e.g. in
        ``on_train_start``, to time training without a concurrent compile)."""
        self.programs.wait()

    # ----------------------------------------------------------------- hooks
    def call_hook(self, hook: str, module: Module, *args: Any) -> None:
        """Call callback hook ``hook`` (e.g. ``"on_train_start"``) on every
        callback, in order, with ``(trainer, module, *args)`` (:func:`call_hooks`)."""
        call_hooks(self, hook, module, args)

    # ---------------------------------------------------------------- state
    def rendezvous(self, what: str) -> None:
        """With several processes, wait for every process here before the first
        collective of ``what`` (:meth:`Strategy.rendezvous`)."""
        self.rendezvous_count += 1
        self.strategy.rendezvous(f"jaxtrainer {self.log_dir} {what} {self.rendezvous_count}")

    @property
    def has_budget(self) -> bool:
        """Whether ``max_steps`` or ``max_env_steps`` is set (``fit`` needs one)."""
        return self.budget.is_set

    def request_stop(self, reason: str, *, state_is_valid: bool = True) -> None:
        """Stop the fit after this interval, saying ``reason`` (a later request's wins);
        ``state_is_valid=False``: no checkpoint of this state is written."""
        self.should_stop, self.stop_reason = True, reason
        self.state_is_valid = self.state_is_valid and state_is_valid

    def add_callback(self, callback: Callback) -> None:
        """Insert ``callback`` where its :attr:`Callback.order` puts it: after
        every callback of an equal or lower order, before the others (as the
        callbacks given to the constructor are sorted).

        Raises:
          TypeError: ``callback`` is not a :class:`Callback`.
        """
        if not isinstance(callback, Callback):
            raise TypeError(f"add_callback expects a jaxtrainer.Callback, got {callback!r}")
        order = int(getattr(callback, "order", 0))
        at = sum(int(getattr(cb, "order", 0)) <= order for cb in self.callbacks)
        self.callbacks.insert(at, callback)

    def remove_callback(self, callback: Callback) -> None:
        """Take ``callback`` out of :attr:`callbacks` (ValueError: it is not there)."""
        self.callbacks.remove(callback)

    def update_state(self, fn: Callable[[Any], Any]) -> None:
        """Replace the state with ``fn(state)`` (read without a copy, :meth:`peek_state`), e.g.
        a hook writing new hyperparameters: ``trainer.update_state(lambda s: s.replace(
        hyperparams=new))``; ``fn`` keeps the tree's structure, shapes and shardings."""
        self.state = fn(self._state)

    def prepare(self, module: Module) -> None:
        """Set up the devices, the budget (``max_steps``) and run the module's
        checks (``validate``) for ``module``, before anything compiles (``fit`` and
        ``evaluate`` call it first).
        Without a budget (an evaluation-only Trainer) ``max_steps`` is 0 and
        ``configure_budget`` is not called."""
        module_record.stop_if_loading()  # a recorded script run only to define its class
        self._module = module
        self.strategy.setup()
        self.env_steps_per_step = int(module.env_steps_per_step)
        self.max_steps = self.budget.steps_of(module) if self.has_budget else 0
        if self.has_budget:
            module.configure_budget(self.max_steps)
        module.validate(self.num_devices)
        self.planner = IntervalPlanner(  # a budget spent in rounds: each ends on a log boundary
            self.max_steps, self.budget.log_interval(self.log_every_n_steps, self.max_steps),
            self.eval_every_n_steps, self.sync_every_n_seconds, fuse=self.strategy.jit,
            max_intervals=MAX_INTERVALS_PER_CALL)

    def restore_checkpoint(self, module: Module, path: Path, abstract_state: Any = None) -> dict[str, Any]:
        """Load the checkpoint step directory ``path`` (state, root key, counters,
        callback states) for ``module``, after :meth:`prepare`; returns its metadata.

        Raises:
          FileNotFoundError: ``path`` is not a checkpoint.
          ValueError: its arrays do not match ``module``'s state.
        """
        return checkpoint_connector.restore(self, module, path, abstract_state)

    def save_checkpoint(self, manager: Any, metrics: dict[str, float] | None = None) -> None:
        """Write the current state, counters, root key and callback states with
        ``manager`` (a :func:`jaxtrainer.checkpoint.manager`; in a single process
        also a plain orbax ``CheckpointManager``). Every process must call it:
        the sharded arrays are gathered, then only process 0 writes.

        Raises:
          TypeError: a plain orbax manager with several processes.
          RuntimeError: on every process but 0, when writing failed on process 0.
        """
        checkpoint_connector.save(self, self._module, manager, metrics)

    # ------------------------------------------------------------------- fit
    def fit(self, module: Module, ckpt_path: str | os.PathLike | None = None) -> None:
        """Train ``module`` until the budget is spent or ``trainer.should_stop``.

        Args:
          module: the algorithm.
          ckpt_path: ``None`` (a new run in a new ``version_<n>``), ``"last"``
            (newest checkpoint under ``default_root_dir`` of a run this module
            can resume: newer runs of another recorded module class or sweep
            shape are passed over and named on stderr), ``"best"`` (the
            best checkpoint by its :class:`ModelCheckpoint`'s ``monitor`` of the
            newest run there, see :func:`jaxtrainer.checkpoint.resolve`) or
            a checkpoint path; resuming continues the run exactly and appends to
            its logs (the resume is printed: checkpoint and step). A checkpoint
            already at or past the budget runs and writes nothing.

        Preemption: a SIGTERM, SIGINT or SIGUSR1 (taken at once, even during a
        compile) saves a checkpoint at the next step boundary (every
        :class:`ModelCheckpoint`, or ``<log_dir>/checkpoints``), closes the
        loggers and raises :class:`Preempted`; a second ends the process within
        about 2 s keeping every complete checkpoint (:mod:`jaxtrainer.runtime._signals`).
        With a progress bar, process 0 prints one line per phase on stderr
        ("compiling the training program ...").

        Processes (``multi_node``): call it on every process; process 0 alone
        picks the run directory and ``ckpt_path`` and writes logs and checkpoints.

        Raises:
          ValueError: no budget (neither ``max_steps`` nor ``max_env_steps``),
            sizes that do not split over the devices, a bad budget, a callback
            monitoring an ``eval/`` metric in a fit that never evaluates, or
            ``ckpt_path="best"`` where no best checkpoint was recorded; before
            anything compiles or is written.
          jaxtrainer.rundir._run_lock.RunInUseError: another live process
            owns the run directory (e.g. the same run resumed twice at once);
            nothing is written. Exceptions from the module or
            callbacks are re-raised unchanged after ``on_exception`` and
            ``teardown``.
          Preempted: after SIGTERM/SIGINT/SIGUSR1, once the checkpoint is written.
          jaxtrainer.runtime._lost_process.ProcessLost: another process of the run died.
          FileNotFoundError: ``ckpt_path`` names no checkpoint.
        """
        fit_setup.check_fit(self, module)
        self.prepare(module)
        fit_setup.check_callbacks(self, module)
        resume, step = fit_setup.resolve_resume(self, module, ckpt_path)
        self.ckpt_path = os.fspath(resume) if resume is not None else None
        fit_run.reset(self)
        if resume is not None and step >= self.max_steps:  # load the state, say why, write nothing
            self.restore_checkpoint(module, resume)
            return checkpoint_connector.report_budget_spent(self, resume, step, counted_members(module))
        with fit_setup.run_dir_held(self, new=resume is None):
            fit_setup.announce(self, module, resume, step)
            with signals_and_phases(self):
                self._run(module, resume)
            self.call_hook("teardown", module, "fit")

    def _run(self, module: Module, resume: Path | None) -> None:
        """setup -> (restore | init) -> on_fit_start -> train -> on_fit_end; on
        an exception every callback's ``on_exception`` and ``teardown`` run and
        the exception is re-raised unchanged (:mod:`jaxtrainer.trainer._fit_run`)."""
        try:
            fit_run.start(self, module, resume)
            self._donating = True  # hooks now read copies (see ``state``)
            self.call_hook("on_fit_start", module)
            FitLoop(self).run(module)
            self._donating = False
            self.call_hook("on_fit_end", module)
        except BaseException as exc:
            self._donating = False
            lost = fit_run.fail(self, module, exc)  # another process died: ProcessLost
            if lost is not None:
                raise lost from None
            raise

    # -------------------------------------------------------------- evaluate
    def run_evaluation(self, module: Module) -> dict[str, float]:
        """Run ``module.evaluation_step`` once on the current state, report the
        metrics to ``on_evaluation_end`` and return them (floats, plus ``step``
        and ``env_steps``). The loop calls it every ``eval_every_n_steps``.

        Raises:
          ValueError: ``module`` has no ``evaluation_step``.
        """
        return fit_run.evaluate(self, module)

    def evaluate(self, module: Module, ckpt_path: str | os.PathLike | None = None, *,
                 seed: int | None = None) -> dict[str, float]:
        """Run ``module.evaluation_step`` once on the current state (after
        ``fit``), the checkpoint at ``ckpt_path``, or a fresh ``init_state``; with
        ``seed``, its keys drawn from ``key(seed)`` instead of the run's root key.

        Needs no budget: ``Trainer().evaluate(module, ckpt_path=...)`` evaluates
        a saved run. ``ckpt_path`` takes what :meth:`fit` takes (``"last"``,
        ``"best"``, a run's ``checkpoints`` directory or a step directory).

        Returns metrics as Python floats (e.g. ``eval/episode_return``). With
        several processes, call it on every process (``ckpt_path`` is resolved
        on process 0 and read by every process).

        Raises:
          FileNotFoundError: ``ckpt_path`` names no checkpoint.
          ValueError: ``ckpt_path="best"`` where no best was recorded, or a non-int ``seed``.
        """
        seed = None if seed is None else arguments.integer("seed", seed)  # before anything runs
        self.prepare(module)
        if ckpt_path is not None:
            self.restore_checkpoint(module, fit_setup.checkpoint_of(self, module, ckpt_path))
        elif self._state is None:
            fit_run.init_state(self, module)
        else:
            self._state = fit_setup.adopt(self, module, self._state)
        return fit_run.evaluate(self, module, seed)
