"""The ``sweep:`` section of the recipes: many seeds and a hyperparameter grid in
one process and one compiled program (:class:`~jaxtrainer.population.Sweep`).

Every recipe of :data:`SWEEP_RECIPES` takes it, with nothing in its script or
YAML file (:func:`with_section` adds the section when the config is loaded)::

    python recipes/ppo.py sweep.seeds=16                          # seeds 0..15
    python recipes/ppo.py sweep.seeds=4 sweep.hyperparams.lr=[1e-3,3e-3] \\
        sweep.hyperparams.ent_coef=[0.0,0.01]                     # 4 configs x 4 seeds

* ``sweep.seeds``: ``S`` seeds ``trainer.seed .. trainer.seed + S - 1``
  (``null``: no sweep unless ``sweep.hyperparams`` is set, then one seed);
* ``sweep.hyperparams.<name>=[v1,v2,...]``: values of ``algorithm.<name>``, one
  of the module's traced hyperparameters (PPO's, A2C's and PQN's ``TUNABLE``);
  several names make a grid (the Cartesian product, the last name varying
  fastest). Members are configuration-major, seed-minor;
* ``sweep.vectorize``: ``true`` batches each device's members with ``vmap``
  (fast; a member follows its single run exactly for its first updates, then
  rounding differences grow: 58 and 75 updates of the default CartPole PPO),
  ``false`` runs them one after another (bit for bit the single run on XLA:CPU).

The budget keys keep their meaning per member: ``trainer.max_env_steps`` (and
``trainer.max_steps``) are what each member trains for, so a sweep member
trains exactly as the single run ``jaxtrainer fit <name> <the sweep's other
overrides> trainer.seed=<s> algorithm.<name>=<v> trainer.devices=1``, which
reproduces it (:mod:`jaxtrainer.population.sweep`); :class:`MemberHint` prints
that command for the last member when ``fit`` starts. The run also holds
``sweep_members.csv`` and ``sweep_summary.csv``
(:class:`~jaxtrainer.population.summary.SweepSummary`); the summary table is
printed before the recipe's last line, whose ``eval/episode_return`` is then
the mean over the members, with the line before it saying so ("mean over 4 members (seeds 0-3)").
"""

from __future__ import annotations

import shlex
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.recipes import _catalog as catalog

SECTION = "sweep"
SWEEP_RECIPES = frozenset({"ppo", "a2c", "pqn"})
"""Recipes whose module is a single-agent :class:`~jaxtrainer.Module` with traced
hyperparameters (``state.hyperparams``), so their runs can be swept."""

DEFAULTS: dict[str, Any] = {"seeds": None, "hyperparams": {}, "vectorize": True}
"""The section :func:`with_section` adds: no sweep."""


def with_section(cfg: Any, recipe: str | None) -> Any:
    """``cfg`` with a ``sweep:`` section (:data:`DEFAULTS`) when ``recipe`` is in
    :data:`SWEEP_RECIPES` and ``cfg`` (a mapping config) has none."""
    if recipe not in SWEEP_RECIPES or not isinstance(cfg, DictConfig) or SECTION in cfg:
        return cfg
    return OmegaConf.merge(cfg, {SECTION: DEFAULTS})


def is_open_key(dotted: str) -> bool:
    """Whether ``dotted`` names a grid entry, ``sweep.hyperparams.<name>``: keys the
    recipe's YAML does not list (any traced hyperparameter may be swept)."""
    parts = dotted.split(".")
    return len(parts) == 3 and parts[0] == SECTION and parts[1] == "hyperparams" and bool(parts[2])


def active(cfg: DictConfig) -> bool:
    """Whether ``cfg`` asks for a sweep (``sweep.seeds`` or ``sweep.hyperparams`` set)."""
    node = cfg.get(SECTION) if isinstance(cfg, DictConfig) else None
    return isinstance(node, DictConfig) and (node.get("seeds") is not None
                                             or bool(node.get("hyperparams")))


def wrap(recipe: str, cfg: DictConfig, module: Any) -> Any:
    """``module``, or the :class:`~jaxtrainer.population.Sweep` of it that
    ``cfg``'s ``sweep:`` section asks for (seeds from ``trainer.seed`` on).

    Raises:
      ValueError: a sweep asked of a recipe outside :data:`SWEEP_RECIPES`,
        ``sweep.seeds`` that is not an int >= 1, a ``sweep.hyperparams`` entry
        that is not a list or names no ``algorithm:`` key (the message lists
        them), or what :class:`~jaxtrainer.population.Sweep` rejects.
    """
    if not active(cfg):
        return module
    catalog.refuse_recipe(recipe, "sweep (sweep.seeds, sweep.hyperparams)", SWEEP_RECIPES)
    from jaxtrainer.population.sweep import Sweep

    node = cfg[SECTION]
    seeds = node.get("seeds")
    seeds = 1 if seeds is None else seeds
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"sweep.seeds={seeds!r}: expected a number of seeds >= 1, e.g. "
                         "sweep.seeds=16")
    grid = {}
    algorithm = cfg.get("algorithm") or {}
    for name, values in (node.get("hyperparams") or {}).items():
        if not isinstance(values, ListConfig):
            raise ValueError(f"sweep.hyperparams.{name}={values!r}: expected a list of values, "
                             f"e.g. sweep.hyperparams.{name}=[1e-3,3e-3]")
        if name not in algorithm:
            raise catalog.unknown_algorithm_key(f"sweep.hyperparams.{name}", name, algorithm,
                                                module)
        grid[str(name)] = list(OmegaConf.to_container(values, resolve=True))
    first = int(cfg.trainer.get("seed", 0) or 0)
    return Sweep(module, seeds=list(range(first, first + seeds)), hyperparams=grid,
                 vectorize=node.get("vectorize", True))


NOT_REPEATED = ("sweep.", "trainer.seed", "trainer.devices", "trainer.ckpt_path")
"""Settings the "member alone" command does not repeat: the sweep itself, and
what it sets for the member (its seed, one device) or must not (a resume)."""


def override_text(value: Any) -> str:
    """``value`` as the right-hand side of a ``key=value`` override:
    ``true``, ``null``, ``0.001``, ``4``, ``[64,64]``, ``CartPole-v1``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(override_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{override_text(v)}" for k, v in value.items()) + "}"
    return repr(value) if isinstance(value, float) else str(value)


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: value}`` of a plain nested dict (lists are values)."""
    if not isinstance(node, dict) or not node:
        return {prefix: node} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def changed_settings(cfg: DictConfig, recipe: str) -> list[str]:
    """Every setting of ``cfg`` that differs from ``recipe``'s shipped config
    (what the command line and a ``--config`` file changed), as ``key=value``
    overrides in the config's order, less :data:`NOT_REPEATED`."""
    from jaxtrainer.recipes import _search as search
    from jaxtrainer.recipes._catalog import config_file

    sections = search.with_section(with_section(OmegaConf.load(config_file(recipe)), recipe), recipe)
    default = _leaves(OmegaConf.to_container(sections, resolve=True))
    now = _leaves(OmegaConf.to_container(cfg, resolve=True))
    return [f"{key}={override_text(value)}" for key, value in now.items()
            if not key.startswith(NOT_REPEATED) and (key not in default or default[key] != value)]


def member_command(recipe: str, member: dict[str, Any], names: tuple[str, ...],
                   changed: list[str]) -> str:
    """The shell command that trains ``member`` (:meth:`Sweep.member`) alone:
    ``jaxtrainer fit <recipe>``, the settings ``changed`` (the swept
    hyperparameters replaced by the member's values), its seed and
    ``trainer.devices=1``, each shell-quoted."""
    swept = {f"algorithm.{n}" for n in names}
    items = [c for c in changed if c.split("=", 1)[0] not in swept]
    items += [f"trainer.seed={member['seed']}",
              *(f"algorithm.{n}={override_text(member[n])}" for n in names), "trainer.devices=1"]
    return " ".join(["jaxtrainer", "fit", recipe, *(shlex.quote(i) for i in items)])


class MemberHint(Callback):
    """At the start of a recipe sweep's ``fit`` (global-zero process), one line:
    the member count, the configurations and seeds, and the command that trains
    the last member alone (:func:`member_command`, with every setting the run
    changed from the recipe's config, read from the recipe's
    :class:`~jaxtrainer.recipes._command.RunRecord`)."""

    def __init__(self, recipe: str | None) -> None:
        self.recipe = recipe

    def needs_state(self, trainer: Any, module: Any, step: int) -> bool:
        return False

    def setup(self, trainer: Any, module: Any, stage: str) -> None:
        from jaxtrainer.recipes._command import RunRecord

        if stage != "fit" or not trainer.is_global_zero:
            return
        record = next((cb for cb in trainer.callbacks if isinstance(cb, RunRecord)), None)
        recipe = self.recipe or (record.recipe if record else None) or "<recipe>"
        changed = changed_settings(record.cfg, recipe) if record and recipe != "<recipe>" else []
        last = module.member(module.population_size - 1)
        print(f"jaxtrainer: sweep of {module.population_size} members ({len(module.configs)} "
              f"configuration(s) x {len(module.seeds)} seeds {module.seeds[0]}.."
              f"{module.seeds[-1]}) in one program; member i alone, e.g. the last: "
              f"{member_command(recipe, last, module.hyperparam_names, changed)}", flush=True)


def before_fit(trainer: Any, module: Any, recipe: str | None) -> None:
    """Prepare ``trainer`` for a sweep ``module`` (nothing for any other module;
    its budget is each member's already, :func:`jaxtrainer.recipes.config.make_trainer`):
    a :class:`~jaxtrainer.population.summary.SweepSummary` is added unless one is
    there, and a :class:`MemberHint` says, when ``fit`` starts, how many members
    train and how to rerun one of them alone."""
    from jaxtrainer.population.summary import SweepSummary
    from jaxtrainer.population.sweep import Sweep

    if not isinstance(module, Sweep):
        return
    if not any(isinstance(cb, SweepSummary) for cb in trainer.callbacks):
        trainer.add_callback(SweepSummary())
    if not any(isinstance(cb, MemberHint) for cb in trainer.callbacks):
        trainer.add_callback(MemberHint(recipe))


def final_note(module: Any) -> str:
    """For the line before a recipe's last: ``" (mean over 4 members (seeds 0-3))"`` for a
    sweep (:meth:`~jaxtrainer.population.Sweep.averaged`), ``""`` otherwise."""
    from jaxtrainer.population.sweep import Sweep

    return f" ({module.averaged()})" if isinstance(module, Sweep) else ""
