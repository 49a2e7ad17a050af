"""Loggers and callbacks from a recipe config: the ``logger:`` and ``callbacks:`` sections.

Each entry of these sections names one class (:data:`LOGGERS`,
:data:`CALLBACKS`) and is ``true`` (the class with its defaults), ``false`` or
``null`` (off), or a mapping of the class's keyword arguments (on). Setting any
of an entry's keys turns it on, so a command line needs only the key::

    python recipes/ppo.py callbacks.checkpoint.every_n_steps=100 logger.wandb.mode=offline

The keys an entry accepts are read from its class's ``__init__`` signature
(:func:`entry_keys`), so a new argument of a callback is a config key with
nothing to update here; the :class:`~jaxtrainer.loggers.WandbLogger` entry also
takes the keyword arguments of ``wandb.init`` that its ``**init_kwargs`` passes
on (``tags``, ``entity``, ``group``, ...).

Two Trainer arguments of the ``trainer:`` section stay the master switches:
``trainer.logger=false`` turns every logger off (whatever ``logger:`` says) and
``trainer.enable_checkpointing=false`` the checkpoint callback.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from jaxtrainer._arguments import did_you_mean
from jaxtrainer.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    NaNGuard,
    ProfilerCallback,
    ThroughputMonitor,
    Timer,
    VideoCallback,
)
from jaxtrainer.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from jaxtrainer.runtime._optional import import_optional

LOGGERS: dict[str, type[Callback]] = {
    "csv": CSVLogger, "tensorboard": TensorBoardLogger, "wandb": WandbLogger}
"""The ``logger:`` entries: config name -> logger class."""

CALLBACKS: dict[str, type[Callback]] = {
    "checkpoint": ModelCheckpoint, "early_stopping": EarlyStopping, "nan_guard": NaNGuard,
    "timer": Timer, "lr_monitor": LearningRateMonitor, "throughput": ThroughputMonitor,
    "profiler": ProfilerCallback, "video": VideoCallback}
"""The ``callbacks:`` entries: config name -> callback class."""

SECTIONS: dict[str, dict[str, type[Callback]]] = {"logger": LOGGERS, "callbacks": CALLBACKS}
"""Config sections whose entries build loggers and callbacks."""

PASSED_ON: dict[type, tuple[str, Callable[[], Callable[..., Any]]]] = {
    WandbLogger: ("wandb.init", lambda: import_optional("wandb", "wandb", "WandbLogger").init)}
"""Classes whose ``**kwargs`` go to another function: ``(its name, a function returning
it)``; the entry also accepts that function's keyword arguments."""


def passed_on_keys(cls: type) -> tuple[str, ...]:
    """The keyword arguments of the function that ``cls``'s ``**kwargs`` go to
    (:data:`PASSED_ON`), without those ``cls`` takes itself; ``()`` for others.
    Imports that function's module (``wandb`` for the WandbLogger).

    Raises:
      ModuleNotFoundError: that module's package is not installed (naming the extra).
    """
    if cls not in PASSED_ON:
        return ()
    own = set(own_keys(cls))
    return tuple(p for p in inspect.signature(PASSED_ON[cls][1]()).parameters if p not in own)


def own_keys(cls: type) -> tuple[str, ...]:
    """The keyword arguments of ``cls.__init__`` (signature order), as the
    ``trainer:`` keys are read (:func:`jaxtrainer.recipes.config.accepted_keys`)."""
    from jaxtrainer.recipes.config import accepted_keys

    return accepted_keys(cls)


def entry_keys(cls: type) -> tuple[str, ...]:
    """Every key an entry of class ``cls`` accepts: :func:`own_keys` then
    :func:`passed_on_keys`."""
    return own_keys(cls) + passed_on_keys(cls)


def known_keys() -> list[str]:
    """Every dotted key of the two sections naming an entry or one of its
    class's own arguments (for "did you mean"): ``logger.csv``,
    ``logger.csv.save_dir``, ..."""
    keys = []
    for section, registry in SECTIONS.items():
        for name, cls in registry.items():
            keys += [f"{section}.{name}"] + [f"{section}.{name}.{k}" for k in own_keys(cls)]
    return keys


def check_key(dotted: str, source: str = "") -> None:
    """Check a dotted key under ``logger``/``callbacks`` (an override's or a
    config file's): ``<section>.<entry>`` or ``<section>.<entry>.<argument>``
    (deeper keys set inside a mapping-valued argument, e.g. wandb's ``config``).

    Raises:
      ValueError: an unknown entry or argument; the message lists the choices
        and the closest one.
      ModuleNotFoundError: telling an argument of the function the entry's class
        passes its ``**kwargs`` to needs that function's package, which is not
        installed (``logger.wandb.tags`` without wandb; naming the extra).
    """
    parts = dotted.split(".")
    section, registry = parts[0], SECTIONS[parts[0]]
    if len(parts) < 2:
        return
    name = parts[1]
    if name not in registry:
        raise ValueError(f"{source}unknown config key {dotted!r}: {section} has keys: "
                         f"{', '.join(registry)}" + did_you_mean(name, registry))
    if len(parts) > 2:
        cls, arg = registry[name], parts[2]
        keys = own_keys(cls)
        if arg not in keys and arg not in _entry(section, name, passed_on_keys, cls):
            extra = f" (and {PASSED_ON[cls][0]}'s)" if cls in PASSED_ON else ""
            raise ValueError(f"{source}unknown config key {dotted!r}: "
                             f"{section}.{name} ({cls.__name__}) has keys: {', '.join(keys)}{extra}"
                             + did_you_mean(arg, entry_keys(cls)))


def _entry(section: str, name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` for entry ``section.name``: its ``ValueError`` or
    ``ModuleNotFoundError`` (a package the entry needs is not installed) again, with
    the entry first (``logger.wandb: WandbLogger needs wandb, ...``)."""
    try:
        return call(*args, **kwargs)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"{section}.{name}: {e}", name=e.name) from e
    except ValueError as e:
        raise ValueError(f"{section}.{name}: {e}") from e


def check_entries(cfg: DictConfig) -> None:
    """Check every entry of the ``logger:`` and ``callbacks:`` sections of ``cfg``
    (those it has): a known name whose value is a bool, null or a mapping of
    accepted keys.

    Raises:
      ValueError: naming the entry and what it accepts.
    """
    for section, registry in SECTIONS.items():
        node = cfg.get(section) if isinstance(cfg, DictConfig) else None
        if node is None:
            continue
        if not isinstance(node, DictConfig):
            raise ValueError(f"{section}={node!r}: expected a section with entries "
                             f"{', '.join(registry)}")
        for name, value in node.items_ex(resolve=False):
            check_key(f"{section}.{name}")
            if isinstance(value, DictConfig):
                for arg in value:
                    check_key(f"{section}.{name}.{arg}")
            elif value is not None and not isinstance(value, bool):
                raise ValueError(
                    f"{section}.{name}={value!r}: expected true (a {registry[name].__name__} with "
                    f"its defaults), false or null (none), or its keys, e.g. "
                    f"{section}.{name}.{next(iter(own_keys(registry[name])), 'key')}=...")


def _check_renderer(cfg: DictConfig) -> None:
    """With ``callbacks.video`` on, check that ``env.name``'s renderer is installed
    (the VideoCallback alone would train without videos, saying why when training starts).

    Raises:
      ModuleNotFoundError: naming the entry, the package and its extra.
    """
    from jaxtrainer.envs.rendering import missing_pygame

    video, name = OmegaConf.select(cfg, "callbacks.video"), OmegaConf.select(cfg, "env.name")
    missing = missing_pygame(name) if is_on(video) and isinstance(name, str) else None
    if missing is not None:
        raise ModuleNotFoundError(f"callbacks.video: {missing}", name="pygame")


def is_on(value: Any) -> bool:
    """Whether an entry's value turns it on: ``true`` or a mapping."""
    return value is True or isinstance(value, (Mapping, DictConfig))


def build(section: str, name: str, value: Any) -> Callback:
    """The logger or callback of one entry that :func:`is_on`.

    Raises:
      ValueError: a required argument is missing, or the class rejects a value
        (its message, prefixed with the entry: ``callbacks.checkpoint:
        every_n_steps=0: expected a positive int or None``).
      ModuleNotFoundError: a package the class needs is not installed (prefixed
        with the entry, naming the extra).
    """
    cls = SECTIONS[section][name]
    kwargs = OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else \
        dict(value) if isinstance(value, Mapping) else {}
    required = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.default is p.empty and p.name != "self"
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in kwargs]
    if required:
        raise ValueError(f"{section}.{name} ({cls.__name__}) needs "
                         + ", ".join(f"{section}.{name}.{r}" for r in required)
                         + f", e.g. {section}.{name}.{required[0]}=...")
    return _entry(section, name, cls, **kwargs)


def trainer_arguments(cfg: DictConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` (a Trainer's keyword arguments from ``trainer:``) with the
    loggers and callbacks of ``cfg``'s ``logger:`` and ``callbacks:`` sections
    added to ``callbacks``; unchanged when ``cfg`` has neither section.

    With a ``logger:`` section and ``logger=True``, its loggers are built and
    ``logger`` becomes ``False`` (so the Trainer adds no default beside them;
    ``logger: {csv: false, ...}`` means no CSV file). With ``callbacks.checkpoint``
    off, ``enable_checkpointing`` becomes ``False``. A ``logger`` or
    ``enable_checkpointing`` that is not ``True`` is passed on as it is: ``False``
    turns the section's loggers (or checkpoint) off, anything else is the
    Trainer's ValueError.

    Raises:
      ValueError: from :func:`check_entries` and :func:`build`.
      ModuleNotFoundError: an entry that is on needs a package that is not
        installed (from :func:`build`; ``callbacks.video`` of an env drawn with pygame).
    """
    check_entries(cfg)
    _check_renderer(cfg)
    kwargs = dict(kwargs)
    built: list[Callback] = []
    loggers = cfg.get("logger")
    if isinstance(loggers, DictConfig) and kwargs.get("logger", True) is True:
        built += [build("logger", n, v) for n, v in loggers.items_ex(resolve=False) if is_on(v)]
        kwargs["logger"] = False
    callbacks = cfg.get("callbacks")
    if isinstance(callbacks, DictConfig):
        for name, value in callbacks.items_ex(resolve=False):
            if name == "checkpoint":
                if kwargs.get("enable_checkpointing", True) is not True:
                    continue
                if not is_on(value):
                    kwargs["enable_checkpointing"] = False
                    continue
            if is_on(value):
                built.append(build("callbacks", name, value))
    if built:
        kwargs["callbacks"] = built + list(kwargs.get("callbacks") or [])
    return kwargs
