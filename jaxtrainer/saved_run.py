"""A saved run, read back: which checkpoint a path names, the run's config, and
its state restored into the module that wrote it.

A run that a recipe (``recipes/<name>.py``) started holds::

    <run_dir>/config.yaml                  the resolved config + "recipe: <name>"
    <run_dir>/checkpoints/<step>/          orbax checkpoints (jaxtrainer.checkpoint)

:func:`select_checkpoint` turns a run directory, its ``checkpoints``
directory or one step directory into a step directory (the newest, the best by
the monitored metric, or a given step); :func:`restore` rebuilds the module
from ``config.yaml`` (:func:`jaxtrainer.recipes.modules.build_module`) and
loads the checkpoint onto the devices of any strategy, whatever strategy wrote
it. Used by ``jaxtrainer eval`` and :func:`jaxtrainer.load_policy`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig, OmegaConf

from jaxtrainer import checkpoint as ckpt
from jaxtrainer import module_record, runs

CONFIG_FILE = "config.yaml"
"""The run directory's config file (written by the recipes)."""

CHECKPOINTS = "checkpoints"
WHICH = ("last", "best")
"""Named checkpoints :func:`select_checkpoint` takes (besides a step number)."""


class BestCheckpoint(NamedTuple):
    """The best checkpoint of a run as its :class:`~jaxtrainer.ModelCheckpoint` ranked it.

    Attributes:
      path: the step directory.
      monitor: the metric ranked on (e.g. ``"eval/episode_return"``).
      mode: ``"max"`` or ``"min"``.
      score: the metric's value at that step.
    """

    path: Path
    monitor: str
    mode: str
    score: float


def _steps(directory: Path) -> list[int]:
    """Complete checkpoint steps under a ``checkpoints`` directory, ascending."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir()
                  if p.name.isdigit() and (p / ckpt.META).exists())


def _field(key: str, name: str) -> str | None:
    """``name``'s value in a ModelCheckpoint state key
    (``ModelCheckpoint[dirpath=None,monitor='loss',mode='min',...]``)."""
    found = re.search(rf"{name}=('([^']*)'|None)", key)
    return found.group(2) if found and found.group(2) is not None else None


def best_checkpoint(checkpoints_dir: str | os.PathLike) -> BestCheckpoint:
    """The best checkpoint under ``checkpoints_dir`` by the metric a
    :class:`~jaxtrainer.ModelCheckpoint` with ``monitor`` ranked them on, with
    that metric's name, mode and score.

    The path is :func:`jaxtrainer.runs.best_checkpoint` of the newest
    checkpoint (the one implementation of ``"best"``, shared with
    ``ckpt_path="best"``): its recorded ``best_model_path``, looked up in
    ``checkpoints_dir`` itself, so a run directory that was moved or copied
    still resolves.

    Raises:
      FileNotFoundError: no checkpoint under ``checkpoints_dir``, or the best
        step's directory is gone.
      ValueError: no best is recorded (the run had no
        ``ModelCheckpoint(monitor=...)``, or the metric was never logged), or
        several monitored ModelCheckpoints recorded different bests.
    """
    directory = Path(checkpoints_dir)
    steps = _steps(directory)
    if not steps:
        raise FileNotFoundError(f"no checkpoint under {directory}")
    newest = directory / str(steps[-1])
    try:
        path = runs.best_checkpoint(newest)
    except runs.NoBestCheckpoint:
        raise ValueError(
            f"no best checkpoint recorded under {directory}: 'best' is ranked by a "
            "ModelCheckpoint with monitor= and mode= (e.g. monitor='eval/episode_return', "
            "mode='max', with eval_every_n_steps so that the metric is logged); pass 'last' "
            f"or a step ({', '.join(map(str, steps))})") from None
    for key, state in (ckpt.read_meta(newest).get("callbacks") or {}).items():
        if isinstance(state, dict) and state.get("best_model_path"):
            score = state.get("best_model_score")
            return BestCheckpoint(path, _field(key, "monitor") or "?", _field(key, "mode") or "max",
                                  float("nan") if score is None else float(score))
    raise AssertionError("unreachable: runs.best_checkpoint found a recorded best")


def _locate(path: Path) -> tuple[Path, Path | None]:
    """``(checkpoints directory, the step directory when path is one)``."""
    if (path / ckpt.META).exists():
        return path.parent, path
    if _steps(path):
        return path, None
    if (path / CHECKPOINTS).is_dir():
        return path / CHECKPOINTS, None
    versions = sorted(p.name for p in path.glob("version_*") if p.is_dir())
    if versions:
        raise FileNotFoundError(f"{path} is a root of runs ({', '.join(versions[:8])}"
                                f"{', ...' if len(versions) > 8 else ''}): pass one run directory")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    raise FileNotFoundError(f"no checkpoint in {path}: expected a run directory (with "
                            f"{CHECKPOINTS}/), its {CHECKPOINTS} directory or a step directory")


def parse_which(which: str | int | None) -> str | int | None:
    """``which`` as ``None``, ``"last"``, ``"best"`` or a step (``int``).

    Raises:
      ValueError: anything else (naming the value and the choices).
    """
    if which is None or which in WHICH:
        return which
    if isinstance(which, int) and not isinstance(which, bool) and which >= 0:
        return which
    if isinstance(which, str) and which.isdigit():
        return int(which)
    raise ValueError(f"checkpoint {which!r}: expected 'last', 'best' or a step number")


def select_checkpoint(path: str | os.PathLike, which: str | int | None = None) -> Path:
    """The step directory that ``path`` and ``which`` name.

    Args:
      path: a run directory (``<root>/version_<n>``), its ``checkpoints``
        directory, or a step directory (``checkpoints/<step>``).
      which: ``None`` (the step directory ``path`` names, else the newest),
        ``"last"`` (the newest), ``"best"`` (:func:`best_checkpoint`) or a step
        number (``int`` or digits).

    Raises:
      FileNotFoundError: no checkpoint there (naming the path; a root of runs
        is named as such), or no checkpoint at that step (listing the steps).
      ValueError: a bad ``which``, or ``"best"`` where no best was recorded.
    """
    which = parse_which(which)
    directory, step_dir = _locate(Path(path))
    if which is None and step_dir is not None:
        return step_dir
    if which == "best":
        return best_checkpoint(directory).path
    steps = _steps(directory)
    if not steps:
        raise FileNotFoundError(f"no checkpoint under {directory}")
    if which is None or which == "last":
        return directory / str(steps[-1])
    if which not in steps:
        raise FileNotFoundError(f"no checkpoint at step {which} in {directory}; steps: "
                                f"{', '.join(map(str, steps))}")
    return directory / str(which)


def run_dir_of(step_dir: str | os.PathLike) -> Path:
    """The run directory of a checkpoint step directory: the one holding its
    ``checkpoints`` directory when that has a ``config.yaml``, else the run
    directory recorded in the checkpoint's metadata."""
    step_dir = Path(step_dir)
    parent = step_dir.parent.parent
    if step_dir.parent.name == CHECKPOINTS and ((parent / CONFIG_FILE).exists()
                                              or module_record.exists(parent)):
        return parent
    recorded = ckpt.read_meta(step_dir).get("run_dir")
    return Path(recorded) if recorded else parent


def load_config(run_dir: str | os.PathLike) -> tuple[str, DictConfig]:
    """``(recipe, config)`` from ``<run_dir>/config.yaml``; the ``recipe`` key is
    taken out of the config.

    Raises:
      FileNotFoundError: no ``config.yaml`` (runs started from Python have
        none: rebuild the module and pass it, e.g. ``load_policy(path, module=...)``).
      ValueError: the file has no ``recipe`` key, or names an unknown recipe.
    """
    from jaxtrainer.recipes.modules import check_recipe

    file = Path(run_dir) / CONFIG_FILE
    if not file.is_file():
        raise FileNotFoundError(
            f"no {CONFIG_FILE} in {run_dir}: runs started by a recipe (recipes/<name>.py) save "
            f"their config there, and runs started from Python a {module_record.MODULE_FILE} when "
            "the module's constructor takes plain values; otherwise build its module yourself "
            "and pass it (jaxtrainer.load_policy(path, module=...), Trainer.evaluate)")
    cfg = OmegaConf.load(file)
    if not isinstance(cfg, DictConfig) or "recipe" not in cfg:
        raise ValueError(f"{file} has no top-level 'recipe' key naming the recipe that wrote it "
                         "(e.g. recipe: ppo)")
    recipe = check_recipe(str(cfg.pop("recipe")))
    return recipe, cfg


def _trainer_value(cfg: DictConfig, key: str) -> Any:
    section = cfg.get("trainer")
    return section.get(key) if isinstance(section, DictConfig) else None


def make_trainer(recipe: str, cfg: DictConfig, strategy: Any = "single",
                 devices: Any = "auto") -> Any:
    """A Trainer (a :class:`~jaxtrainer.PopulationTrainer` for the population
    recipes) to restore and evaluate a run of ``recipe``: the run's budget (so
    that schedules match the run's), no loggers, checkpointing, progress bar
    or background compile, on ``strategy``/``devices``.

    A config with no budget gets ``max_steps=1`` (the Trainer requires one;
    only schedules read it, never the evaluation).
    """
    from jaxtrainer.population import PopulationTrainer
    from jaxtrainer.recipes.modules import POPULATION_RECIPES
    from jaxtrainer.trainer import Trainer

    quiet = dict(strategy=strategy, devices=devices, logger=False, enable_checkpointing=False,
                 enable_progress_bar=False, compile_evaluation_ahead=False)
    if recipe in POPULATION_RECIPES:
        extra = {k: _trainer_value(cfg, k) for k in ("member_map", "map_batch_size")
                 if _trainer_value(cfg, k) is not None}
        return PopulationTrainer(int(_trainer_value(cfg, "population_size")),
                                 max_generations=_trainer_value(cfg, "max_generations") or 1,
                                 **extra, **quiet)
    max_steps, max_env_steps = _trainer_value(cfg, "max_steps"), _trainer_value(cfg, "max_env_steps")
    if max_steps is None and max_env_steps is None:
        max_steps = 1
    return Trainer(max_steps=max_steps, max_env_steps=max_env_steps, **quiet)


class Restored(NamedTuple):
    """A run's checkpoint restored by :func:`restore`.

    Attributes:
      trainer: the Trainer holding it (``trainer.state``, ``global_step``,
        ``env_steps``, the root key).
      module: the module the trainer runs (for a population recipe the
        :class:`~jaxtrainer.population.GenerationModule` around it).
      recipe: the recipe's name; ``None`` for a module passed in.
      config: the run's config (``None`` for a module passed in).
      checkpoint: the step directory restored.
      meta: the checkpoint's metadata (``global_step``, ``seed``, ...).
    """

    trainer: Any
    module: Any
    recipe: str | None
    config: DictConfig | None
    checkpoint: Path
    meta: dict[str, Any]


def _recorded_module(run_dir: Path, overrides: dict[str, Any] | None) -> Any:
    """The module of a run started from Python (:mod:`jaxtrainer.module_record`);
    an ``eval_episodes`` override goes to its constructor argument or attribute."""
    import inspect

    episodes = [v for k, v in (overrides or {}).items()
                if k.rpartition(".")[2] == "eval_episodes"]
    cls, args = module_record.load(run_dir)
    takes = "eval_episodes" in inspect.signature(cls).parameters
    module = cls(**{**args, **({"eval_episodes": episodes[-1]} if episodes and takes else {})})
    if episodes and not takes:
        module.eval_episodes = episodes[-1]
    return module


def prepare(path: str | os.PathLike, which: str | int | None = None, *,
            overrides: dict[str, Any] | None = None, module: Any = None,
            strategy: Any = "single", devices: Any = "auto") -> tuple[Any, Any, str | None,
                                                                    DictConfig | None, Path]:
    """Everything :func:`restore` needs before it loads arrays: ``(trainer,
    module the trainer runs, recipe, config, step directory)``. Checks the
    path, the config and the module (sizes against the devices) without compiling.

    ``overrides``: ``{dotted key: value}`` set in the run's config before the
    module is built (e.g. ``{"algorithm.eval_episodes": 16}``).
    """
    from jaxtrainer.module import PopulationModule
    from jaxtrainer.population import PopulationTrainer
    from jaxtrainer.recipes.modules import build_module
    from jaxtrainer.trainer import Trainer

    step_dir = select_checkpoint(path, which)
    recipe = cfg = None
    run_dir = run_dir_of(step_dir)
    if module is None and not (run_dir / CONFIG_FILE).is_file() and module_record.exists(run_dir):
        module = _recorded_module(run_dir, overrides)
    if module is None:
        recipe, cfg = load_config(run_dir)
        for key, value in (overrides or {}).items():
            OmegaConf.update(cfg, key, value, force_add=False)
        module = build_module(recipe, cfg)
        trainer = make_trainer(recipe, cfg, strategy, devices)
    elif isinstance(module, PopulationModule):
        size = getattr(module, "population_size", None)
        if not size:
            raise ValueError(f"{type(module).__name__}: set its population size "
                             "(configure_population) to restore a PopulationTrainer's checkpoint")
        trainer = PopulationTrainer(int(size), max_generations=1, strategy=strategy,
                                    devices=devices, logger=False, enable_checkpointing=False,
                                    enable_progress_bar=False, compile_evaluation_ahead=False)
    else:
        trainer = Trainer(max_steps=1, strategy=strategy, devices=devices, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False,
                          compile_evaluation_ahead=False)
    if isinstance(trainer, PopulationTrainer):
        module = trainer.wrap(module)
    return trainer, module, recipe, cfg, step_dir


def load_into(trainer: Any, module: Any, step_dir: Path) -> dict[str, Any]:
    """Check ``module`` against the trainer's devices and load ``step_dir``
    into ``trainer`` (state, root key, counters); returns the checkpoint's metadata.

    Raises:
      ValueError: sizes that do not split over the devices (before anything
        compiles), or arrays that do not match ``module``'s state.
    """
    from jaxtrainer import run_checkpoint

    trainer._prepare(module)  # devices, budget and the module's size checks
    return run_checkpoint.restore(trainer, module, step_dir)


def restore(path: str | os.PathLike, which: str | int | None = None, *,
            overrides: dict[str, Any] | None = None, module: Any = None,
            strategy: Any = "single", devices: Any = "auto") -> Restored:
    """Restore a run's checkpoint into the module that wrote it.

    Args:
      path, which: the checkpoint, as :func:`select_checkpoint` takes them.
      overrides: ``{dotted key: value}`` set in the run's config before the
        module is built.
      module: the module to restore into instead of the one ``config.yaml``
        names (for runs started from Python): a :class:`~jaxtrainer.Module`,
        or a :class:`~jaxtrainer.PopulationModule` of the run's population size.
      strategy, devices: where the state goes (any strategy; the checkpoint
        may have been written under another one, on another device count).

    Raises:
      FileNotFoundError: no checkpoint, or no ``config.yaml`` without ``module``.
      ValueError: as :func:`select_checkpoint`, :func:`load_config` and
        :func:`load_into`.
    """
    trainer, module, recipe, cfg, step_dir = prepare(
        path, which, overrides=overrides, module=module, strategy=strategy, devices=devices)
    meta = load_into(trainer, module, step_dir)
    return Restored(trainer, module, recipe, cfg, step_dir, meta)
