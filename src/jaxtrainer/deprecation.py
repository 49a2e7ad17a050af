"""Old import paths kept working, with a warning, until 0.3.0.

Every module path that moved is listed in :data:`MOVED_MODULES`, old path to new
home. ``import jaxtrainer`` adds one import finder (:class:`MovedModules`) that
answers those old paths only: importing one warns with a ``DeprecationWarning``
naming the new home and gives the new module itself, so the old and the new
name are one module object (``isinstance`` checks and monkeypatching keep
working). ``python -m <old path>`` of a command runs the new one, after a line
on stderr. No file stays at an old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

REMOVED_IN = "0.3.0"
"""The release whose import paths no longer include the old ones."""

MOVED_MODULES = {
    # 0.2.0: populations in one package, checkpoints in one package, no private module names
    "jaxtrainer.algorithms.pbt": "jaxtrainer.population.pbt",
    "jaxtrainer.algorithms.sweep": "jaxtrainer.population.sweep",
    "jaxtrainer.algorithms.population_core": "jaxtrainer.population.members",
    "jaxtrainer.sweep_summary": "jaxtrainer.population.summary",
    "jaxtrainer.runs": "jaxtrainer.compat.runs_v01",  # rundir.runs + 2 old functions
    "jaxtrainer.run_checkpoint": "jaxtrainer.trainer.connectors.checkpoint_connector",
    "jaxtrainer.saved_run": "jaxtrainer.inference.saved_run",
    "jaxtrainer._args": "jaxtrainer.arguments",
    "jaxtrainer.callbacks._monitor": "jaxtrainer.callbacks.monitor",
    # after 0.2.0: the commands in one package
    "jaxtrainer.cli": "jaxtrainer.commands.cli",
    "jaxtrainer.eval_cli": "jaxtrainer.commands.eval_cli",
    "jaxtrainer.eval_run": "jaxtrainer.commands.eval_run",
    "jaxtrainer.envs_cli": "jaxtrainer.commands.envs_cli",
    "jaxtrainer.plot": "jaxtrainer.commands.plot",
    "jaxtrainer.search_plot": "jaxtrainer.commands.search_plot",
    "jaxtrainer.launch": "jaxtrainer.commands.launch",
    "jaxtrainer.render": "jaxtrainer.commands.render",
    "jaxtrainer.recipes.fit": "jaxtrainer.commands.fit",
    "jaxtrainer.recipes.script": "jaxtrainer.commands.script",
    # the Trainer's side of a checkpoint beside the Trainer; checkpoint/ keeps files and runs
    "jaxtrainer.checkpoint.trainer_state": "jaxtrainer.trainer.connectors.checkpoint_connector",
    # floors: the process around a fit in one package
    "jaxtrainer.signals": "jaxtrainer.runtime.signals",
    "jaxtrainer.slurm": "jaxtrainer.runtime.slurm",
    "jaxtrainer.lost_process": "jaxtrainer.runtime.lost_process",
    "jaxtrainer.startup": "jaxtrainer.runtime.startup",
    "jaxtrainer.compilation_cache": "jaxtrainer.runtime.compilation_cache",
    # floors: the run directory in one package (rundir: jaxtrainer.runs is 0.1's path above)
    "jaxtrainer.run_layout": "jaxtrainer.rundir.run_layout",
    "jaxtrainer.run_kind": "jaxtrainer.rundir.run_kind",
    "jaxtrainer.module_record": "jaxtrainer.rundir.module_record",
    "jaxtrainer.storage": "jaxtrainer.rundir.storage",
    "jaxtrainer.checkpoint.run_lock": "jaxtrainer.rundir.run_lock",
    "jaxtrainer.checkpoint.runs": "jaxtrainer.rundir.runs",
    "jaxtrainer.checkpoint.saved_run": "jaxtrainer.inference.saved_run",
    # floors: the Trainer and its fit in one package
    "jaxtrainer.fit_loop": "jaxtrainer.trainer.fit_loop",
    "jaxtrainer.fit_setup": "jaxtrainer.trainer.fit_setup",
    "jaxtrainer.fit_run": "jaxtrainer.trainer.fit_run",
    "jaxtrainer.planner": "jaxtrainer.trainer.planner",
    "jaxtrainer.compile_ahead": "jaxtrainer.trainer.compile_ahead",
    "jaxtrainer.hook_replay": "jaxtrainer.trainer.hook_replay",
    "jaxtrainer.checkpoint_connector": "jaxtrainer.trainer.connectors.checkpoint_connector",
    "jaxtrainer.deferred_import": "jaxtrainer.runtime.deferred_import",
    # a saved run builds its Trainer: above the Trainer, beside the populations
    "jaxtrainer.rundir.saved_run": "jaxtrainer.inference.saved_run",
}
"""Every module path that moved since 0.1.0 and its new home
(``jaxtrainer.runs``: :mod:`jaxtrainer.rundir.runs` with the two functions
the checkpoint resolver replaced, :mod:`jaxtrainer.compat.runs_v01`)."""

_ALGORITHMS = "jaxtrainer.algorithms"
MOVED_NAMES = {
    # the algorithms as pure pieces: names that left a module for the piece's own
    f"{_ALGORITHMS}.onpolicy": {
        **dict.fromkeys(("normalize_advantages", "global_moments"), f"{_ALGORITHMS}.advantages"),
        **dict.fromkeys(("minibatch_epochs", "minibatch_advantage_moments", "CRITIC_ROWS"),
                        f"{_ALGORITHMS}.rollout")},
    f"{_ALGORITHMS}.networks": dict.fromkeys(("Categorical", "MultiCategorical", "LOG_2PI"),
                                             f"{_ALGORITHMS}.distributions"),
    f"{_ALGORITHMS}.offpolicy": {
        **dict.fromkeys(("soft_update", "periodic_soft_update"), f"{_ALGORITHMS}.target_update"),
        **dict.fromkeys(("linear_schedule", "action_scale_bias"), f"{_ALGORITHMS}.exploration")},
}
"""Every name that moved out of a module that still exists, ``{old module: {name: new
module}}``: each such module's ``__getattr__`` is :func:`moved_names` of it."""


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``) that ``old`` is now ``new``."""
    warnings.warn(f"{old} moved to {new}; import it from there (the old path goes in "
                  f"{REMOVED_IN})", DeprecationWarning, stacklevel=stacklevel)


def moved_names(module: str) -> Any:
    """The module-level ``__getattr__`` of ``module``: its names in
    :data:`MOVED_NAMES` are found at the old path with :func:`warn_moved`; any
    other missing name is an AttributeError."""
    moved = MOVED_NAMES[module]

    def __getattr__(name: str) -> Any:
        if name in moved:
            warn_moved(f"{module}.{name}", f"{moved[name]}.{name}")
            return getattr(importlib.import_module(moved[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__


def warn_changed(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``) that the call form ``old`` is now ``new``."""
    warnings.warn(f"{old} is now written {new} (the old form goes in {REMOVED_IN})",
                  DeprecationWarning, stacklevel=stacklevel)


class _Loader(importlib.abc.Loader):
    """Loads an old path as its new module (see :class:`MovedModules`)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warn_moved(self.old, self.new, stacklevel=3)  # the importing line (import frames skipped)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module is imported already."""

    def get_code(self, fullname: str) -> Any:
        """``python -m <old path>``: say where it moved, then run the new one."""
        return compile(f"import sys, runpy\n"
                       f"print({self.old!r} + ' moved to ' + {self.new!r} + ': run python -m ' + "
                       f"{self.new!r} + ' (the old path goes in {REMOVED_IN})', file=sys.stderr)\n"
                       f"runpy.run_module({self.new!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{self.old}>", "exec")


class MovedModules(importlib.abc.MetaPathFinder):
    """The import finder of :data:`MOVED_MODULES`' old paths (nothing else)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(fullname, new))


def install() -> None:
    """Add :class:`MovedModules` to ``sys.meta_path`` once (after the finders
    of real files, so it answers only paths that no file has)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
