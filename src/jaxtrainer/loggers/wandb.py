"""WandbLogger: Weights & Biases runs, online, offline or disabled."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxtrainer._arguments import expand_path
from jaxtrainer.checkpoint._files import steps
from jaxtrainer.checkpoint.resolve import checkpoint_dirs
from jaxtrainer.loggers.base import Logger
from jaxtrainer.runtime._optional import check_installed, import_optional

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


class WandbLogger(Logger):
    """Log to a wandb run (global-zero process only).

    Metrics go to ``run.log(values, step=global_step)`` (x axis: global training
    steps; ``env_steps`` is logged too), hyperparameters once to ``run.config``.
    The mode is wandb's own choice unless ``mode`` is given: the
    ``WANDB_MODE`` environment variable, else the ``wandb online``/``wandb
    offline`` setting, else online (which needs ``wandb login`` or
    ``WANDB_API_KEY``). ``"offline"`` writes ``<save_dir>/wandb/offline-run-*``
    without any network (upload later with ``wandb sync``), ``"disabled"``
    makes every call a no-op.

    A ``fit`` resumed with ``ckpt_path`` continues the wandb run whose id the
    checkpoint stored, so one wandb run spans preemptions: from the run's newest
    checkpoint with ``resume="allow"``; from an earlier one (``ckpt_path="best"``,
    a step) wandb would drop the steps it already has, so the run is rewound to
    the checkpoint's step (``resume_from="<id>?_step=<step>"``, wandb's rewind:
    its history after that step is replaced, as in ``metrics.csv`` and
    TensorBoard, and wandb keeps the replaced history archived). The logger
    prints which on resuming. A fresh ``fit`` (also with a reused logger)
    starts a new run with a new id.
    The run is finished (``exit_code`` 0 on success, 1 on failure or
    preemption) on every exit path of ``fit``.

    Args:
      project: wandb project name.
      name: run name; default the run directory name (``version_N``).
      save_dir: parent of the ``wandb`` directory; default ``trainer.log_dir``.
      mode: ``"online"``, ``"offline"`` or ``"disabled"``; ``None`` (default):
        wandb's own default, as above.
      **init_kwargs: passed to ``wandb.init`` (``entity``, ``tags``, ``group``...).

    Raises:
      ValueError: an unknown ``mode``.
      ModuleNotFoundError: wandb is not installed (naming the ``wandb`` extra).
    """

    def __init__(self, project: str = "jaxtrainer", name: str | None = None,
                 save_dir: str | os.PathLike | None = None, mode: str | None = None,
                 **init_kwargs: Any) -> None:
        super().__init__()
        if mode not in (None, "online", "offline", "disabled"):
            raise ValueError(f"mode={mode!r}: expected 'online', 'offline' or 'disabled'")
        # said now, not when fit starts (its programs are compiled by then)
        check_installed("wandb", "wandb", "WandbLogger")
        self.project = project
        self.name = name
        self.save_dir = None if save_dir is None else expand_path(save_dir)
        self.mode = mode
        self.init_kwargs = init_kwargs
        self.run = None
        self.run_id: str | None = None

    def reset(self) -> None:
        self.run, self.run_id = None, None  # a new run gets a new wandb run id

    def start(self, trainer: Trainer, module: Module) -> None:
        wandb = import_optional("wandb", "wandb", "WandbLogger")

        directory = os.fspath(self.save_dir or trainer.log_dir)
        os.makedirs(directory, exist_ok=True)
        # WANDB_MODE read at each start (wandb itself reads it once per process), else
        # None: wandb's own choice (its ``wandb offline`` setting, else online)
        mode = self.mode or os.environ.get("WANDB_MODE") or None
        kwargs = dict(project=self.project, name=self.name or os.path.basename(trainer.log_dir),
                      dir=directory, mode=mode, reinit="finish_previous", **self.init_kwargs)
        if self.run_id is not None:  # restored from the checkpoint this fit resumes
            kwargs.update(self._resume_arguments(trainer))
        self.run = wandb.init(**kwargs)
        self.run_id = getattr(self.run, "id", None) or self.run_id

    def _resume_arguments(self, trainer: Trainer) -> dict[str, Any]:
        """``wandb.init``'s arguments that continue the run ``run_id`` at the
        resumed step: a plain resume from the run's newest checkpoint, else a
        rewind to the step (the run logged past it: wandb would drop those
        steps as they come again); said on stdout."""
        step = trainer.global_step
        later = _later_checkpoints(trainer, step)
        if not later:
            print(f"jaxtrainer: WandbLogger: resuming wandb run {self.run_id} at step {step}",
                  flush=True)
            return {"id": self.run_id, "resume": "allow"}
        point = f"{self.run_id}?_step={step}"
        print(f"jaxtrainer: WandbLogger: rewinding wandb run {self.run_id} to step {step} "
              f"(resume_from={point!r}): the run went on to the checkpoint"
              f"{'s' * (len(later) > 1)} {', '.join(map(str, later))}, and wandb would drop those "
              f"steps as they come again; its history after step {step} is replaced (wandb keeps "
              "it in an archived copy of the run)", flush=True)
        return {"resume_from": point}

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.config.update(params, allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float | int], step: int) -> None:
        if self.run is not None:
            self.run.log(dict(metrics), step=step)

    def log_video(self, tag: str, path: str, step: int) -> None:
        """``wandb.Video(path)`` under ``tag``, with ``video/step`` = ``step`` as
        its x axis (``define_metric``): a video finishes rendering after later
        metrics were logged, and wandb's own step only moves forward."""
        wandb = import_optional("wandb", "wandb", "WandbLogger")

        if self.run is not None:
            self.run.define_metric(tag, step_metric="video/step")
            self.run.log({tag: wandb.Video(path, format="gif", caption=f"step {step}"),
                          "video/step": step})

    def log_image(self, tag: str, path: str, step: int) -> None:
        """``wandb.Image(path)`` under ``tag``, with ``image/step`` = ``step`` as
        its x axis (as :meth:`log_video`: wandb's own step only moves forward)."""
        wandb = import_optional("wandb", "wandb", "WandbLogger")

        if self.run is not None:
            self.run.define_metric(tag, step_metric="image/step")
            self.run.log({tag: wandb.Image(path, caption=f"step {step}"), "image/step": step})

    def finalize(self, status: str) -> None:
        """Finish the run, and return once its files are written: ``run.finish()``
        returns before wandb's service has written them (an offline run's
        ``.wandb`` file can hold its header alone), so where no other wandb run
        is open (``wandb.run``) ``wandb.teardown()`` waits for the service to
        close them; the next run starts a new service."""
        if self.run is not None:
            run, self.run = self.run, None
            run.finish(exit_code=0 if status == "success" else 1)
            if not getattr(run, "disabled", False):
                wandb = import_optional("wandb", "wandb", "WandbLogger")
                if wandb.run is None:
                    wandb.teardown()

    @property
    def state_key(self) -> str:
        return self._key_of(project=self.project, name=self.name)

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.run_id = state_dict.get("run_id") or self.run_id


def _later_checkpoints(trainer: Trainer, step: int) -> list[int]:
    """Steps after ``step`` of the checkpoints of the run ``trainer`` resumes (its
    checkpoints directories and the resumed checkpoint's own), ascending."""
    dirs = set(checkpoint_dirs(trainer.log_dir))
    if trainer.ckpt_path:
        dirs.add(Path(trainer.ckpt_path).parent)
    return sorted({s for d in dirs for s in steps(d) if s > step})
