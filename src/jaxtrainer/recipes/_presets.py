"""Per-environment presets of the recipes: tuned settings picked by ``env.name``.

A recipe's YAML holds settings that suit its family of environments; some
environments are benchmarked at a published budget and have their own tuned
settings, as RL Zoo keeps a hyperparameter file per algorithm with an entry per
environment. ``jaxtrainer/recipes/presets/<recipe>.yaml`` maps an env name to
dotted keys of the recipe's config::

    Pendulum-v1:                 # where it came from: the search command and its budget
      trainer.max_env_steps: 20000
      algorithm.hidden_sizes: [256, 256]

The rule: ``jaxtrainer fit <recipe>`` (and ``python recipes/<recipe>.py``)
applies the preset of the env it trains (``env.name`` of the command line, else
of the recipe's YAML) over the recipe's YAML; every ``section.key=value`` given
on the command line wins over it. With ``--config FILE`` no preset applies: the
file (with the recipe's YAML under it) is the whole config. A resumed run uses
the config it saved. ``jaxtrainer fit <recipe>`` prints the preset's settings
when it starts; ``--print-config`` names it in its first line; ``jaxtrainer fit
--list`` lists each recipe's presets.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import yaml

PRESETS = Path(__file__).parent / "presets"
"""The presets' YAML files (package data), one per recipe that has any."""


class Preset(NamedTuple):
    """One recipe's settings for one environment.

    Attributes:
      recipe: the recipe's name (``"sac"``).
      env: the env name it applies to (``"Pendulum-v1"``).
      settings: ``{dotted key: value}`` in file order (``{"algorithm.batch_size": 256}``).
    """

    recipe: str
    env: str
    settings: dict[str, Any]

    def describe(self) -> str:
        """``preset sac/Pendulum-v1 (<file>): key=value, ...`` on one line."""
        shown = ", ".join(f"{k}={_plain(v)}" for k, v in self.settings.items())
        return f"preset {self.recipe}/{self.env} ({file_of(self.recipe).name}): {shown}"


def _plain(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...")\
        .strip()


def file_of(recipe: str) -> Path:
    """``presets/<recipe>.yaml`` (which need not exist)."""
    return PRESETS / f"{recipe}.yaml"


def of(recipe: str) -> dict[str, dict[str, Any]]:
    """``{env name: {dotted key: value}}`` of ``recipe`` (``{}`` when it has none).

    Raises:
      ValueError: a file whose top level is not env names mapping to mappings.
    """
    path = file_of(recipe)
    if not path.is_file():
        return {}
    loaded = yaml.safe_load(path.read_text()) or {}
    if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
        raise ValueError(f"{path}: expected env names, each mapping dotted keys to values")
    return {str(env): {str(k): v for k, v in settings.items()} for env, settings in loaded.items()}


def pick(recipe: str, env: str | None) -> Preset | None:
    """The preset of ``recipe`` for env ``env``, or ``None``."""
    settings = of(recipe).get(str(env)) if env is not None else None
    return Preset(recipe, str(env), settings) if settings else None


def applies(path: str | os.PathLike, defaults: str | os.PathLike | None) -> bool:
    """Whether a config loaded from ``path`` over ``defaults`` takes a preset:
    only the recipe's own YAML does (no ``--config`` file)."""
    return defaults is None or os.path.realpath(path) == os.path.realpath(defaults)


def env_of(overrides: list[str], default: Any) -> str | None:
    """The ``env.name`` the command line gives (its last ``env.name=``), else ``default``."""
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == "env.name"]
    value = given[-1] if given else default
    return None if value is None else str(value)


def listing(recipe: str) -> str:
    """``"presets: A, B"`` for ``jaxtrainer fit --list``, or ``""``."""
    names = list(of(recipe))
    return f"presets: {', '.join(names)}" if names else ""
