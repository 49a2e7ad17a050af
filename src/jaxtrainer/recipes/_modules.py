"""The module each recipe trains, built from its config in one place.

Every script in ``recipes/`` builds its module with :func:`build_module`, and
``jaxtrainer eval`` / :func:`jaxtrainer.load_policy` rebuild it the same way
from a run's saved ``config.yaml`` (the resolved config plus a top-level
``recipe: <script stem>`` key), so a saved run restores into exactly the module
that wrote it.

>>> cfg = config.load("recipes/configs/ppo.yaml")
>>> module = build_module("ppo", cfg)          # PPO(PPOConfig(env=..., **algorithm), env=...)

Recipes whose module is a :class:`~jaxtrainer.PopulationModule`
(:data:`POPULATION_RECIPES`) train with a
:class:`~jaxtrainer.PopulationTrainer`; the others with a
:class:`~jaxtrainer.Trainer`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from jaxtrainer._arguments import ArgumentError, did_you_mean
from jaxtrainer.module import Module, PopulationModule
from jaxtrainer.recipes import _search as search
from jaxtrainer.recipes import _sweep as sweep
from jaxtrainer.recipes import config


def _from_algorithm(module: str, cls: str) -> Callable[[DictConfig], Module]:
    """The builder of ``jaxtrainer.algorithms.<module>.<cls>``:
    ``cls(<cls>Config(env=cfg.env.name, **cfg.algorithm, network=cfg.network),
    env=make_env(cfg))`` (``network`` where the config has that section).
    ``total_updates`` is left unset where the config has it, so a learning rate
    anneals over the Trainer's budget."""
    def build(cfg: DictConfig) -> Module:
        algorithms = importlib.import_module(f"jaxtrainer.algorithms.{module}")
        config_class = getattr(algorithms, f"{cls}Config")
        kwargs = config.section(cfg, "algorithm")
        if "network" in cfg:
            kwargs["network"] = config.section(cfg, "network")
        built = config_class(env=cfg.env.name, **kwargs)
        return getattr(algorithms, cls)(built, env=config.make_env(cfg))
    build.config_class = (module, f"{cls}Config")
    return build


_ppo = _from_algorithm("ppo", "PPO")
_sac = _from_algorithm("sac", "SAC")


def _neuro_es(cfg: DictConfig) -> PopulationModule:
    from jaxtrainer.algorithms.neuro_es import NeuroES

    algo = config.section(cfg, "algorithm")
    name = algo.pop("name")
    # null means "evosax's default" except for fitness_shaping, where None is a choice
    return NeuroES(config.make_env(cfg), name,
                   **{k: v for k, v in algo.items() if v is not None or k == "fitness_shaping"})


def _on_task(cls: type, cfg: DictConfig) -> PopulationModule:
    """``cls(name, **algorithm, **the env section's other keys)``: a module on a named task."""
    task = config.section(cfg, "env")
    return cls(task.pop("name"), **config.section(cfg, "algorithm"), **task)


def _map_elites(cfg: DictConfig) -> PopulationModule:
    from jaxtrainer.population import MAPElites

    return _on_task(MAPElites, cfg)


def _pga_me(cfg: DictConfig) -> PopulationModule:
    from jaxtrainer.population import PGAME

    return _on_task(PGAME, cfg)


def _me_es(cfg: DictConfig) -> PopulationModule:
    from jaxtrainer.population import MEES

    return _on_task(MEES, cfg)


def _nsga2(cfg: DictConfig) -> PopulationModule:
    from jaxtrainer.population import NSGA2

    return _on_task(NSGA2, cfg)


def _pbt(cfg: DictConfig, member: Module) -> Module:
    """PBT (the ``pbt:`` section) of ``member``, the module one member trains
    (built from ``env:`` and ``algorithm:`` as the recipe without PBT builds it)."""
    from jaxtrainer.population import PBT

    return PBT(member, **config.section(cfg, "pbt"))


def _pbt_ppo(cfg: DictConfig) -> Module:
    # each member's learning rate anneals over the Trainer's budget (PBT.configure_budget)
    return _pbt(cfg, _ppo(cfg))


def _pbt_sac(cfg: DictConfig) -> Module:
    return _pbt(cfg, _sac(cfg))


def _pbt_openes(cfg: DictConfig) -> Module:
    from jaxtrainer.distributed import AXIS_NAME
    from jaxtrainer.population import GenerationModule

    # a member is an ES run (algorithm.population_size solutions a generation);
    # one PBT step is one generation of every member
    es = _neuro_es(cfg)
    return _pbt(cfg, GenerationModule(es, es.population_size, (AXIS_NAME,)))


BUILDERS: dict[str, Callable[[DictConfig], Any]] = {
    "ppo": _ppo,
    "a2c": _from_algorithm("a2c", "A2C"),
    "impala": _from_algorithm("impala", "IMPALA"),
    "dqn": _from_algorithm("dqn", "DQN"),
    "pqn": _from_algorithm("pqn", "PQN"),
    "c51": _from_algorithm("dqn", "DQN"),
    "rainbow": _from_algorithm("dqn", "DQN"),
    "sac": _sac,
    "crossq": _from_algorithm("crossq", "CrossQ"),
    "td3": _from_algorithm("td3", "TD3"),
    "ddpg": _from_algorithm("ddpg", "DDPG"),
    "cem_rl": _from_algorithm("cem_rl", "CEMRL"),
    "cemrl_openes": _from_algorithm("cem_rl", "CEMRL"),
    "erl": _from_algorithm("erl", "ERL"),
    "erl_es": _from_algorithm("erl", "ERL"),
    "erl_eda": _from_algorithm("erl", "ERL"),
    "openes": _neuro_es,
    "cma_es": _neuro_es,
    "map_elites": _map_elites,
    "pga_me": _pga_me,
    "me_es": _me_es,
    "nsga2": _nsga2,
    "pbt_ppo": _pbt_ppo,
    "pbt_cso": _pbt_ppo,
    "pbt_sac": _pbt_sac,
    "pbt_openes": _pbt_openes,
}
"""``recipe name -> builder(cfg)``; the name is the script's stem (``recipes/<name>.py``)."""

POPULATION_RECIPES = frozenset({"openes", "cma_es", "map_elites", "pga_me", "me_es",
                                "nsga2"})
"""Recipes whose module is a :class:`~jaxtrainer.PopulationModule`, trained by a
:class:`~jaxtrainer.PopulationTrainer` (``trainer:`` keys in generations)."""


def documenting_classes(recipe: str) -> tuple[type, ...]:
    """The classes whose arguments are ``recipe``'s sections' keys, as ``--help``
    documents them: the algorithm's config class (``PPOConfig`` for ``ppo`` and
    ``pbt_ppo``), :class:`~jaxtrainer.population.PBT` for the ``pbt_*`` recipes,
    :class:`~jaxtrainer.algorithms.neuro_es.NeuroES` for the ES ones. Imports only those."""
    builder = {"pbt_ppo": _ppo, "pbt_sac": _sac}.get(recipe, BUILDERS.get(recipe))
    where = getattr(builder, "config_class", None)
    found = [getattr(importlib.import_module(f"jaxtrainer.algorithms.{where[0]}"), where[1])] \
        if where else []
    if recipe.startswith("pbt_"):
        from jaxtrainer.population import PBT

        found.append(PBT)
    if builder is _neuro_es or recipe == "pbt_openes":
        from jaxtrainer.algorithms.neuro_es import NeuroES

        found.append(NeuroES)
    if builder is _map_elites:
        from jaxtrainer.population import MAPElites

        found.append(MAPElites)
    if builder is _pga_me:
        from jaxtrainer.population import PGAME

        found.append(PGAME)
    if builder is _me_es:
        from jaxtrainer.population import MEES

        found.append(MEES)
    if builder is _nsga2:
        from jaxtrainer.population import NSGA2

        found.append(NSGA2)
    return tuple(found)


def check_recipe(recipe: str) -> str:
    """``recipe`` if it names a recipe of :data:`BUILDERS`.

    Raises:
      ValueError: an unknown name (the message lists the known ones).
    """
    if not isinstance(recipe, str) or recipe not in BUILDERS:
        hint = did_you_mean(recipe, BUILDERS) if isinstance(recipe, str) else ""
        raise ValueError(f"unknown recipe {recipe!r}{hint or ':'} expected one of "
                         f"{', '.join(sorted(BUILDERS))} (jaxtrainer fit --list)")
    return recipe


def build_module(recipe: str, cfg: DictConfig) -> Module | PopulationModule:
    """The module that ``recipes/<recipe>.py`` trains, from its config ``cfg``
    (a :func:`jaxtrainer.recipes.config.load` result, or a run's saved
    ``config.yaml``): built from the ``env:`` and ``algorithm:`` sections (and
    ``pbt:`` for the ``pbt_*`` recipes; ``map_elites``'s, ``pga_me``'s and ``me_es``'s ``env:`` names their
    quality-diversity task, :func:`jaxtrainer.population.make_task`, and
    ``nsga2``'s its multi-objective task, :func:`jaxtrainer.population.make_mo_task`). Sections the recipe does not use (``trainer:``,
    ``recipe``, loggers, callbacks) are ignored. A ``sweep:`` section asking
    for seeds or a grid wraps the module in a
    :class:`~jaxtrainer.population.Sweep` (:func:`jaxtrainer.recipes._sweep.wrap`).

    Returns:
      A :class:`~jaxtrainer.Module`, or for :data:`POPULATION_RECIPES` a
      :class:`~jaxtrainer.PopulationModule` (:class:`~jaxtrainer.algorithms.neuro_es.NeuroES`,
      :class:`~jaxtrainer.population.MAPElites`, :class:`~jaxtrainer.population.PGAME`,
      :class:`~jaxtrainer.population.MEES`, :class:`~jaxtrainer.population.NSGA2`).

    Raises:
      ValueError: an unknown ``recipe`` (listing the known ones), or what the
        module's config rejects (a bad value, an unknown environment).
      TypeError: an ``algorithm:`` or ``env:`` key the module or environment
        does not take.
    """
    build = BUILDERS[check_recipe(recipe)]
    try:
        module = build(cfg)
    except ArgumentError as e:
        typed = _typed_key(recipe, cfg, e)
        if typed is None:
            raise
        raise e.typed(typed) from None  # algorithm.lr='fast', not PPOConfig.lr='fast'
    return search.wrap(recipe, cfg, sweep.wrap(recipe, cfg, module))


_SECTIONS = ("algorithm", "pbt", "env", "network")
"""The sections whose keys are a recipe module's arguments, first the one that wins
where two hold the same key."""


def _typed_key(recipe: str, cfg: DictConfig, error: ArgumentError) -> str | None:
    """The key of ``cfg`` that ``error``'s argument was typed as (``algorithm.lr``; a
    config class's ``env`` field is ``env.name``, its ``network`` field the ``network``
    section), or ``None`` when it is not one: the error names a field of a class that
    is not the recipe's (:func:`documenting_classes`), or the value is not the one
    typed there."""
    owners = {"", *(c.__name__ for c in documenting_classes(recipe))}
    if error.owner not in owners:
        return None
    if error.key == "env":
        key = "env.name"
    elif error.key in _SECTIONS:
        key = error.key
    else:
        key = next((f"{s}.{error.key}" for s in _SECTIONS
                    if isinstance(cfg.get(s), DictConfig) and error.key in cfg[s]), None)
    if key is None or OmegaConf.select(cfg, f"{key}{error.part}", default=object(),
                                       throw_on_resolution_failure=False) != error.value:
        return None
    return key
