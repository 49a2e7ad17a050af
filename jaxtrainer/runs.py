"""Run directories, budgets and the checkpoint a ``fit`` resumes from.

Host-side bookkeeping of one run, as plain functions: which ``version_<n>``
directory a new run gets, how many training steps its budget allows, and which
checkpoint ``ckpt_path`` names (the same on every process).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jaxtrainer import checkpoint as ckpt

if TYPE_CHECKING:
    from jaxtrainer.strategies import Strategy


def new_run_dir(root: str | os.PathLike) -> str:
    """Create and return ``<root>/version_<n>`` for a new run, ``n`` one past
    the highest taken. The directory is created exclusively, so runs started at
    the same instant in one root (several processes, or several machines on a
    shared filesystem) each get their own: one that loses the race takes the
    next number."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[8:]) for p in root.glob("version_*") if p.name[8:].isdigit()]
    n = max(taken, default=-1) + 1
    while True:
        try:
            (root / f"version_{n}").mkdir()
        except FileExistsError:
            n += 1
            continue
        return os.fspath(root / f"version_{n}")


def budget_in_steps(max_steps: int | None, max_env_steps: int | None, env_steps_per_step: int,
                    module_name: str) -> int:
    """The run's budget in training steps: ``max_steps``, or the whole training
    steps that fit in ``max_env_steps`` env transitions; the smaller with both.

    Raises:
      ValueError: a negative ``env_steps_per_step``, ``max_env_steps`` for a
        module that consumes no env steps, or less than one training step.
    """
    if env_steps_per_step < 0:
        raise ValueError(f"{module_name}.env_steps_per_step={env_steps_per_step}: expected >= 0")
    budgets = [] if max_steps is None else [max_steps]
    if max_env_steps is not None:
        if env_steps_per_step == 0:
            raise ValueError(f"max_env_steps={max_env_steps} needs a module with "
                             f"env_steps_per_step > 0; {module_name} has 0")
        if max_env_steps < env_steps_per_step:
            raise ValueError(f"max_env_steps={max_env_steps} is less than one training step "
                             f"({env_steps_per_step} env steps)")
        budgets.append(max_env_steps // env_steps_per_step)
    return min(budgets)


CHECKPOINT_NAMES = ("last", "best")
"""``ckpt_path`` values that name a checkpoint of the newest run rather than a path."""


class NoBestCheckpoint(ValueError):
    """A checkpoint records no best checkpoint (its ModelCheckpoint had no
    ``monitor``, or the monitored metric was never logged)."""


def best_checkpoint(path: str | os.PathLike) -> Path:
    """The best checkpoint recorded in the checkpoint at ``path`` (a step
    directory): the ``best_model_path`` its :class:`~jaxtrainer.ModelCheckpoint`
    kept by its ``monitor`` (the metric and ``mode`` it was built with) when
    that checkpoint was written. A relative recorded path is looked up beside
    ``path`` first (the same ``checkpoints`` directory, wherever the run
    directory is now), then from the current directory.

    Raises:
      ValueError: no best is recorded (the ModelCheckpoint had no ``monitor``,
        or the metric was never logged), or several ModelCheckpoints recorded
        different ones (the message lists them).
      FileNotFoundError: the recorded best checkpoint is gone (deleted or moved).
    """
    path = Path(path)
    states = ckpt.read_meta(path).get("callbacks", {})
    recorded = {key: st["best_model_path"] for key, st in states.items()
                if isinstance(st, dict) and st.get("best_model_path")}
    if not recorded:
        raise NoBestCheckpoint(
            f"ckpt_path='best': the checkpoint {path} records no best checkpoint: its "
            "ModelCheckpoint had no monitor (or the monitored metric was never logged). Rank "
            "checkpoints with ModelCheckpoint(monitor='eval/episode_return', mode='max'), or "
            "pass ckpt_path='last' or a checkpoint path")
    if len(set(recorded.values())) > 1:
        listed = "; ".join(f"{k}: {v}" for k, v in recorded.items())
        raise ValueError(f"ckpt_path='best': several ModelCheckpoints recorded a best checkpoint "
                         f"in {path} ({listed}); pass the one you want as ckpt_path")
    best = Path(next(iter(recorded.values())))
    # beside ``path`` (a moved run), in the run's directory of that name (another
    # ModelCheckpoint's, e.g. checkpoints_1), then as recorded
    beside, sibling = path.parent / best.name, path.parent.parent / best.parent.name / best.name
    candidates = [best] if best.is_absolute() else [beside, best]
    if not best.is_absolute() and best.parent.name != path.parent.name:
        candidates.reverse()  # recorded in another directory than ``path``'s
    candidates.append(sibling)
    for candidate in candidates:
        if (candidate / ckpt.META).exists():
            return candidate
    raise FileNotFoundError(f"ckpt_path='best': the best checkpoint {best} recorded in {path} "
                            "no longer exists (deleted or moved)")


def _resolve_here(ckpt_path: str | os.PathLike, root: str | os.PathLike) -> Path:
    name = os.fspath(ckpt_path)
    if name not in CHECKPOINT_NAMES:
        return ckpt.resolve(ckpt_path, root)
    newest = ckpt.find_last(root) or ckpt.latest_step_dir(Path(root) / "checkpoints")
    if newest is None:
        where = os.path.abspath(root)
        raise FileNotFoundError(f"ckpt_path={name!r}: no checkpoint under {where}/version_*/checkpoints "
                                f"(nor {where}/checkpoints)")
    return newest if name == "last" else best_checkpoint(newest)


def resolve_checkpoint(ckpt_path: str | os.PathLike, root: str | os.PathLike,
                       strategy: Strategy | None = None) -> Path:
    """``ckpt_path`` as a step directory, the same on every process.

    ``ckpt_path`` is ``"last"`` (the newest checkpoint of the newest run under
    ``root``), ``"best"`` (that checkpoint's recorded best, see
    :func:`best_checkpoint`), a run's ``checkpoints`` directory, a run
    directory or a step directory. ``root`` is a ``default_root_dir`` (runs in
    ``version_<n>``) or, for ``"last"``/``"best"``, also one run directory.

    With ``strategy`` and several processes, process 0 resolves it and every
    process uses that path, which must be visible on each of them (a shared
    filesystem); one tiny exchange. ``strategy=None``: this process alone.

    Raises:
      FileNotFoundError: on every process, when process 0 finds no checkpoint
        or some process cannot see the one it found.
      ValueError: ``"best"`` where no best checkpoint was recorded.
    """
    if strategy is None or strategy.process_count <= 1:
        return _resolve_here(ckpt_path, root)
    try:
        found, error = os.fspath(_resolve_here(ckpt_path, root)), ""
    except (FileNotFoundError, ValueError) as e:
        found, error = "", f"{type(e).__name__}:{e}"
    found = strategy.broadcast(found)
    if not found:
        kind, _, message = strategy.broadcast(error).partition(":")
        raise (ValueError if kind == "ValueError" else FileNotFoundError)(message + " (on process 0)")
    path = Path(found)
    seen = strategy.all_gather_host(np.int32((path / ckpt.META).is_dir())).reshape(-1)
    if not seen.all():
        blind = [int(i) for i in np.flatnonzero(seen == 0)]
        raise FileNotFoundError(
            f"checkpoint {path} (chosen on process 0) is not visible on process(es) {blind}: "
            "with several processes checkpoints must be on a filesystem every process sees")
    return path


def check_env_steps(path: Path, env_steps_per_step: int, module_name: str) -> int:
    """The global step of the checkpoint at ``path``, after refusing a resume
    whose module consumes another number of env steps per training step than
    the run it continues (``env_steps`` would jump back and ``max_env_steps``
    be overrun).

    Raises:
      ValueError: naming both numbers, before anything is written.
    """
    meta = ckpt.read_meta(path)
    steps, env_steps = int(meta["global_step"]), int(meta["env_steps"])
    if env_steps != steps * env_steps_per_step:
        per_step = f"{env_steps // steps}" if steps else "?"
        raise ValueError(
            f"checkpoint {path} counted {env_steps} env steps in {steps} training steps "
            f"({per_step} per step), but {module_name}.env_steps_per_step is "
            f"{env_steps_per_step}: resume with the sizes the run started with "
            "(e.g. num_envs, num_steps), or start a new run")
    return steps
