"""Recipe configs: a YAML file plus ``key=value`` command-line overrides (omegaconf).

A recipe config has a ``trainer:`` section whose keys are the
:class:`~jaxtrainer.Trainer` arguments plus ``ckpt_path``, and sections of its
own (``env:``, ``algorithm:``). The accepted trainer keys are read from the
Trainer's (or PopulationTrainer's) signature, so a new Trainer argument is a
config key with nothing to update here. Overrides use omegaconf's dotlist syntax::

    python recipes/ppo.py trainer.strategy=pmap env.name=Acrobot-v1 algorithm.lr=1e-3
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from jaxtrainer import envs
from jaxtrainer.module import Module
from jaxtrainer.population import PopulationTrainer
from jaxtrainer.trainer import Trainer

NOT_FROM_YAML = ("self", "callbacks")
"""Trainer arguments that a YAML file cannot give: callbacks are Python objects
(a recipe passes them as keyword overrides of :func:`make_trainer`)."""


def accepted_keys(cls: type) -> tuple[str, ...]:
    """The keyword arguments of ``cls.__init__`` that a ``trainer:`` section may
    set, in signature order: all but :data:`NOT_FROM_YAML` and ``*args``/``**kwargs``."""
    return tuple(name for name, p in inspect.signature(cls.__init__).parameters.items()
                 if name not in NOT_FROM_YAML
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


TRAINER_KEYS = accepted_keys(Trainer)
POPULATION_TRAINER_KEYS = accepted_keys(PopulationTrainer)


OPEN_SECTIONS = ("env",)
"""Sections to which a ``--config`` file or a command-line override may add keys
that the recipe's YAML lacks: an environment's keyword arguments differ by
environment (e.g. brax's ``backend``); :func:`make_env` rejects the ones the
environment does not take."""


def _check_key(base: DictConfig, dotted: str, source: str = "") -> None:
    node: Any = base
    walked: list[str] = []
    for part in dotted.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            where = ".".join(walked) or "<top level>"
            choices = ", ".join(sorted(str(k) for k in node)) if isinstance(node, DictConfig) else "none"
            raise ValueError(f"{source}unknown config key {dotted!r}: {where} has keys: {choices}")
        node = node[part]
        walked.append(part)


def _leaf_keys(node: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items_ex(resolve=False):
        dotted = f"{prefix}{key}"
        keys.extend(_leaf_keys(value, dotted + ".") if isinstance(value, DictConfig) else [dotted])
    return keys


def load(path: str | os.PathLike, overrides: Sequence[str] = (),
         defaults: str | os.PathLike | None = None) -> DictConfig:
    """Load ``path`` and apply ``overrides`` (``"a.b=value"`` strings).

    With ``defaults`` (the recipe's own YAML file) and a different ``path`` (a
    ``--config`` file), ``path`` is merged over ``defaults``: it need only hold
    what differs, and each of its keys must exist in ``defaults`` (except under
    the sections in :data:`OPEN_SECTIONS`).

    Raises:
      ValueError: an override that is not ``key=value``, or a key (in an
        override or in the ``--config`` file) that is not in the defaults (the
        message names the file and lists the keys that exist there).
    """
    base = OmegaConf.load(path)
    if defaults is not None and os.path.realpath(defaults) != os.path.realpath(path):
        schema = OmegaConf.load(defaults)
        for dotted in _leaf_keys(base):
            if dotted.split(".", 1)[0] not in OPEN_SECTIONS:
                _check_key(schema, dotted, source=f"{os.fspath(path)}: ")
        base = OmegaConf.merge(schema, base)
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ValueError(f"bad override {item!r}: expected key=value, e.g. trainer.seed=1")
        key = item.split("=", 1)[0].lstrip("+")
        if key.split(".", 1)[0] not in OPEN_SECTIONS or "." not in key:
            _check_key(base, key)
        if isinstance(OmegaConf.select(base, key), DictConfig):
            raise ValueError(f"bad override {item!r}: {key} is a section; set one of its keys, "
                             f"e.g. {key}.{next(iter(OmegaConf.select(base, key)), 'name')}=...")
    cfg = OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides)))
    OmegaConf.set_struct(cfg, True)
    return cfg


def trainer_kwargs(cfg: DictConfig, keys: Sequence[str] = TRAINER_KEYS,
                   accepts: str = "Trainer") -> dict[str, Any]:
    """The ``trainer:`` section as keyword arguments of ``accepts`` (without
    ``ckpt_path``): plain Python values, interpolations resolved (a
    ``ListConfig`` such as ``trainer.devices=[0]`` becomes a list, a
    ``DictConfig`` a dict), so the Trainer checks what the user wrote: an
    on/off key that is not ``true``/``false`` (``trainer.logger=flase``) or a
    malformed ``devices`` raises a ValueError naming it before anything runs.

    Raises:
      ValueError: keys other than ``keys`` and ``ckpt_path``.
    """
    section = OmegaConf.to_container(cfg.trainer, resolve=True)
    unknown = set(section) - set(keys) - {"ckpt_path"}
    if unknown:
        raise ValueError(f"unknown trainer keys {sorted(unknown)}; {accepts} accepts: "
                         f"{', '.join(keys)}, ckpt_path")
    return {k: v for k, v in section.items() if k != "ckpt_path"}


def make_trainer(cfg: DictConfig, **overrides: Any) -> Trainer:
    """A Trainer from ``cfg.trainer`` (keyword ``overrides`` win, e.g. callbacks)."""
    return Trainer(**{**trainer_kwargs(cfg), **overrides})


def make_population_trainer(cfg: DictConfig, **overrides: Any) -> PopulationTrainer:
    """A :class:`~jaxtrainer.PopulationTrainer` from ``cfg.trainer`` (keyword
    ``overrides`` win), converted and checked as in :func:`trainer_kwargs`."""
    kwargs = trainer_kwargs(cfg, POPULATION_TRAINER_KEYS, "PopulationTrainer")
    return PopulationTrainer(**{**kwargs, **overrides})


def ckpt_path(cfg: DictConfig) -> str | None:
    return cfg.trainer.get("ckpt_path")


def config_arg(argv: Sequence[str], default: str | os.PathLike) -> tuple[str | os.PathLike, list[str]]:
    """``--config PATH`` (or ``--config=PATH``) anywhere in ``argv`` picks another
    YAML file; returns ``(path, the other arguments)``.

    Raises:
      ValueError: ``--config`` without a path, or given twice.
    """
    argv, path, rest = list(argv), None, []
    i = 0
    while i < len(argv):
        item = argv[i]
        if item == "--config" or item.startswith("--config="):
            if path is not None:
                raise ValueError("--config given twice")
            if item == "--config":
                if i + 1 >= len(argv):
                    raise ValueError("--config needs a path: --config FILE")
                path, i = argv[i + 1], i + 2
                continue
            path = item.split("=", 1)[1]
            if not path:
                raise ValueError("--config needs a path: --config=FILE")
        else:
            rest.append(item)
        i += 1
    return (path if path is not None else default), rest


def section(cfg: DictConfig, name: str) -> dict[str, Any]:
    """``cfg.<name>`` as a plain dict with interpolations resolved, e.g.
    ``section(cfg, "algorithm")`` as an algorithm config's keyword arguments.

    Raises:
      ValueError: ``cfg`` has no section ``name`` (the message lists the
        sections it has).
    """
    node = cfg[name] if name in cfg else None
    if not isinstance(node, DictConfig):
        sections = ", ".join(sorted(str(k) for k, v in cfg.items_ex(resolve=False)
                                    if isinstance(v, DictConfig)))
        raise ValueError(f"config has no section {name!r}; its sections: {sections}")
    return OmegaConf.to_container(node, resolve=True)


def make_env(cfg: DictConfig) -> envs.Env:
    """The environment of the ``env:`` section: ``env.name`` (a gymnax id such
    as ``CartPole-v1``, or ``brax/<env>``) built by :func:`jaxtrainer.envs.make`
    with the section's other keys as its keyword arguments (for brax e.g.
    ``episode_length``, ``backend``).

    Raises:
      ValueError: no ``env:`` section, no ``env.name``, or an unknown name (the
        message lists the available names).
      TypeError: a key that the environment's constructor does not take.
    """
    kwargs = section(cfg, "env")
    if "name" not in kwargs:
        raise ValueError("config section 'env' has no name: set env.name, e.g. "
                         "env.name=CartPole-v1 or env.name=brax/ant")
    name = kwargs.pop("name")
    try:
        return envs.make(name, **kwargs)
    except TypeError as e:
        keys = ", ".join(f"env.{k}" for k in kwargs)
        raise TypeError(f"config keys {keys}: not all are keyword arguments of the "
                        f"environment {name!r} ({e})") from e


def fit_and_report(trainer: Trainer, module: Module, cfg: DictConfig) -> dict[str, float]:
    """Train ``module`` (from ``trainer.ckpt_path`` when the config sets one),
    evaluate it once and print the recipes' last line,
    ``eval/episode_return=<value with 2 decimals> run_dir=<trainer.log_dir>``.

    ``trainer`` is a :class:`Trainer` or a :class:`~jaxtrainer.PopulationTrainer`.

    Returns:
      The evaluation metrics, ``trainer.evaluate(module)`` (Python floats).

    Raises:
      KeyError: the evaluation has no ``eval/episode_return`` (raised after
        training and evaluating; the message lists the metrics it has).
      FileNotFoundError: ``trainer.ckpt_path`` names no checkpoint (from
        :meth:`Trainer.fit`, as do the module's size checks' ``ValueError``).
    """
    trainer.fit(module, ckpt_path=ckpt_path(cfg))
    result = trainer.evaluate(module)
    if "eval/episode_return" not in result:
        raise KeyError(f"the evaluation of {type(module).__name__} has no eval/episode_return; "
                       f"its metrics: {', '.join(sorted(result))}")
    print(f"eval/episode_return={result['eval/episode_return']:.2f} run_dir={trainer.log_dir}")
    return result
