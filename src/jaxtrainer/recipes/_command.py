"""A recipe as a command: one-line config errors, the run's ``config.yaml`` and
its final evaluation in the logs.

* :func:`cli` runs a recipe's ``main(argv)``: a bad config (an error raised
  before training starts) prints one line and exits with status 2, as
  argparse does; an error once training has started keeps its traceback.
* :class:`RunRecord` (added by :func:`jaxtrainer.recipes.config.fit_and_report`)
  writes ``<run_dir>/config.yaml`` when the run starts and evaluates once at the
  last step inside ``fit``, so the loggers (``metrics.csv``, TensorBoard, wandb)
  and the final checkpoint hold the evaluation the recipe prints.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.checkpoint._files import CheckpointReadError
from jaxtrainer.rundir import run_layout
from jaxtrainer.rundir._run_lock import RunInUseError
from jaxtrainer.rundir.storage import StorageError, as_storage_error, replace_file, writing

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.recipes._resume import Found
    from jaxtrainer.trainer import Trainer

CONFIG_FILE = run_layout.CONFIG_FILE
"""The file in a run directory holding the resolved config of the recipe that
started the run, plus the top-level key ``recipe`` (the recipe's name, the stem
of its script: ``ppo`` for ``recipes/ppo.py``)."""

CONFIG_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, TypeError, FileNotFoundError, OmegaConfBaseException, yaml.YAMLError)
"""Errors :func:`cli` reports as one line when raised before training starts
(a bad key, value, environment name, config file or ``ckpt_path``)."""

REPORTED_ERRORS: tuple[type[BaseException], ...] = (StorageError, CheckpointReadError, RunInUseError)
"""Errors :func:`cli` reports as one line also once training has started: a
file of the run that cannot be written (a full disk, a read-only directory:
:class:`~jaxtrainer.rundir.storage.StorageError`), a checkpoint that is damaged or
does not match the module (:class:`~jaxtrainer.checkpoint.CheckpointReadError`),
a run directory that another process is writing
(:class:`~jaxtrainer.rundir._run_lock.RunInUseError`). An ``OSError`` of :data:`jaxtrainer.rundir.storage.STORAGE_ERRNOS` naming a file counts
as a StorageError."""

TRACEBACK_VARIABLE = "JAXTRAINER_TRACEBACK"
"""Set it to ``1`` to get the traceback of a config error instead of one line."""


class _Command:
    """What :func:`cli` tracks for the error report: has a ``fit`` started."""

    training_started = False


@dataclass(frozen=True)
class RecipeRun:
    """One command's run of a recipe, made once by
    :func:`jaxtrainer.recipes.config.load_run` and handed to what needs it
    (:func:`jaxtrainer.recipes.config.fit_and_report`).

    Attributes:
      config: the resolved config (a resume's: the run's saved config with what
        the command line changed over it).
      recipe: the recipe's name (``ppo``): the ``recipe:`` key of the run's
        ``config.yaml``.
      resume: what the run resumes (:class:`jaxtrainer.recipes._resume.Found`:
        the checkpoint's step directory, already resolved, and the run's saved
        config), or ``None`` for a new run.
    """

    config: DictConfig
    recipe: str
    resume: Found | None = None

    @property
    def ckpt_path(self) -> Path | None:
        """The step directory to resume (``Trainer.fit`` takes a step directory
        as it is, with no search), or ``None``."""
        return None if self.resume is None else self.resume.checkpoint


def one_line(error: BaseException) -> str:
    """``error``'s message on one line (whitespace runs collapsed)."""
    return " ".join(str(error).split()) or type(error).__name__


def cli(main: Callable[[list[str]], Any], argv: Sequence[str] | None = None,
        prog: str | None = None) -> None:
    """Run ``main(argv)`` (default ``sys.argv[1:]``) as a command.

    An error of :data:`CONFIG_ERRORS` raised before training starts (before the
    first ``fit`` reaches its ``setup`` hooks: while loading the config,
    building the environment, module or Trainer, checking sizes against the
    devices or resolving ``trainer.ckpt_path``) prints
    ``<prog>: error: <message>`` on stderr and exits with status 2; so does
    an error of :data:`REPORTED_ERRORS` at any time (a full disk or a read-only
    directory mid-run, a damaged checkpoint on resume: the Trainer has closed
    its loggers and removed what was half-written by then). Any other error,
    and a config error once training has started, propagates with its
    traceback; so do all of them when the environment variable
    :data:`TRACEBACK_VARIABLE` is ``1``. Ctrl-C (``KeyboardInterrupt``)
    before training starts prints one line and exits with status 130; once
    ``fit`` runs, the Trainer's own signal handling takes over.

    Raises:
      SystemExit: status 2 for a config error or one of :data:`REPORTED_ERRORS`
        (``--help`` and ``--print-config`` exit with 0 from ``main``); 130
        for Ctrl-C before training starts.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or sys.argv[0]
    _Command.training_started = False
    try:
        main(argv)
    except BrokenPipeError:  # a closed ``| head``: not an error (the command's end, run_and_exit)
        raise
    except (*CONFIG_ERRORS, *REPORTED_ERRORS, OSError, ImportError) as e:
        reported = _reported(e)
        if reported is None or os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0"):
            raise
        print(f"{prog}: error: {one_line(reported)}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        if _Command.training_started or os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0"):
            raise
        print(f"{prog}: interrupted (SIGINT) before training started", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGINT) from None


def _reported(error: BaseException) -> BaseException | None:
    """The error :func:`cli` reports in one line for ``error``, or ``None``
    (raised with its traceback): one of :data:`REPORTED_ERRORS` (or an
    ``OSError`` that :func:`~jaxtrainer.rundir.storage.as_storage_error` takes) at any
    time, one of :data:`CONFIG_ERRORS` or an ``ImportError`` naming the extra to
    install (or raised by jaxtrainer itself, explaining why an env family is
    unavailable) before training starts."""
    if isinstance(error, REPORTED_ERRORS):
        return error
    storage = as_storage_error(error)
    if storage is not None:
        return storage
    if isinstance(error, CONFIG_ERRORS) and not _Command.training_started:
        return error
    if isinstance(error, ImportError) and ("pip install" in str(error) or _raised_here(error)) \
            and not _Command.training_started:  # a missing extra, or an env family we explain
        return error
    return None


def _raised_here(error: BaseException) -> bool:
    """Whether ``error`` was raised by jaxtrainer's own code (its message is
    written for the user, e.g. why an env family cannot be installed)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "jaxtrainer" in Path(tb.tb_frame.f_code.co_filename).parts


def write_config(path: str | os.PathLike, cfg: DictConfig, recipe: str | None,
                 determinism: dict[str, str] | None = None) -> None:
    """Write ``cfg`` resolved, with ``recipe: <recipe>`` first when given, to
    ``path`` (atomically: a temporary file then ``os.replace``). The file holds
    the run's settings, not how this command started: its ``trainer.ckpt_path``
    is null, so ``--config <run>/config.yaml`` starts a new run (a resumed run's
    file once named the checkpoint it resumed from, and rerunning it resumed and
    overwrote that run). ``determinism`` (what ``trainer.deterministic=true`` set,
    ``Trainer.config["deterministic"]``) is written as a comment on that key's line:
    ``deterministic: true  # set XLA_FLAGS=... jax_default_matmul_precision=highest``.

    Raises:
      jaxtrainer.rundir.storage.StorageError: the file cannot be written (naming it
        and the OS error); no temporary file is left.
    """
    body = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(body.get("trainer"), dict) and "ckpt_path" in body["trainer"]:
        body["trainer"]["ckpt_path"] = None
    text = OmegaConf.to_yaml(OmegaConf.create({"recipe": recipe, **body} if recipe else body))
    if determinism:
        text = _noted(text, "trainer", "deterministic: true",
                      "set " + " ".join(f"{k}={v}" for k, v in determinism.items() if v))
    replace_file(path, text, "the run's config")


def _noted(text: str, section: str, line: str, note: str) -> str:
    """YAML ``text`` with ``  # note`` after ``line`` in top-level ``section``."""
    lines, current = text.split("\n"), None
    for i, item in enumerate(lines):
        if item and not item[0].isspace():  # a top-level key
            current = item[:-1] if item.endswith(":") else None
        if current == section and item == f"  {line}":
            lines[i] = f"{item}  # {note}"
            break
    return "\n".join(lines)


class RunRecord(Callback):
    """What a recipe keeps of a run: its config and its final evaluation.

    * ``setup``: writes ``<log_dir>/config.yaml`` (:data:`CONFIG_FILE`) on the
      global-zero process. A resumed run (``ckpt_path``) keeps the file the run
      started with, as ``hparams.csv`` is kept, but for the budget it was last
      given (:data:`~jaxtrainer.rundir.run_layout.BUDGET_ARGUMENTS`: a resume that raised
      it records it, so the next plain resume goes on to it), unless the resume applied changed
      settings of what is learned (:mod:`jaxtrainer.recipes._resume`): then the
      file holds the settings the run now goes on with. A resume writes it at
      ``on_fit_start``, once the checkpoint is restored (a resume that fails to
      restore it writes nothing).
    * At the boundary where the budget is spent (``on_train_steps_end``), or
      at ``on_train_end`` when a callback stopped training earlier: runs
      ``trainer.evaluate`` once on the final state, unless an evaluation already
      ran at that step (``eval_every_n_steps`` dividing it), before
      :class:`~jaxtrainer.callbacks.ModelCheckpoint` saves (``order = 90``). The
      loggers are still open then: the evaluation is a row at the last step of
      ``metrics.csv`` (and of TensorBoard, wandb), and the checkpoint saved at
      that step holds it in its metrics (for ``monitor``). The key of an
      evaluation depends on (seed, step) only, so it equals
      ``trainer.evaluate`` after ``fit``.

    Args:
      cfg: the recipe's resolved config.
      recipe: the recipe's name, written as ``recipe:`` (``None``: no such key).
      saved: a resumed run's saved config, as the resume read it (``None``:
        read ``config.yaml`` when a resume needs it).

    Attributes:
      result: the metrics of the last evaluation of this ``fit`` (Python
        floats, with ``step`` and ``env_steps``), or ``None``.
    """

    order = 90

    def __init__(self, cfg: DictConfig, recipe: str | None, saved: DictConfig | None = None) -> None:
        self.cfg = cfg
        self.recipe = recipe
        self.saved = saved  # the resumed run's config as it was read (not read again)
        self.result: dict[str, float] | None = None

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage != "fit":
            return
        _Command.training_started = True
        self.result = None
        if trainer.ckpt_path is None:
            self._write_config(trainer)

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        if trainer.ckpt_path is not None:  # once the checkpoint is restored: a failed resume writes nothing
            self._write_config(trainer)

    def _write_config(self, trainer: Trainer) -> None:
        if not trainer.is_global_zero:
            return
        path = Path(trainer.log_dir) / CONFIG_FILE
        if trainer.ckpt_path is not None and (self.saved is not None or path.exists()):
            saved = OmegaConf.to_container(self.saved if self.saved is not None
                                           else OmegaConf.load(path), resolve=True)
            saved.pop("recipe", None)
            now = OmegaConf.to_container(self.cfg, resolve=True)
            kept = ("recipe", "trainer", "logger", "callbacks")  # a resume may change these
            if {k: v for k, v in saved.items() if k not in kept} == \
                    {k: v for k, v in now.items() if k not in kept}:
                # a resume: the run's config is the one it started with, and its last budget
                budget = {k: now.get("trainer", {}).get(k) for k in run_layout.BUDGET_ARGUMENTS}
                if all(saved.get("trainer", {}).get(k) == v for k, v in budget.items()):
                    return
                write_config(path, OmegaConf.create({**saved, "trainer": {
                    **saved.get("trainer", {}), **budget}}), self.recipe,
                    trainer.config.get("deterministic"))
                return
            # a resume that applied changed settings (trainer.resume_overrides=apply)
        with writing("the run directory", path.parent):
            path.parent.mkdir(parents=True, exist_ok=True)
        write_config(path, self.cfg, self.recipe, trainer.config.get("deterministic"))

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self.result = dict(metrics)

    def _evaluate_once(self, trainer: Trainer, module: Module) -> None:
        if module.has_evaluation() and self.evaluated_at(trainer.global_step) is None:
            trainer.evaluate(module)  # on_evaluation_end (ours and the loggers') records it

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        if trainer.global_step >= trainer.max_steps and not trainer.state_ahead:
            self._evaluate_once(trainer, module)

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        self._evaluate_once(trainer, module)

    def evaluated_at(self, step: int) -> dict[str, float] | None:
        """:attr:`result` if it is the evaluation of ``step``, else ``None``."""
        return self.result if self.result is not None and self.result.get("step") == step else None
