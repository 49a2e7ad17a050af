"""A saved run, read back: its config, and its state restored into the module
that wrote it, on the devices of any strategy, whatever strategy wrote it; and
the trained policy of a saved run (:func:`load_policy`).

A run holds what rebuilds its module::

    <run_dir>/config.yaml     a run a recipe started: the resolved config + "recipe: <name>"
    <run_dir>/module.yaml     a run started from Python (jaxtrainer.rundir.module_record)

A recipe's config is turned back into its module by the builder registered
under the ``jaxtrainer.run_builders`` entry-point group (the recipes register
theirs; this package never imports them), a run started from Python by
importing the module's class. Which checkpoint a path names is
:func:`jaxtrainer.checkpoint.resolve`'s. Used by ``jaxtrainer eval`` and
:func:`load_policy`.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import jax
from omegaconf import DictConfig, OmegaConf

from jaxtrainer.checkpoint.resolve import resolve, run_dir_of
from jaxtrainer.inference.export import export_policy
from jaxtrainer.module import Members, PopulationModule, members_of
from jaxtrainer.policy import Policy, RecurrentPolicy, params_of
from jaxtrainer.population import PopulationTrainer
from jaxtrainer.rundir import module_record
from jaxtrainer.rundir.run_layout import CONFIG_FILE
from jaxtrainer.trainer import Trainer
from jaxtrainer.trainer.budget import Budget

_BUILDER_GROUP = "jaxtrainer.run_builders"
"""The entry-point group of builders ``(recipe: str, cfg: DictConfig) -> Module``
that turn a run's ``config.yaml`` back into its module (jaxtrainer's recipes
register ``recipes``); a builder raises ValueError for a recipe it does not know."""


def load_config(run_dir: str | os.PathLike) -> tuple[str, DictConfig]:
    """``(recipe, config)`` from ``<run_dir>/config.yaml``; the ``recipe`` key is
    taken out of the config.

    Raises:
      FileNotFoundError: no ``config.yaml`` (runs started from Python have
        none: rebuild the module and pass it, e.g. ``load_policy(path, module=...)``).
      ValueError: the file has no ``recipe`` key.
    """
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
    return str(cfg.pop("recipe")), cfg


def build_module(recipe: str, cfg: DictConfig) -> Any:
    """The module ``recipe`` trains, from a run's config, by the registered
    builders (:data:`_BUILDER_GROUP`): the first that knows ``recipe``.

    Raises:
      ValueError: no builder knows ``recipe`` (the last builder's message, which
        lists the recipes it knows), or none is registered (jaxtrainer is not
        installed: ``pip install -e .``).
    """
    builders = sorted(metadata.entry_points(group=_BUILDER_GROUP), key=lambda ep: ep.name)
    if not builders:
        raise ValueError(f"no builder of recipe runs is registered (entry points {_BUILDER_GROUP!r}):"
                         " install jaxtrainer (pip install jaxtrainer, or pip install -e . in a "
                         f"checkout) to restore the run of recipe {recipe!r}")
    error: ValueError | None = None
    for entry in builders:
        try:
            return entry.load()(recipe, cfg)
        except ValueError as e:
            if f"unknown recipe {recipe!r}" not in str(e):
                raise
            error = e
    raise error


def _trainer_value(cfg: DictConfig, key: str) -> Any:
    section = cfg.get("trainer")
    return section.get(key) if isinstance(section, DictConfig) else None


def make_trainer(module: Any, cfg: DictConfig | None, strategy: Any = "single",
                 devices: Any = "auto") -> Any:
    """A Trainer to restore and evaluate ``module`` (a
    :class:`~jaxtrainer.PopulationTrainer` for a
    :class:`~jaxtrainer.PopulationModule`, with the module's or the config's
    population size): the run's budget where ``cfg`` gives it (so that
    schedules match the run's; a sweep's or a search's ``max_env_steps`` per
    member, as in a recipe), no loggers, checkpointing, progress bar or
    background compile, on ``strategy``/``devices``.

    Without a budget the Trainer gets ``max_steps=1`` (it requires one; only
    schedules read it, never the evaluation).

    Raises:
      ValueError: a population module without a population size.
    """
    cfg = cfg if cfg is not None else OmegaConf.create({})
    quiet = dict(strategy=strategy, devices=devices, logger=False, enable_checkpointing=False,
                 enable_progress_bar=False, compile_evaluation_ahead=False)
    if isinstance(module, PopulationModule):
        size = _trainer_value(cfg, "population_size") or module.population_size
        if not size:
            raise ValueError(f"{type(module).__name__}: set its population size "
                             "(configure_population) to restore a PopulationTrainer's checkpoint")
        extra = {k: _trainer_value(cfg, k) for k in ("member_map", "map_batch_size")
                 if _trainer_value(cfg, k) is not None}
        return PopulationTrainer(int(size), max_generations=_trainer_value(cfg, "max_generations") or 1,
                                 **extra, **quiet)
    max_steps, max_env_steps = _trainer_value(cfg, "max_steps"), _trainer_value(cfg, "max_env_steps")
    if max_steps is None:  # a search of an ES recipe: a training step is a generation
        max_steps = _trainer_value(cfg, "max_generations")
    per_member, share = (module.budget_per_member, module.budget_share) if isinstance(module, Members) \
        else (False, 1)  # a recipe's sweep or search: each member's budget
    budget = Budget(max_steps, max_env_steps, per_member=per_member, share=share)
    return Trainer(budget=budget if budget.is_set else Budget(max_steps=1), **quiet)


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
    """The module of a run started from Python (:mod:`jaxtrainer.rundir.module_record`);
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
    step_dir = resolve(path, which)
    recipe = cfg = None
    run_dir = run_dir_of(step_dir)
    if module is None and not (run_dir / CONFIG_FILE).is_file() and module_record.exists(run_dir):
        module = _recorded_module(run_dir, overrides)
    if module is None:
        recipe, cfg = load_config(run_dir)
        for key, value in (overrides or {}).items():
            OmegaConf.update(cfg, key, value, force_add=False)
        module = build_module(recipe, cfg)
    trainer = make_trainer(module, cfg, strategy, devices)
    if isinstance(module, PopulationModule):
        module = trainer.wrap(module)
    return trainer, module, recipe, cfg, step_dir


def load_into(trainer: Any, module: Any, step_dir: Path) -> dict[str, Any]:
    """Check ``module`` against the trainer's devices and load ``step_dir``
    into ``trainer`` (state, root key, counters); returns the checkpoint's metadata.

    Raises:
      ValueError: sizes that do not split over the devices (before anything
        compiles), or arrays that do not match ``module``'s state.
    """
    trainer.prepare(module)  # devices, budget and the module's size checks
    return trainer.restore_checkpoint(module, step_dir)


def restore(path: str | os.PathLike, which: str | int | None = None, *,
            overrides: dict[str, Any] | None = None, module: Any = None,
            strategy: Any = "single", devices: Any = "auto") -> Restored:
    """Restore a run's checkpoint into the module that wrote it.

    Args:
      path, which: the checkpoint, as :func:`jaxtrainer.checkpoint.resolve` takes them.
      overrides: ``{dotted key: value}`` set in the run's config before the
        module is built.
      module: the module to restore into instead of the one ``config.yaml``
        names (for runs started from Python): a :class:`~jaxtrainer.Module`,
        or a :class:`~jaxtrainer.PopulationModule` of the run's population size.
      strategy, devices: where the state goes (any strategy; the checkpoint
        may have been written under another one, on another device count).

    Raises:
      FileNotFoundError: no checkpoint, or no ``config.yaml`` without ``module``.
      ValueError: as :func:`jaxtrainer.checkpoint.resolve`, :func:`load_config` and
        :func:`load_into`.
    """
    trainer, module, recipe, cfg, step_dir = prepare(
        path, which, overrides=overrides, module=module, strategy=strategy, devices=devices)
    meta = load_into(trainer, module, step_dir)
    return Restored(trainer, module, recipe, cfg, step_dir, meta)


def load_policy(path: str | os.PathLike, ckpt: str | int | None = None, *,
                module: Any = None, member: int | None = None) -> Policy:
    """Load a trained policy from a run directory or a checkpoint directory.

    The module is rebuilt from the run's ``config.yaml`` (written by the
    recipes; :func:`jaxtrainer.recipes._modules.build_module`) and the
    checkpoint restored onto one device, whatever strategy and device count
    wrote it (the arrays are stored as one logical copy).

    Args:
      path: a run directory (``runs/ppo/version_0``), its ``checkpoints``
        directory, or one step directory (``.../checkpoints/976``).
      ckpt: ``None`` (the step directory ``path`` names, else the newest),
        ``"last"``, ``"best"`` (best by the metric a
        ``ModelCheckpoint(monitor=...)`` ranked on) or a step number.
      module: the module to restore into, for runs without ``config.yaml``
        (started from Python): built as for training (a
        :class:`~jaxtrainer.PopulationModule` with its population size).
      member: for PBT and sweep runs, the member whose policy to load (a
        sweep's member ``i`` is configuration ``i // seeds``, seed
        ``i % seeds``); default PBT's best member, a sweep's member 0 (the
        policy's ``member`` says which).

    Returns:
      A :class:`~jaxtrainer.Policy`: ``act(obs, key=None) -> action``, jitted; see its
      docstring for shapes and dtypes. For a policy with memory (a recurrent
      ``network.core``) a :class:`~jaxtrainer.RecurrentPolicy`: ``act(obs, carry,
      key=None) -> (action, carry)``.

    Raises:
      FileNotFoundError: no checkpoint there, or no ``config.yaml`` and no
        ``module``.
      ValueError: a bad ``ckpt`` or ``member`` (before anything is loaded), or a
        checkpoint that does not match the module.
      TypeError: a module that exposes no policy.
    """
    trainer, module, _, _, step_dir = prepare(path, ckpt, module=module, strategy="single",
                                              devices=1)
    population = members_of(module)
    _check_member(module, member)  # before anything is loaded
    load_into(trainer, module, step_dir)
    if population is not None and member is None:
        member = population.default_member(trainer.state)
    spec, params = params_of(module, trainer.state, member)
    params = jax.device_put(jax.device_get(params))  # on the default device, no sharding ties
    cls = Policy if spec.initial_carry is None else RecurrentPolicy
    return cls(spec, params, step_dir, trainer.global_step, trainer.env_steps, member,
               exporter=export_policy)


def _check_member(module: Any, member: int | None) -> None:
    """Check ``member`` against the population ``module`` is or wraps (PBT, a
    sweep, a search); ``None`` (its default member) always passes.

    Raises:
      ValueError: ``member`` is not an index in ``[0, population_size)``, or
        is given for a module without members (naming it).
    """
    if member is None:
        return
    population = members_of(module)
    if population is None:
        raise ValueError(f"member={member!r}: {type(module).__name__} is one agent, not a "
                         "population of members (PBT, a sweep or a search)")
    size = population.population_size
    if isinstance(member, bool) or not isinstance(member, int) or not 0 <= member < size:
        raise ValueError(f"member={member!r}: expected an index in [0, {size}) (the run's "
                         f"{size} members)")
