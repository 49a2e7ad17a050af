"""Run directories: where a new run writes (which run a checkpoint belongs to is
:func:`jaxtrainer.checkpoint.resolve.run_dir_of`, which reads its metadata).

A run directory is ``<default_root_dir>/version_<n>``; it holds the run's
checkpoints directories (``checkpoints``, ``checkpoints_1``, ...), its logs, and
what rebuilds its module: ``config.yaml`` (a run a recipe started) or
``module.yaml`` (:mod:`jaxtrainer.rundir.module_record`, a run started from Python).
"""

from __future__ import annotations

import os
from pathlib import Path

from jaxtrainer._arguments import ArgumentError
from jaxtrainer.rundir import run_layout, storage

CONFIG_FILE = run_layout.CONFIG_FILE
"""The run directory's config file (written by the recipes)."""


def run_files(path: str | os.PathLike) -> list[str]:
    """The files of a run that directory ``path`` holds when it is named ``version_<n>``
    (``config.yaml``, ``checkpoints``, ...): ``[]`` for a root of runs (or no directory)."""
    path = Path(path)
    if not (path.name.startswith("version_") and path.name[8:].isdigit()):
        return []
    return [name for name in (CONFIG_FILE, run_layout.MODULE_FILE, run_layout.METRICS_FILE,
                              run_layout.CHECKPOINTS_DIR, run_layout.LOCK_FILE)
            if (path / name).exists()]


def root_of_runs(root: str) -> str:
    """``root`` (a Trainer's ``default_root_dir``), checked not to be a run directory:
    its runs would go inside that run (``version_0/version_0``).

    Raises:
      ValueError: naming the value, a root of runs and how that run is resumed.
    """
    held = run_files(root)
    if held:
        raise ArgumentError(
            "default_root_dir", root,
            f": is a run directory (it holds {', '.join(held)}); expected a root of runs, e.g. "
            f"{os.path.dirname(os.path.normpath(root)) or '.'!r} (each run goes to "
            f"<root>/version_<n>); to resume that run: fit(module, ckpt_path={root!r})")
    return root


def new_run_dir(root: str | os.PathLike, create: bool = True) -> str:
    """Create and return ``<root>/version_<n>`` for a new run, ``n`` one past
    the highest taken. The directory is created exclusively, so runs started at
    the same instant in one root (several processes, or several machines on a
    shared filesystem) each get their own: one that loses the race takes the
    next number. ``create=False`` (a run that writes nothing): the name alone,
    nothing made.

    Raises:
      jaxtrainer.rundir.storage.StorageError: ``root`` or the run directory cannot be
        created (a read-only or unwritable directory, a full disk), naming
        the directory and the OS error.
    """
    root = Path(root)
    if not create:
        taken = [int(p.name[8:]) for p in root.glob("version_*") if p.name[8:].isdigit()]
        return os.fspath(root / f"version_{max(taken, default=-1) + 1}")
    with storage.writing("the root of runs", root):
        root.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[8:]) for p in root.glob("version_*") if p.name[8:].isdigit()]
    n = max(taken, default=-1) + 1
    while True:
        run = root / f"version_{n}"
        try:
            run.mkdir()
        except FileExistsError:
            n += 1
            continue
        except OSError as e:
            raise storage.storage_error("the run directory", run, e) from e
        return os.fspath(run)
