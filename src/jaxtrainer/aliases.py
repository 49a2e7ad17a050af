"""Paths found at a second place: moved paths (with a warning, until 0.3.0) and
EvoRL's paths (kept).

One table, :data:`ALIASES`, maps each such path to where it lives now, for
module paths and for names alike; nothing else in the package loads a name from
elsewhere. ``import jaxtrainer`` adds one import finder (:class:`_AliasFinder`)
that answers the table's module paths only, and a module whose names moved out
(or a package that shows another package's names, as ``jaxtrainer.distributed``
shows EvoRL's) gets its ``__getattr__`` from :func:`attach`. A moved path warns
with a ``DeprecationWarning`` naming the new home; either way the old and the
new path give one object (``isinstance`` checks and monkeypatching keep
working). ``python -m <old path>`` of a command runs the new one, after a line
on stderr. No file stays at an old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

REMOVED_IN = "0.3.0"
"""The release whose import paths no longer include the moved ones."""


class Kept(str):
    """A path kept for good (a compatibility path such as EvoRL's), found without a
    warning; a plain string in :data:`ALIASES` is a moved path, found with a
    ``DeprecationWarning`` until :data:`REMOVED_IN`."""


ALIASES: dict[str, str] = {
    # ---- module paths that moved (0.2.0: populations in one package, checkpoints in one
    # package, no private module names)
    # 0.2.0: populations in one package, checkpoints in one package, no private module names
    "jaxtrainer.algorithms.pbt": "jaxtrainer.population.pbt",
    "jaxtrainer.algorithms.sweep": "jaxtrainer.population.sweep",
    "jaxtrainer.algorithms.population_core": "jaxtrainer.population.members",
    "jaxtrainer.sweep_summary": "jaxtrainer.population.summary",
    "jaxtrainer.runs": "jaxtrainer.compat.runs_v01",  # rundir.runs + 2 old functions
    "jaxtrainer.run_checkpoint": "jaxtrainer.trainer._connectors.checkpoint_connector",
    "jaxtrainer.saved_run": "jaxtrainer.inference.saved_run",
    "jaxtrainer._args": "jaxtrainer._arguments",
    "jaxtrainer.callbacks._monitor": "jaxtrainer.callbacks.monitor",
    # after 0.2.0: the commands in one package
    "jaxtrainer.cli": "jaxtrainer.commands._cli",
    "jaxtrainer.eval_cli": "jaxtrainer.commands._eval_cli",
    "jaxtrainer.eval_run": "jaxtrainer.commands._eval_run",
    "jaxtrainer.envs_cli": "jaxtrainer.commands._envs_cli",
    "jaxtrainer.plot": "jaxtrainer.commands._plot",
    "jaxtrainer.search_plot": "jaxtrainer.commands._search_plot",
    "jaxtrainer.launch": "jaxtrainer.commands._launch",
    "jaxtrainer.render": "jaxtrainer.commands._render",
    "jaxtrainer.recipes.fit": "jaxtrainer.commands.fit",
    "jaxtrainer.recipes.script": "jaxtrainer.commands.script",
    # the Trainer's side of a checkpoint beside the Trainer; checkpoint/ keeps files and runs
    "jaxtrainer.checkpoint.trainer_state": "jaxtrainer.trainer._connectors.checkpoint_connector",
    # floors: the process around a fit in one package
    "jaxtrainer.signals": "jaxtrainer.runtime._signals",
    "jaxtrainer.slurm": "jaxtrainer.runtime._slurm",
    "jaxtrainer.lost_process": "jaxtrainer.runtime._lost_process",
    "jaxtrainer.startup": "jaxtrainer.runtime._startup",
    "jaxtrainer.compilation_cache": "jaxtrainer.runtime.compilation_cache",
    # floors: the run directory in one package (rundir: jaxtrainer.runs is 0.1's path above)
    "jaxtrainer.run_layout": "jaxtrainer.rundir.run_layout",
    "jaxtrainer.run_kind": "jaxtrainer.rundir._run_kind",
    "jaxtrainer.module_record": "jaxtrainer.rundir.module_record",
    "jaxtrainer.storage": "jaxtrainer.rundir.storage",
    "jaxtrainer.checkpoint.run_lock": "jaxtrainer.rundir._run_lock",
    "jaxtrainer.checkpoint.runs": "jaxtrainer.rundir.runs",
    "jaxtrainer.checkpoint.saved_run": "jaxtrainer.inference.saved_run",
    # floors: the Trainer and its fit in one package
    "jaxtrainer.fit_loop": "jaxtrainer.trainer._fit_loop",
    "jaxtrainer.fit_setup": "jaxtrainer.trainer._fit_setup",
    "jaxtrainer.fit_run": "jaxtrainer.trainer._fit_run",
    "jaxtrainer.planner": "jaxtrainer.trainer._planner",
    "jaxtrainer.compile_ahead": "jaxtrainer.trainer._compile_ahead",
    "jaxtrainer.hook_replay": "jaxtrainer.trainer._hook_replay",
    "jaxtrainer.checkpoint_connector": "jaxtrainer.trainer._connectors.checkpoint_connector",
    "jaxtrainer.deferred_import": "jaxtrainer.runtime._deferred_import",
    # a saved run builds its Trainer: above the Trainer, beside the populations
    "jaxtrainer.rundir.saved_run": "jaxtrainer.inference.saved_run",
    # one table of paths found at a second place
    "jaxtrainer.deprecation": "jaxtrainer.aliases",
    # ---- names that moved out of a module that still exists
    "jaxtrainer.algorithms:PBT": "jaxtrainer.population:PBT",
    "jaxtrainer.algorithms:PBTState": "jaxtrainer.population:PBTState",
    "jaxtrainer.algorithms:Hyperparam": "jaxtrainer.population:Hyperparam",
    "jaxtrainer.algorithms:Sweep": "jaxtrainer.population:Sweep",
    "jaxtrainer.algorithms:SweepState": "jaxtrainer.population:SweepState",
    # the algorithms as pure pieces: names that left a module for the piece's own
    # NeuroES in its own module (es.py over the 500-line cap)
    "jaxtrainer.algorithms.es:NeuroES": "jaxtrainer.algorithms.neuro_es:NeuroES",
    "jaxtrainer.algorithms.es:MLPPolicy": "jaxtrainer.algorithms.neuro_es:MLPPolicy",
    "jaxtrainer.algorithms.es:EPISODE_LOOPS": "jaxtrainer.algorithms.neuro_es:EPISODE_LOOPS",
    "jaxtrainer.algorithms.onpolicy:normalize_advantages": "jaxtrainer.algorithms.advantages:normalize_advantages",
    "jaxtrainer.algorithms.onpolicy:global_moments": "jaxtrainer.algorithms.advantages:global_moments",
    "jaxtrainer.algorithms.onpolicy:minibatch_epochs": "jaxtrainer.algorithms.rollout:minibatch_epochs",
    "jaxtrainer.algorithms.onpolicy:minibatch_advantage_moments": "jaxtrainer.algorithms.rollout:minibatch_advantage_moments",
    "jaxtrainer.algorithms.onpolicy:CRITIC_ROWS": "jaxtrainer.algorithms.rollout:CRITIC_ROWS",
    "jaxtrainer.algorithms.networks:Categorical": "jaxtrainer.algorithms.distributions:Categorical",
    "jaxtrainer.algorithms.networks:MultiCategorical": "jaxtrainer.algorithms.distributions:MultiCategorical",
    "jaxtrainer.algorithms.networks:LOG_2PI": "jaxtrainer.algorithms.distributions:LOG_2PI",
    "jaxtrainer.algorithms.onpolicy:check_gae_fields": "jaxtrainer.algorithms.advantages:check_gae_fields",
    "jaxtrainer.algorithms.onpolicy:CRITIC_INPUTS": "jaxtrainer.algorithms.advantages:CRITIC_INPUTS",
    "jaxtrainer.algorithms.onpolicy:check_minibatch_fields": "jaxtrainer.algorithms.rollout:check_minibatch_fields",
    "jaxtrainer.algorithms.offpolicy:soft_update": "jaxtrainer.algorithms.target_update:soft_update",
    "jaxtrainer.algorithms.offpolicy:periodic_soft_update": "jaxtrainer.algorithms.target_update:periodic_soft_update",
    "jaxtrainer.algorithms.offpolicy:linear_schedule": "jaxtrainer.algorithms.exploration:linear_schedule",
    "jaxtrainer.algorithms.offpolicy:action_scale_bias": "jaxtrainer.algorithms.exploration:action_scale_bias",
    # ---- EvoRL's ``evorl.distributed`` at jaxtrainer's path, kept: code written against
    # EvoRL runs with its imports changed (``jaxtrainer.compat.evorl`` implements it)
    "jaxtrainer.distributed.comm": Kept("jaxtrainer.compat.evorl.comm"),
    "jaxtrainer.distributed.gradients": Kept("jaxtrainer.compat.evorl.gradients"),
    "jaxtrainer.distributed.sharding": Kept("jaxtrainer.compat.evorl.sharding"),
    "jaxtrainer.distributed:PMAP_AXIS_NAME": Kept("jaxtrainer.compat.evorl:PMAP_AXIS_NAME"),
    "jaxtrainer.distributed:POP_AXIS_NAME": Kept("jaxtrainer.compat.evorl:POP_AXIS_NAME"),
    "jaxtrainer.distributed:agent_gradient_update": Kept("jaxtrainer.compat.evorl:agent_gradient_update"),
    "jaxtrainer.distributed:all_gather": Kept("jaxtrainer.compat.evorl:all_gather"),
    "jaxtrainer.distributed:get_global_ranks": Kept("jaxtrainer.compat.evorl:get_global_ranks"),
    "jaxtrainer.distributed:get_process_id": Kept("jaxtrainer.compat.evorl:get_process_id"),
    "jaxtrainer.distributed:gradient_update": Kept("jaxtrainer.compat.evorl:gradient_update"),
    "jaxtrainer.distributed:is_dist_initialized": Kept("jaxtrainer.compat.evorl:is_dist_initialized"),
    "jaxtrainer.distributed:loss_and_pgrad": Kept("jaxtrainer.compat.evorl:loss_and_pgrad"),
    "jaxtrainer.distributed:shmap_map": Kept("jaxtrainer.compat.evorl:shmap_map"),
    "jaxtrainer.distributed:shmap_vmap": Kept("jaxtrainer.compat.evorl:shmap_vmap"),
    "jaxtrainer.distributed:split_key_to_devices": Kept("jaxtrainer.compat.evorl:split_key_to_devices"),
    "jaxtrainer.distributed:tree_device_put": Kept("jaxtrainer.compat.evorl:tree_device_put"),
    "jaxtrainer.distributed:unpmap": Kept("jaxtrainer.compat.evorl:unpmap"),
}
"""Every path found at a second place: ``old -> new``. A module path is dotted
(``"jaxtrainer.fit_loop"``); a name in a module is ``"module:name"``
(``"jaxtrainer.algorithms:PBT"``). Module paths are answered by the import
finder (:func:`install`), names by the module-level ``__getattr__`` that
:func:`attach` makes for the module they are looked up in."""


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``) that ``old`` is now ``new``; where ``new`` is a
    private module, that it is internal (what to use is the public API)."""
    if any(part.startswith("_") for part in new.split(".")[1:]):
        advice = ("internal: use the public API (docs/reference/api.txt; the jaxtrainer "
                  "command for a command's module)")
    else:
        advice = "import it from there"
    warnings.warn(f"{old} moved to {new}; {advice} (the old path goes in {REMOVED_IN})",
                  DeprecationWarning, stacklevel=stacklevel)


def _split(path: str) -> tuple[str, str]:
    module, _, name = path.partition(":")
    return module, name


def _resolve(old: str, new: str, stacklevel: int) -> Any:
    """The object at ``new`` (a module path or ``module:name``), after the
    warning a moved path gets."""
    if not isinstance(new, Kept):
        warn_moved(old.replace(":", "."), new.replace(":", "."), stacklevel=stacklevel + 1)
    module, name = _split(new)
    found = importlib.import_module(module)
    return getattr(found, name) if name else found


def names_of(module: str) -> dict[str, str]:
    """``{name: new path}`` of the names :data:`ALIASES` lists in ``module``."""
    return {_split(old)[1]: new for old, new in ALIASES.items()
            if ":" in old and _split(old)[0] == module}


def attach(module: str, fallback: Callable[[str], Any] | None = None,
           fallback_dir: Callable[[], list[str]] | None = None
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``module`` (PEP 562): its names in
    :data:`ALIASES` are found there (a moved one with :func:`warn_moved`); any
    other missing name goes to ``fallback`` (``lazy_loader``'s ``__getattr__`` of a
    package) or is an AttributeError.

    Raises:
      ValueError: :data:`ALIASES` lists no name in ``module``.
    """
    aliased = names_of(module)
    if not aliased:
        raise ValueError(f"aliases.attach({module!r}): the table lists no name in {module!r}")

    def __getattr__(name: str) -> Any:
        if name in aliased:
            value = _resolve(f"{module}:{name}", aliased[name], stacklevel=3)
            if isinstance(aliased[name], Kept):  # found for good: found directly from now on
                setattr(sys.modules[module], name, value)
            return value
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        own = fallback_dir() if fallback_dir is not None else list(vars(sys.modules[module]))
        return sorted({*own, *aliased})

    return __getattr__, __dir__


def warn_changed(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``) that the call form ``old`` is now ``new``."""
    warnings.warn(f"{old} is now written {new} (the old form goes in {REMOVED_IN})",
                  DeprecationWarning, stacklevel=stacklevel)


class _Loader(importlib.abc.Loader):
    """Loads an aliased module path as its module (see :class:`_AliasFinder`)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # the warning names the importing line (the import system's frames are skipped)
        return _resolve(self.old, self.new, stacklevel=3)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is imported already."""

    def get_code(self, fullname: str) -> Any:
        """``python -m <old path>``: say where it moved, then run the new one."""
        new = str(self.new)
        run = ("the jaxtrainer command (python -m jaxtrainer)"
               if any(part.startswith("_") for part in new.split(".")[1:]) else f"python -m {new}")
        return compile(f"import sys, runpy\n"
                       f"print({self.old!r} + ' moved to ' + {new!r} + ': run ' + {run!r} + "
                       f"' (the old path goes in {REMOVED_IN})', file=sys.stderr)\n"
                       f"runpy.run_module({str(self.new)!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{self.old}>", "exec")


class _AliasFinder(importlib.abc.MetaPathFinder):
    """The import finder of :data:`ALIASES`' module paths (nothing else)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        new = ALIASES.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(fullname, new))


def install() -> None:
    """Add :class:`_AliasFinder` to ``sys.meta_path`` once (after the finders
    of real files, so it answers only paths that no file has)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
