"""The Trainer's checkpoint connector: what a run saves and how it comes back.

A checkpoint holds the module state (one logical copy), the root PRNG key, the
counters (``global_step``, ``env_steps``), the run directory that wrote it and
every callback's ``state_dict()``; restoring puts the state on the current
strategy's devices, whatever strategy or device count saved it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxtrainer._arguments import expand_path
from jaxtrainer.callbacks.base import Callback
from jaxtrainer.checkpoint import _files as ckpt
from jaxtrainer.checkpoint.resolve import NAMES, Accept, resolve
from jaxtrainer.distributed import keys
from jaxtrainer.module import members_of

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.strategies import Strategy
    from jaxtrainer.trainer import Trainer


def abstract_key(strategy: Strategy) -> jax.ShapeDtypeStruct:
    """The root key as a ``ShapeDtypeStruct``, replicated over the strategy's mesh."""
    key = jax.random.key(0)
    return jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=jax.sharding.NamedSharding(
        strategy.mesh, jax.sharding.PartitionSpec()))


def meta(trainer: Trainer) -> dict[str, Any]:
    """The JSON part of a checkpoint of ``trainer``'s current step."""
    return {"global_step": trainer.global_step, "env_steps": trainer.env_steps,
            "seed": trainer.seed, "strategy": type(trainer.strategy).__name__,
            "num_devices": trainer.num_devices,
            "run_dir": os.path.abspath(trainer.log_dir),  # whose checkpoint this is
            "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
            # hook calls of this step that an exception kept from some callbacks
            "unfinished_hooks": list(trainer.unfinished_hooks.cut)}


def save(trainer: Trainer, module: Module, manager: Any, metrics: dict[str, float] | None) -> None:
    """``Trainer.save_checkpoint``: ``trainer``'s state, root key, counters and
    callback states (after their ``on_save_checkpoint``) written with ``manager``."""
    written = meta(trainer)
    trainer.call_hook("on_save_checkpoint", module, written)
    ckpt.save(manager, trainer.global_step, {"module": trainer.peek_state(), "rng": trainer.root_key},
              written, metrics=metrics)


def _has_state(callback: Callback) -> bool:
    """Whether ``callback``'s class defines a ``state_dict`` (saved in checkpoints)."""
    return type(callback).state_dict is not Callback.state_dict


def refuse_shared_state_keys(trainer: Trainer) -> None:
    """Refuse, before anything is written or compiled, two callbacks with state
    whose :attr:`~jaxtrainer.Callback.state_key` is equal: one checkpoint entry
    would hold the state of one and be handed to both on a resume.

    Raises:
      ValueError: naming the key, the two callbacks and the fix.
    """
    seen: dict[str, Callback] = {}
    for cb in trainer.callbacks:
        if not _has_state(cb):
            continue
        key = cb.state_key
        if key in seen:
            raise ValueError(
                f"callbacks {type(seen[key]).__name__} and {type(cb).__name__} share the "
                f"checkpoint state key {key!r}: each needs its own, or a resume would give both "
                "the state of one; give them different arguments (e.g. a ModelCheckpoint its "
                "own dirpath), or define state_key on the callback class to include the "
                "arguments that make instances distinct")
        seen[key] = cb


def _states_of(callbacks: list[Callback], states: dict[str, Any]) -> list[tuple[Callback, Any]]:
    """Each callback's entry of the checkpoint's callback ``states``: the one under
    its :attr:`~jaxtrainer.Callback.state_key`; where none is, and the checkpoint
    holds exactly one unclaimed entry of that callback's class (its key is the
    class name, or starts with it and ``[``: a key written with other arguments,
    e.g. another ``every_n_steps``, or by an older version) for exactly one
    unclaimed callback of that class, that one."""
    found = [(cb, states[cb.state_key]) for cb in callbacks if cb.state_key in states]
    claimed = {cb.state_key for cb, _ in found}

    def class_of(key: str) -> str:
        return key.split("[", 1)[0]

    left = [cb for cb in callbacks if cb.state_key not in states and _has_state(cb)]
    unclaimed = [k for k in states if k not in claimed]
    for name in {type(cb).__qualname__ for cb in left}:
        mine = [cb for cb in left if type(cb).__qualname__ == name]
        theirs = [k for k in unclaimed if class_of(k) == name]
        if len(mine) == 1 and len(theirs) == 1:
            found.append((mine[0], states[theirs[0]]))
    return found


def check(trainer: Trainer, path: Path, abstract_state: Any, module: Module | None = None) -> None:
    """Fail now, before anything compiles, when the checkpoint at ``path``
    cannot restore into ``abstract_state`` (``trainer.strategy.abstract_state``
    of ``module``) and ``trainer``'s root key: reads metadata only.

    Raises:
      jaxtrainer.checkpoint.DamagedCheckpointError: a damaged file, named.
      jaxtrainer.checkpoint.CheckpointMismatchError: arrays of another module.
    """
    ckpt.check(path, {"module": abstract_state, "rng": abstract_key(trainer.strategy)},
               rows=None if module is None else member_rows(trainer, module, path))


def member_rows(trainer: Trainer, module: Module, path: Path) -> ckpt.MemberRows | None:
    """A population whose size does not divide the device count is stored with its
    padding members (copies of the last): ``(size, rows stored, rows here)`` when
    ``path`` holds ``module``'s population padded to another number of rows than
    ``trainer``'s device count pads it to (the restore pads it again), else None."""
    population = members_of(module)
    if population is None:
        return None
    layout = population.layout
    try:
        written = int(ckpt.read_meta(path)["num_devices"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged or older checkpoint: the restore says what it finds

    def padded(n: int) -> int:
        return -(-layout.size // n) * n

    rows = (layout.size, padded(written), padded(trainer.num_devices))
    return None if rows[1] == rows[2] else rows


def restore(trainer: Trainer, module: Module, path: Path,
            abstract_state: Any = None) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``trainer`` (state, root key,
    counters, callback states); returns its metadata. ``abstract_state``:
    ``trainer.strategy.abstract_state(module)`` when the caller has it already
    (traced here otherwise). The module's
    :meth:`~jaxtrainer.Module.resumed_state` then gets the restored state and
    a maker of fresh ones (keyed by the run's key and the step), e.g. fresh
    host envs.

    Raises:
      FileNotFoundError: ``path`` is not a checkpoint.
      jaxtrainer.checkpoint.DamagedCheckpointError: a file of it is damaged
        (a ValueError naming the file and the earlier checkpoints).
      jaxtrainer.checkpoint.CheckpointMismatchError: its arrays do not match
        ``module``'s state (a ValueError listing them). A population padded
        for another device count is padded again (:func:`member_rows`).
    """
    if abstract_state is None:
        abstract_state = trainer.strategy.abstract_state(module)
    abstract = {"module": abstract_state,
                "rng": abstract_key(trainer.strategy)}
    restored, stored = ckpt.restore(path, abstract, rows=member_rows(trainer, module, path))
    trainer.state, trainer.root_key = restored["module"], restored["rng"]
    trainer.global_step, trainer.env_steps = int(stored["global_step"]), int(stored["env_steps"])
    if isinstance(stored.get("seed"), int):  # its keys are the checkpoint's: so is its seed
        trainer.seed = stored["seed"]
    trainer.state = module.resumed_state(trainer.state, lambda: trainer.strategy.init_state(
        module, keys.sub_key(keys.stream_key(trainer.root_key, keys.INIT_STREAM),
                             trainer.global_step)))
    for cb, state in _states_of(trainer.callbacks, stored.get("callbacks") or {}):
        cb.load_state_dict(state)
    trainer.unfinished_hooks.to_replay = list(stored.get("unfinished_hooks") or [])
    return stored


def report_kept_hyperparams(trainer: Trainer, module: Module) -> None:
    """Say (on process 0, stderr) which hyperparameters a resumed state keeps from its
    checkpoint that differ from ``module``'s own (``module.initial_hyperparams()``, e.g.
    ``PPO(lr=1e-2)`` resuming a run trained at 2.5e-4): they are part of the state
    (``state.hyperparams``), so the checkpoint's go on, and nothing else would say so."""
    own = module.initial_hyperparams()
    held = getattr(trainer.peek_state(), "hyperparams", None)
    if not own or not isinstance(held, dict) or not trainer.is_global_zero:
        return
    kept = []
    for name, value in own.items():
        if name in held and np.ndim(value) == 0 and np.ndim(held[name]) == 0:
            mine, theirs = float(value), float(np.asarray(held[name].addressable_data(0)))
            if not np.isclose(mine, theirs, rtol=1e-6, atol=0.0):
                kept.append(f"{name}={theirs:g} (the module's {mine:g})")
    if kept:
        print(f"jaxtrainer: resume: the checkpoint's {', '.join(kept)} go on: hyperparameters "
              f"kept in the state (state.hyperparams) come from the checkpoint, as the weights "
              f"and optimizer state do", file=sys.stderr, flush=True)


def report_kept_seed(trainer: Trainer, given: int) -> None:
    """Say (on process 0, stderr) that a resumed run goes on with its own seed when
    the Trainer was given another (``Trainer(seed=7)`` resuming a run of seed 0): the
    random keys are part of the checkpoint, so the run's seed is kept (and recorded)."""
    if given != trainer.seed and trainer.is_global_zero:
        print(f"jaxtrainer: resume: the run goes on with its seed {trainer.seed} (the random "
              f"keys are in the checkpoint), not seed={given}: another seed is a new run",
              file=sys.stderr, flush=True)


def report_resume(trainer: Trainer, resume: Path, step: int, members: int = 1) -> None:
    """Say which checkpoint a run resumes from (``members`` > 1, a sweep: its
    env steps per member), and, when it is not the newest checkpoint of its
    directory (``ckpt_path="best"``, an earlier step), which later ones the
    resumed run will replace (stderr)."""
    per = f" per member x {members} members" if members > 1 else ""
    print(f"jaxtrainer: resuming from checkpoint {resume} at step {step} "
          f"({step * trainer.env_steps_per_step // members} env steps{per}) of "
          f"{trainer.max_steps}", flush=True)
    later = [s for s in ckpt.steps(resume.parent) if s > step]
    if later:  # ckpt_path=best, or an earlier step named: the run's later course is replaced
        print(f"jaxtrainer: resume: {resume.parent} also holds the later checkpoint"
              f"{'s' * (len(later) > 1)} {', '.join(map(str, later))} of this run: going on from "
              f"step {step} replaces them (and the metrics rows after step {step}) as the run "
              f"reaches their steps or prunes; copy the run directory first to keep them",
              file=sys.stderr, flush=True)


def report_budget_spent(trainer: Trainer, resume: Path, step: int, members: int = 1) -> None:
    """Say (on process 0) why a resume from ``resume`` (at ``step``) runs nothing;
    ``members`` > 1 (a sweep) states ``max_env_steps`` per member as well."""
    total = trainer.budget.total(members)
    env_budget = total.max_env_steps and (
        f"max_env_steps={total.max_env_steps // members} per member x {members} members"
        if members > 1 else f"max_env_steps={total.max_env_steps}")
    budget = ", ".join(v for v in (total.max_steps and f"max_steps={total.max_steps}",
                                   env_budget) if v)
    trainer.stop_reason = (f"the checkpoint is at step {step} and the budget is "
                           f"{trainer.max_steps} training steps")
    if trainer.is_global_zero:
        print(f"jaxtrainer: nothing to train: {resume} is at step {step}, and the budget of "
              f"{trainer.max_steps} training steps ({budget}) is not above it; nothing was "
              f"run or written. Raise the budget above {step} training steps to continue that run.",
              file=sys.stderr, flush=True)


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


def resolve_ckpt_path(ckpt_path: str | os.PathLike, root: str | os.PathLike,
                      strategy: Strategy | None = None, accept: Accept | None = None) -> Path:
    """A Trainer's ``ckpt_path`` as a step directory, the same on every process.

    ``"last"`` and ``"best"`` name the newest checkpoint of the newest run under
    ``root`` (a ``default_root_dir``, or one run directory) and its recorded
    best; a step directory is taken as it is, with no search (the recipes pass
    the one they resolved); anything else is a path (a run or checkpoints
    directory), as :func:`jaxtrainer.checkpoint.resolve` takes them.

    With ``strategy`` and several processes, process 0 resolves it and every
    process uses that path, which must be visible on each of them (a shared
    filesystem); one tiny exchange. ``strategy=None``: this process alone.
    ``accept``: which runs under ``root`` this caller can resume
    (:data:`jaxtrainer.checkpoint.resolve.Accept`; ``None``: every run).

    Raises:
      FileNotFoundError: on every process, when process 0 finds no checkpoint
        or some process cannot see the one it found.
      ValueError: ``"best"`` where no best checkpoint was recorded.
    """
    name = os.fspath(ckpt_path)
    prefix = f"ckpt_path={name!r}: "

    def here() -> Path:
        if name in NAMES:
            return resolve(root, name, across_runs=True, prefix=prefix, accept=accept)
        given = Path(expand_path(name))
        if (given / ckpt.META).exists():  # a step directory: itself
            return given
        return resolve(ckpt_path, prefix=prefix)

    if strategy is None or strategy.process_count <= 1:
        return here()
    try:
        found, error = os.fspath(here()), ""
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
