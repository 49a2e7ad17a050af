"""What ``import jaxtrainer.runs`` gives until 0.3.0 (with a DeprecationWarning):
:mod:`jaxtrainer.rundir.runs` (0.2.0 moved the module to ``checkpoint.runs``, the
run directory's package since), plus its two
functions that the checkpoint resolver replaced."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jaxtrainer.aliases import warn_moved
from jaxtrainer.checkpoint.resolve import run_dir_of  # noqa: F401  (0.1's runs.run_dir_of)
from jaxtrainer.rundir.runs import *  # noqa: F403


def resolve_checkpoint(ckpt_path: str | os.PathLike, root: str | os.PathLike,
                       strategy: Any = None) -> Path:
    """``ckpt_path`` as a step directory: now
    :func:`jaxtrainer.trainer._connectors.checkpoint_connector.resolve_ckpt_path` (same arguments)."""
    from jaxtrainer.trainer._connectors import checkpoint_connector

    warn_moved("jaxtrainer.runs.resolve_checkpoint",
               "jaxtrainer.trainer._connectors.checkpoint_connector.resolve_ckpt_path")
    return checkpoint_connector.resolve_ckpt_path(ckpt_path, root, strategy)


def _best_checkpoint(path: str | os.PathLike) -> Path:
    """The best checkpoint recorded in the checkpoint at ``path``: now
    ``jaxtrainer.checkpoint.best(path).path`` (which also gives its score)."""
    from jaxtrainer.checkpoint import best

    warn_moved("jaxtrainer.runs._best_checkpoint", "jaxtrainer.checkpoint.best")
    return best(path).path
