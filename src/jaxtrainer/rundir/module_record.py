"""How a module started from Python is rebuilt from its run directory.

``Trainer.fit`` writes ``<run_dir>/module.yaml`` for a module it can rebuild
(as Lightning's ``save_hyperparameters`` does for a LightningModule): the
module's class as an import path, the file that defines it, and the arguments
its constructor was called with::

    class_path: actor_critic.ActorCritic
    source: /home/me/project/actor_critic.py
    init_args: {num_envs: 16, rollout: 16}

``jaxtrainer eval RUN`` and :func:`jaxtrainer.load_policy` then rebuild the
module by importing the class (or, where its module cannot be imported by
name, such as a script run as ``__main__``, by loading ``source``) and calling
it with ``init_args``. A script is run as a module of another name than
``__main__`` (its guarded main part does not run) and only up to its first
Trainer call (``fit``, ``evaluate``, ``load_policy``): a script that trains at
top level is not trained again. A module whose constructor arguments are not plain
values (numbers, strings, booleans, None, lists and dicts of them, and config
dataclasses of them, such as ``PPO(PPOConfig(env="CartPole-v1"))``) gets no
record; pass it yourself (``load_policy(path, module=...)``). Runs started by a
recipe are rebuilt from their ``config.yaml`` instead.
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from jaxtrainer.rundir import run_layout

MODULE_FILE = run_layout.MODULE_FILE
"""The run directory's record of a module started from Python."""


class _NotPlain(Exception):
    """A constructor argument that cannot be written as plain values."""


def _encode(value: Any) -> Any:
    """``value`` as plain values (numbers, strings, booleans, None, lists, dicts);
    a dataclass instance (a config such as ``PPOConfig(env="CartPole-v1")``) as
    ``{"class_path": ..., "init_args": {its fields that differ from their defaults}}``.

    Raises:
      _NotPlain: some part of it is none of these.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _NotPlain(value)
        return {k: _encode(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if "<locals>" in cls.__qualname__:
            raise _NotPlain(value)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}",
                "init_args": {f.name: _encode(getattr(value, f.name))
                              for f in dataclasses.fields(value)
                              if f.init and not _is_default(f, getattr(value, f.name))}}
    raise _NotPlain(value)


def _is_default(field: dataclasses.Field, value: Any) -> bool:
    if field.default is not dataclasses.MISSING:
        default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        return False
    try:
        return type(default) is type(value) and bool(default == value)
    except Exception:  # an array field: compare nothing, write it
        return False


def _decode(value: Any, source: str | None) -> Any:
    """:func:`_encode` undone: a ``{"class_path", "init_args"}`` mapping is its
    class called with its (decoded) arguments."""
    if isinstance(value, list):
        return [_decode(v, source) for v in value]
    if isinstance(value, dict):
        if set(value) == {"class_path", "init_args"} and isinstance(value["class_path"], str):
            cls = _load_class(value["class_path"], source)
            return cls(**{k: _decode(v, source) for k, v in (value["init_args"] or {}).items()})
        return {k: _decode(v, source) for k, v in value.items()}
    return value


def record(module: Any) -> dict[str, Any] | None:
    """``{"class_path", "source", "init_args"}`` for ``module``, or ``None``
    when its constructor arguments were not captured or are not plain values
    (config dataclasses of plain values count as plain: :func:`_encode`)."""
    captured = getattr(module, "_init_arguments", None)
    if captured is None:
        return None
    cls = type(module)
    try:
        bound = inspect.signature(cls).bind(*captured[0], **captured[1])
    except (TypeError, ValueError):
        return None
    args = dict(bound.arguments)
    for name, param in inspect.signature(cls).parameters.items():
        if param.kind is param.VAR_KEYWORD and name in args:
            args.update(args.pop(name))
        elif param.kind is param.VAR_POSITIONAL and name in args:
            return None
    try:
        init_args = _encode(args)
    except _NotPlain:
        return None
    try:
        source = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        source = None
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}",
            "source": os.path.abspath(source) if source else None,
            "init_args": init_args}


def write(run_dir: str | os.PathLike, module: Any) -> bool:
    """Write ``module.yaml`` for ``module`` into ``run_dir`` unless the run has a
    recipe's ``config.yaml`` or the module cannot be recorded. Returns whether
    it was written."""
    run_dir = Path(run_dir)
    rec = record(module)
    if rec is None or (run_dir / run_layout.CONFIG_FILE).exists():
        return False
    try:
        text = OmegaConf.to_yaml(OmegaConf.create(rec))
    except OmegaConfBaseException:
        return False
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / MODULE_FILE).write_text(text)
    return True


_LOADING_SOURCE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxtrainer_loading_module_source", default=False)
"""Set while a recorded script runs to define its module's class (:func:`_load_class`)."""


class SourceLoaded(BaseException):
    """Ends the run of a recorded script at its first Trainer call: the module's class
    is defined by then, and the training below it must not run again (a script
    without an ``if __name__ == "__main__":`` guard). A BaseException, so that the
    script's own ``except Exception`` does not swallow it."""


def stop_if_loading() -> None:
    """Raise :class:`SourceLoaded` when called from a script that is being run only
    to rebuild a recorded module's class (``Trainer.prepare`` calls it)."""
    if _LOADING_SOURCE.get():
        raise SourceLoaded()


def _run_source(name: str, source: str) -> Any:
    """Run ``source`` as module ``name`` (not ``__main__``: a guarded script's main
    part does not run) up to its first Trainer call, and return its namespace."""
    spec = importlib.util.spec_from_file_location(name, source)
    namespace = importlib.util.module_from_spec(spec)
    sys.modules[name] = namespace
    token = _LOADING_SOURCE.set(True)
    try:
        spec.loader.exec_module(namespace)
    except SourceLoaded:
        pass  # everything above the script's first fit/evaluate/load_policy ran
    finally:
        _LOADING_SOURCE.reset(token)
    return namespace


def _load_class(class_path: str, source: str | None) -> type:
    module_name, _, qualname = class_path.rpartition(".")
    try:
        if module_name == "__main__":
            raise ImportError(module_name)
        namespace: Any = importlib.import_module(module_name)
    except ImportError:
        if not source or not Path(source).is_file():
            raise FileNotFoundError(
                f"cannot rebuild the run's module {class_path}: {module_name!r} does not "
                f"import here and its source file {source!r} is gone; put it back (or on "
                "PYTHONPATH), or pass the module: load_policy(path, module=...)") from None
        namespace = _run_source(f"jaxtrainer_saved_{Path(source).stem}", source)
    for part in qualname.split("."):
        namespace = getattr(namespace, part, None)
        if namespace is None:
            raise FileNotFoundError(
                f"cannot rebuild the run's module {class_path}: {source or module_name} does "
                f"not define {qualname} before its first Trainer call; pass the module: "
                "load_policy(path, module=...)")
    return namespace


def load(run_dir: str | os.PathLike) -> tuple[type, dict[str, Any]]:
    """``(the module's class, its recorded constructor arguments)`` from
    ``run_dir/module.yaml``.

    Raises:
      FileNotFoundError: no ``module.yaml`` in ``run_dir``, or the class can be
        neither imported nor loaded from its source file (one line, naming both).
    """
    file = Path(run_dir) / MODULE_FILE
    if not file.is_file():
        raise FileNotFoundError(f"no {MODULE_FILE} in {run_dir}")
    rec = OmegaConf.to_container(OmegaConf.load(file))
    source = rec.get("source")
    return (_load_class(rec["class_path"], source),
            _decode(dict(rec.get("init_args") or {}), source))


def build(run_dir: str | os.PathLike, init_args: dict[str, Any] | None = None) -> Any:
    """The module recorded in ``run_dir/module.yaml``, with ``init_args``
    overriding recorded arguments of the same name (raises as :func:`load`)."""
    cls, args = load(run_dir)
    return cls(**{**args, **(init_args or {})})


def exists(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` holds a ``module.yaml``."""
    return (Path(run_dir) / MODULE_FILE).is_file()
