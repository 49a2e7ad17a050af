"""Which checkpoint a path names: the one resolver of ``"last"``, ``"best"`` and a step.

Every reader of checkpoints resolves through :func:`resolve`: ``Trainer.fit`` and
``Trainer.evaluate`` (``ckpt_path``), ``jaxtrainer eval``,
:func:`jaxtrainer.load_policy` and the recipes' resume. A path is one of::

    <root>/                                   a root of runs (default_root_dir)
    <root>/version_<n>/                       a run directory
    <root>/version_<n>/checkpoints[_<k>]/     a checkpoints directory (one per ModelCheckpoint)
    <root>/version_<n>/checkpoints/<step>/    a step directory (one checkpoint)

and ``which`` is ``None`` (the step directory the path names, else the newest),
``"last"`` (the newest), ``"best"`` (the best that a monitored
:class:`~jaxtrainer.ModelCheckpoint` recorded, :func:`best`) or a step number.
Only complete checkpoints count (:func:`~jaxtrainer.checkpoint._files.steps`):
one being written, or cut off by a crash, is never chosen.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from jaxtrainer._arguments import expand_path
from jaxtrainer.checkpoint._files import META, latest_step_dir, read_meta, steps
from jaxtrainer.rundir import _run_lock as run_lock
from jaxtrainer.rundir import module_record, run_layout

CHECKPOINTS = run_layout.CHECKPOINTS_DIR
"""The first ModelCheckpoint's directory in a run; the next ones write
``checkpoints_1``, ``checkpoints_2``, ..."""

NAMES = ("last", "best")
"""Named checkpoints (besides a step number)."""

Accept = Callable[[Path], "str | None"]
"""``accept(run_dir)``: ``None`` where the caller can resume that run, else why
not, as a clause (``"it is a sweep of 4 seeds, this command trains a single run"``)."""


class NotResumable(FileNotFoundError):
    """Every run under a root that holds a checkpoint is one the caller cannot
    resume (another recipe, environment or kind); the message names the newest
    and why."""


class NoBestCheckpoint(ValueError):
    """A checkpoint records no best checkpoint (its ModelCheckpoint had no
    ``monitor``, or the monitored metric was never logged)."""


class BestCheckpoint(NamedTuple):
    """The best checkpoint of a run as its :class:`~jaxtrainer.ModelCheckpoint` ranked it.

    Attributes:
      path: the step directory.
      monitor: the metric ranked on (e.g. ``"eval/episode_return"``).
      mode: ``"max"`` or ``"min"``.
      score: the metric's value at that step (NaN where none was recorded).
    """

    path: Path
    monitor: str
    mode: str
    score: float


def checkpoint_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """A run directory's checkpoints directories that hold a checkpoint:
    ``checkpoints``, then ``checkpoints_1``, ``checkpoints_2``, ..."""
    run_dir = Path(run_dir)
    numbered = sorted((p for p in run_dir.glob(CHECKPOINTS + "_*") if p.name[12:].isdigit()),
                      key=lambda p: int(p.name[12:]))
    return [d for d in [run_dir / CHECKPOINTS, *numbered] if steps(d)]


def _newest_of_run(run_dir: Path) -> Path | None:
    """The newest checkpoint of one run, over all its checkpoints directories
    (the first directory's on a tie)."""
    newest = [latest_step_dir(d) for d in checkpoint_dirs(run_dir)]
    return max(newest, key=lambda p: int(p.name), default=None)


def _runs(root: Path) -> list[Path]:
    """``root``'s ``version_<n>`` run directories, newest first."""
    return sorted((p for p in root.glob("version_*") if p.name[8:].isdigit()),
                  key=lambda p: int(p.name[8:]), reverse=True)


def _newest_resumable(root: str | os.PathLike, accept: Accept | None = None
                     ) -> tuple[Path | None, list[tuple[Path, str]]]:
    """``(the newest checkpoint of the newest run under root that accept takes,
    [(run dir, why not) for each newer run holding a checkpoint that it refused]``).

    Runs are ``root``'s ``version_*`` directories holding a checkpoint, newest
    first; where ``root`` holds none, ``root`` itself as a run directory (taken
    as it is). ``accept=None`` takes every run.
    """
    root, refused = Path(root), []
    for run in _runs(root):
        found = _newest_of_run(run)
        if found is None:
            continue
        why = accept(run) if accept is not None else None
        if why is None:
            return found, refused
        refused.append((run, why))
    return (_newest_of_run(root) if not refused else None), refused


def find_last(root: str | os.PathLike, accept: Accept | None = None) -> Path | None:
    """The newest checkpoint of the newest run under ``root`` holding one
    (``version_*/checkpoints*/<step>``) that ``accept`` takes (every run when
    ``None``); where ``root`` holds no runs, the newest of ``root`` itself as a
    run directory; None when there is none."""
    return _newest_resumable(root, accept)[0]


def _refusal(root: Path, refused: list[tuple[Path, str]], prefix: str) -> str:
    """The one line saying which run ``last`` found and why it cannot be resumed."""
    run, why = refused[0]
    others = ""
    if len(refused) > 1:
        listed = "; ".join(f"{r.name}: {w}" for r, w in refused[1:4])
        others = f" (and {len(refused) - 1} older run(s): {listed}{', ...' if len(refused) > 4 else ''})"
    return (f"{prefix}the newest run with a checkpoint under {root} is {run}, and this command "
            f"cannot resume it: {why}{others}; name a run directory to resume it with its saved "
            "config, or leave the checkpoint path out to start a new run")


def _last_across_runs(root: Path, accept: Accept | None, prefix: str) -> Path | None:
    """:func:`_newest_resumable`, saying on stderr which newer runs were passed
    over, or raising :class:`NotResumable` when every run was."""
    found, refused = _newest_resumable(root, accept)
    if found is None and refused:
        raise NotResumable(_refusal(root, refused, prefix))
    if refused:
        passed = "; ".join(f"{r.name}: {w}" for r, w in refused[:4])
        print(f"jaxtrainer: {prefix}resuming {found.parent.parent}, the newest run this command "
              f"can resume (passed over: {passed})", file=sys.stderr, flush=True)
    return found


def _field(key: str, name: str) -> str | None:
    """``name``'s value in a ModelCheckpoint's state key
    (``ModelCheckpoint[dirpath=None,monitor='loss',mode='min',...]``)."""
    found = re.search(rf"{name}=(?:\w+\()?('([^']*)'|None)", key)  # 'x', PosixPath('x'), None
    return found.group(2) if found and found.group(2) is not None else None


def _recorded_best(step_dir: Path, prefix: str) -> tuple[Path, str, dict]:
    """``(recorded best path, its ModelCheckpoint's state key, its state)``."""
    states = read_meta(step_dir).get("callbacks") or {}
    recorded = {key: st for key, st in states.items()
                if isinstance(st, dict) and st.get("best_model_path")}
    if not recorded:
        raise NoBestCheckpoint(
            f"{prefix}the checkpoint {step_dir} records no best checkpoint: its ModelCheckpoint "
            "had no monitor, or the monitored metric was never logged (there is no best "
            "checkpoint recorded unless a ModelCheckpoint with monitor= and mode= ranks them, "
            "e.g. ModelCheckpoint(monitor='eval/episode_return', mode='max') with "
            "eval_every_n_steps so that the metric is logged; on a recipe's command line "
            "callbacks.checkpoint.monitor=eval/episode_return callbacks.checkpoint.mode=max "
            "trainer.eval_every_n_steps=N); pass 'last' or a checkpoint "
            f"directory, e.g. {step_dir} (its steps: {', '.join(map(str, steps(step_dir.parent)))})")
    if len({st["best_model_path"] for st in recorded.values()}) > 1:
        listed = "; ".join(f"{k}: {st['best_model_path']}" for k, st in recorded.items())
        raise ValueError(f"{prefix}several ModelCheckpoints recorded a best checkpoint in "
                         f"{step_dir} ({listed}); pass the one you want")
    key, state = next(iter(recorded.items()))
    return Path(state["best_model_path"]), key, state


def _records_best(step_dir: Path) -> bool:
    try:
        states = read_meta(step_dir).get("callbacks") or {}
    except (FileNotFoundError, ValueError, OSError):
        return False
    return any(isinstance(st, dict) and st.get("best_model_path") for st in states.values())


def _freshest_record(step_dir: Path) -> Path:
    """The checkpoint whose metadata holds the run's latest word on its best:
    among ``step_dir`` and the newest checkpoint of each of the run's
    checkpoints directories and of each monitored ModelCheckpoint's own
    ``dirpath``, those that record a best, the latest step, written last."""
    candidates = [step_dir]
    if step_dir.parent.name.startswith(CHECKPOINTS):
        candidates += [latest_step_dir(d) for d in checkpoint_dirs(step_dir.parent.parent)]
    for key in read_meta(step_dir).get("callbacks") or {}:
        dirpath = _field(key, "dirpath")
        if dirpath and _field(key, "monitor"):
            candidates.append(latest_step_dir(dirpath))
    recording = [c for c in dict.fromkeys(candidates) if c is not None and _records_best(c)]
    if not recording:
        return step_dir
    return max(recording, key=lambda c: (int(read_meta(c).get("global_step", c.name)),
                                         (c / META).stat().st_mtime_ns))


def best(path: str | os.PathLike, prefix: str = "") -> BestCheckpoint:
    """The best checkpoint recorded by the newest checkpoint at ``path`` (a
    step directory, or a checkpoints directory: its newest step), with the
    metric, mode and score its :class:`~jaxtrainer.ModelCheckpoint` ranked on.

    With several ModelCheckpoints, the freshest record among the run's
    checkpoints directories (and monitored ``dirpath``s) counts. A relative
    recorded path is looked up beside ``path`` first (the same
    checkpoints directory, wherever the run directory is now), then in the
    run's directory of that name (another ModelCheckpoint's, e.g.
    ``checkpoints_1``), then as recorded; an absolute one as recorded first.

    Args:
      prefix: put before every error message (e.g. ``"ckpt_path='best': "``).

    Raises:
      NoBestCheckpoint (a ValueError): no best is recorded, naming the checkpoint.
      ValueError: several ModelCheckpoints recorded different bests (listed).
      FileNotFoundError: no checkpoint at ``path``, or the recorded best is gone.
    """
    path = Path(path)
    step_dir = path if (path / META).exists() else latest_step_dir(path)
    if step_dir is None:
        raise FileNotFoundError(f"{prefix}no checkpoint under {path}")
    step_dir = _freshest_record(step_dir)
    recorded, key, state = _recorded_best(step_dir, prefix)
    beside = step_dir.parent / recorded.name
    sibling = step_dir.parent.parent / recorded.parent.name / recorded.name
    candidates = [recorded] if recorded.is_absolute() else [beside, recorded]
    if not recorded.is_absolute() and recorded.parent.name != step_dir.parent.name:
        candidates.reverse()  # recorded in another directory than ``step_dir``'s
    for candidate in [*candidates, sibling]:
        if (candidate / META).exists():
            score = state.get("best_model_score")
            return BestCheckpoint(candidate, _field(key, "monitor") or "?",
                                  _field(key, "mode") or "max",
                                  float("nan") if score is None else float(score))
    raise FileNotFoundError(f"{prefix}the best checkpoint {recorded} recorded in {step_dir} "
                            "no longer exists (deleted or moved)")


def parse_which(which: str | int | None) -> str | int | None:
    """``which`` as ``None``, ``"last"``, ``"best"`` or a step (``int``).

    Raises:
      ValueError: anything else (naming the value and the choices).
    """
    if which is None or which in NAMES:
        return which
    if isinstance(which, int) and not isinstance(which, bool) and which >= 0:
        return which
    if isinstance(which, str) and which.isdigit():
        return int(which)
    raise ValueError(f"checkpoint {which!r}: expected 'last', 'best' or a step number")


def _locate(path: Path, across_runs: bool, prefix: str,
            accept: Accept | None = None) -> tuple[Path, Path | None]:
    """``(checkpoints directory, the step directory path names or None)``."""
    if (path / META).exists():
        return path.parent, path
    if steps(path):
        return path, None
    newest = _newest_of_run(path) if not across_runs else _last_across_runs(path, accept, prefix)
    if newest is not None:
        return newest.parent, None
    versions = [p.name for p in reversed(_runs(path))]
    where = os.path.abspath(path)
    if across_runs:
        raise FileNotFoundError(f"{prefix}no checkpoint under {where}/version_*/checkpoints "
                                f"(nor {where}/checkpoints)")
    if versions:
        raise FileNotFoundError(f"{prefix}{path} is a root of runs ({', '.join(versions[:8])}"
                                f"{', ...' if len(versions) > 8 else ''}): pass one run directory")
    if not path.exists():
        from jaxtrainer._arguments import did_you_mean
        hint = did_you_mean(str(path), NAMES) if os.sep not in str(path) else ""
        raise FileNotFoundError(f"{prefix}{path}: no such file or directory{hint}")
    who = run_lock.holder(path.parent if path.name == CHECKPOINTS else path)
    if who is not None:  # a run that is still running (its first save may be under way)
        raise FileNotFoundError(f"{prefix}no checkpoint in {path} yet: the run is still running "
                                f"({who} holds its lock) and has not saved its first checkpoint")
    broken = [d for c in (path, path / CHECKPOINTS) for d in _incomplete_after(c)]
    if broken:
        raise FileNotFoundError(f"{prefix}no complete checkpoint in {path}: "
                                f"{', '.join(map(str, broken))} "
                                f"{'has' if len(broken) == 1 else 'have'} no {META}/ (a save "
                                "that did not finish, or a damaged directory)")
    if (path / CHECKPOINTS).is_dir() or path.name == CHECKPOINTS:
        raise FileNotFoundError(f"{prefix}no checkpoint in {path}: its {CHECKPOINTS} directory holds "
                                "no saved step (the run stopped before its first checkpoint)")
    raise FileNotFoundError(f"{prefix}no checkpoint in {path}: expected a run directory (with "
                            f"{CHECKPOINTS}/), its {CHECKPOINTS} directory or a step directory")


def _incomplete_after(directory: str | os.PathLike, step: int = -1) -> list[Path]:
    """Step directories under a checkpoints directory newer than ``step`` that
    are not complete checkpoints (no ``meta``): a save cut off, in progress, or
    a damaged directory. Orbax's temporary directories are not step directories."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()
                   and int(p.name) > step and not (p / META).exists()),
                  key=lambda p: int(p.name))


def _old_order(path: str | os.PathLike, which: object) -> bool:
    """Whether ``resolve(path, which)`` is the 0.1.0 call ``resolve("last", root)``."""
    return (isinstance(path, str) and path in NAMES and not os.path.exists(path)
            and isinstance(which, str | os.PathLike) and os.path.isdir(which))


def resolve(path: str | os.PathLike, which: str | int | None = None, *,
            across_runs: bool = False, prefix: str = "", accept: Accept | None = None) -> Path:
    """The step directory that ``path`` and ``which`` name.

    Args:
      path: a run directory, a checkpoints directory or a step directory; with
        ``across_runs``, also a root of runs (its newest run holding a
        checkpoint: how the Trainer reads ``ckpt_path="last"`` in
        ``default_root_dir``).
      which: ``None`` (the step directory ``path`` names, else the newest),
        ``"last"``, ``"best"`` (:func:`best`) or a step number (``int`` or digits).
      across_runs: whether ``path`` may be a root of runs.
      prefix: put before every error message (e.g. ``"ckpt_path='last': "``).
      accept: with ``across_runs`` and a root, which runs the caller can resume
        (:data:`Accept`): the newest run it takes counts, and newer runs it
        refuses are named on stderr. ``None``: every run.

    Raises:
      NotResumable (a FileNotFoundError): ``accept`` refused every run under
        the root that holds a checkpoint (one line naming the newest and why).
      FileNotFoundError: no checkpoint there (naming the path; a root of runs
        without ``across_runs`` is named as such), or none at that step (listing
        the steps there).
      ValueError: a bad ``which``, or ``"best"`` where no best was recorded.

    The 0.1.0 order, ``resolve("last", root)``, still works until 0.3.0, with a
    DeprecationWarning: a first argument ``"last"`` or ``"best"`` (no such
    file here) before a directory is read as ``resolve(root, "last")``.
    """
    if _old_order(path, which):
        from jaxtrainer.aliases import warn_changed

        warn_changed(f"resolve({os.fspath(path)!r}, root)", f"resolve(root, {os.fspath(path)!r})")
        path, which = which, os.fspath(path)
    which = parse_which(which)
    directory, step_dir = _locate(Path(expand_path(path)), across_runs, prefix, accept)
    if which is None and step_dir is not None:
        return step_dir
    if which == "best":
        return best(directory, prefix).path
    if which is None or which == "last":
        chosen = latest_step_dir(directory)
        for passed in _incomplete_after(directory, int(chosen.name)):
            print(f"jaxtrainer: passing over {passed}: incomplete (no {META}/: its save did not "
                  f"finish, or the directory is damaged); using {chosen}", file=sys.stderr,
                  flush=True)
        return chosen
    if which not in steps(directory):
        raise FileNotFoundError(f"{prefix}no checkpoint at step {which} in {directory}; steps: "
                                f"{', '.join(map(str, steps(directory)))}")
    return directory / str(which)


def run_dir_of(step_dir: str | os.PathLike) -> Path:
    """The run directory of a checkpoint step directory: the one holding its
    checkpoints directory when that has a ``config.yaml`` or ``module.yaml``,
    else the run directory recorded in the checkpoint's metadata."""
    step_dir = Path(step_dir)
    parent = step_dir.parent.parent
    if step_dir.parent.name.startswith(CHECKPOINTS) and (
            (parent / run_layout.CONFIG_FILE).exists() or module_record.exists(parent)):
        return parent
    recorded = read_meta(step_dir).get("run_dir")
    return Path(recorded) if recorded else parent
