"""A resumed recipe run's config: the one the run saved, with what the command line changes.

The rule, for ``trainer.ckpt_path=...`` with a run that has a ``config.yaml``:

* the run resumes with its **saved config**; the command line need not repeat
  the overrides the run was started with;
* settings given on the command line (or in a ``--config`` file) that differ
  from the saved ones are printed, one line each, ``key: saved -> given``;
* those of the ``trainer:``, ``logger:`` and ``callbacks:`` sections (a larger
  budget, another strategy or device count, logging) are applied;
* ``trainer.seed`` is refused always: the run's random keys are in its
  checkpoint, and another seed is another run;
* those that change what is learned (``env:``, ``algorithm:``, ``sweep:``,
  ``pbt:``, ...) are refused, one line and exit status 2, unless
  ``trainer.resume_overrides=apply`` confirms them: then they are applied
  everywhere, hyperparameters kept in the state (``state.hyperparams``, e.g.
  PPO's ``lr``) included.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
from omegaconf import DictConfig, OmegaConf

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.checkpoint.resolve import run_dir_of
from jaxtrainer.rundir import _run_kind as run_kind
from jaxtrainer.rundir import runs
from jaxtrainer.trainer._connectors import checkpoint_connector

KEY = "trainer.resume_overrides"
"""The override that confirms changes to what a resumed run learns (``=apply``)."""

APPLIED_SECTIONS = ("trainer", "logger", "callbacks")
"""Sections whose changes a resume applies without confirmation."""

KEPT = ("trainer.seed",)
"""Settings a resume cannot change, even with ``trainer.resume_overrides=apply``:
the seed's random keys are part of the checkpoint."""

_UNSET = object()


def take_setting(overrides: Sequence[str]) -> tuple[str | None, list[str]]:
    """``(value of trainer.resume_overrides or None, the other overrides)``.

    Raises:
      ValueError: a value other than ``apply`` or ``refuse``.
    """
    value, rest = None, []
    for item in overrides:
        if item.split("=", 1)[0].lstrip("+") == KEY:
            value = item.split("=", 1)[1].strip() if "=" in item else ""
            if value not in ("apply", "refuse"):
                raise ValueError(f"{KEY}={value!r}: expected apply (apply the changed settings "
                                 "to the resumed run) or refuse (the default)")
        else:
            rest.append(item)
    return value, rest


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, DictConfig):
        return [prefix] if prefix else []
    out = []
    for key in node:
        out += _leaves(node[key], f"{prefix}.{key}" if prefix else str(key))
    return out


def _get(cfg: DictConfig, key: str) -> Any:
    value = OmegaConf.select(cfg, key, default=_UNSET, throw_on_missing=False)
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value


@dataclass(frozen=True)
class Found:
    """What a resume of a recipe run resumes, found once per command.

    Attributes:
      checkpoint: the step directory ``trainer.ckpt_path`` names, resolved
        (``last`` and ``best`` chosen here): a path that ``Trainer.fit``
        resolves to itself.
      saved: the config the run saved (its ``recipe:`` key dropped), or None
        for a run without a ``config.yaml``.
      file: that ``config.yaml``'s path (``""`` without one).
    """

    checkpoint: Path
    saved: DictConfig | None
    file: str


def find(cfg: DictConfig) -> Found | None:
    """The checkpoint ``cfg``'s ``trainer.ckpt_path`` names and its run's
    saved config, or None without a ``ckpt_path``: the path is resolved once
    and the run's ``config.yaml`` read once. ``last`` and ``best`` look at the
    newest run of ``cfg``'s recipe, environment and kind
    (:func:`jaxtrainer.rundir._run_kind.config_acceptor`).

    Raises:
      FileNotFoundError: ``trainer.ckpt_path`` names no checkpoint, or no run
        this config can resume (one line naming the newest run and why).
      ValueError: ``trainer.ckpt_path`` is a checkpoint of another recipe's run.
    """
    path = cfg.trainer.get("ckpt_path")
    if path is None:
        return None
    read: dict[Path, str | None] = {}  # each config.yaml the acceptor read, by run
    accept = run_kind.config_acceptor(OmegaConf.to_container(cfg, resolve=True), read)
    step_dir = checkpoint_connector.resolve_ckpt_path(str(path), cfg.trainer.get("default_root_dir") or "runs",
                                               accept=accept)
    file = run_dir_of(step_dir) / runs.CONFIG_FILE
    if file.parent in read:
        text = read[file.parent]
    else:  # a path, not last or best: no run was looked at
        text = file.read_text() if file.is_file() else None
    if text is None:
        return Found(step_dir, None, "")
    saved = OmegaConf.create(text)
    if file.parent not in read:  # a path: say it is another recipe's before its config is merged
        other = run_kind.other_recipe(OmegaConf.to_container(saved, resolve=True),
                                      OmegaConf.to_container(cfg, resolve=True))
        if other:
            raise ValueError(f"trainer.ckpt_path={path}: this command cannot resume that run: "
                             f"{other} ({file})")
    saved.pop("recipe", None)
    return Found(step_dir, saved, str(file))


def _same(key: str, saved: Any, given: Any) -> bool:
    """Equal values, or for a directory key (``..._dir``) two spellings of one
    directory (the saved absolute path and the relative one typed again)."""
    if saved == given:
        return True
    return key.endswith("_dir") and isinstance(saved, str) and isinstance(given, str) \
        and os.path.realpath(saved) == os.path.realpath(given)


def resumed(cfg: DictConfig, given: DictConfig, setting: str | None,
            found: Found | None) -> DictConfig:
    """The config a resume runs with: the run's saved config (``found``, from
    :func:`find`) with ``given`` (what the command line and ``--config`` file
    set) over it, or ``cfg`` unchanged when it resumes nothing that saved a
    config. Prints every changed setting as ``jaxtrainer: resume: key: saved ->
    given`` (stderr).

    Raises:
      ValueError: a changed setting outside :data:`APPLIED_SECTIONS` without
        ``trainer.resume_overrides=apply`` (one line listing them).
    """
    if found is None or found.saved is None:
        return cfg
    saved, file, step_dir = found.saved, found.file, str(found.checkpoint)
    struct = OmegaConf.is_struct(cfg)
    out = OmegaConf.merge(cfg, saved, given)  # the saved settings, then what was given
    if str(cfg.trainer.ckpt_path) in checkpoint_connector.NAMES:  # the run chosen here is resumed
        OmegaConf.update(out, "trainer.ckpt_path", step_dir)
    OmegaConf.set_struct(out, struct)
    changes = [(key, _get(saved, key), _get(out, key)) for key in _leaves(given)
               if key != "trainer.ckpt_path" and _get(saved, key) is not _UNSET
               and not _same(key, _get(saved, key), _get(out, key))]
    for key, was, now in changes:
        if key in KEPT:
            raise ValueError(f"resuming the run of {file} with {key}={now!r}: the run was "
                             f"started with {key}={was!r}, and its random keys, in the "
                             f"checkpoint, go on; another seed is a new run (leave out "
                             f"trainer.ckpt_path), or leave {key} out to resume")
    learning = [f"{key}: {was!r} -> {now!r}" for key, was, now in changes
                if key.split(".", 1)[0] not in APPLIED_SECTIONS]
    if learning and setting != "apply":
        raise ValueError(
            f"resuming the run of {file} with settings that change what it learns "
            f"({'; '.join(learning)}): pass {KEY}=apply to apply them to the resumed run "
            "(hyperparameters kept in its state included), or leave them out to resume with "
            "the saved config")
    for key, was, now in changes:  # what the resume applies (nothing printed when refused)
        print(f"jaxtrainer: resume: {key}: {was!r} -> {now!r}", file=sys.stderr, flush=True)
    return out


class ApplyHyperparameters(Callback):
    """After a resume restored the state, set the hyperparameters the state
    keeps (``state.hyperparams[name]``) to the resumed config's values where
    the module's ``TUNABLE`` names them and the config changed them."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = dict(values)

    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: Any) -> None:
        held = getattr(trainer.peek_state(), "hyperparams", None)
        names = set(module.TUNABLE) & set(self.values)
        if not isinstance(held, dict) or not names:
            return
        new = dict(held)
        for name in names & set(held):
            old = held[name]
            new[name] = jax.device_put(jax.numpy.asarray(self.values[name], old.dtype),
                                       old.sharding)
        trainer.update_state(lambda state: state.replace(hyperparams=new))


def hyperparameter_changes(cfg: DictConfig, found: Found | None) -> dict[str, float]:
    """``{name: value}`` of the ``algorithm:`` settings that differ from the
    saved config of the run ``cfg`` resumes (``found``, from :func:`find`;
    empty when it resumes nothing)."""
    if found is None or found.saved is None or "algorithm" not in cfg:
        return {}
    return {str(k): v for k, v in OmegaConf.to_container(cfg.algorithm, resolve=True).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
            and _get(found.saved, f"algorithm.{k}") not in (_UNSET, v)}
