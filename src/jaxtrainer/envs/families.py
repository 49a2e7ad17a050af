"""What every optional environment family shares: its import, its names, its observations.

A family (``navix/...``, ``xminigrid/...``, ``gymnasium/...``) is an optional
package behind a name prefix. Its adapter module imports it through
:func:`import_family` only when :func:`jaxtrainer.envs.make` is asked for one of
its names, so ``import jaxtrainer`` never imports it, and a missing package is a
one-line :class:`ImportError` naming the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer import _arguments as arguments


def import_family(module: str, prefix: str, extra: str) -> ModuleType:
    """Import a family's package, or say in one line which extra installs it.

    Args:
      module: the module to import (``"navix"``).
      prefix: the family's name prefix without the slash (``"navix"``).
      extra: the jaxtrainer extra that installs it (``"navix"``).

    Returns:
      The imported module.

    Raises:
      ImportError: the package is not installed (or fails to import):
        ``navix/... environments need navix: pip install -e ".[navix]"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f'{prefix}/... environments need {module}: '
                          f'pip install -e ".[{extra}]" (in a checkout; '
                          f'pip install "jaxtrainer[{extra}]" otherwise)') from e


def unknown_name(name: str, prefix: str, names: Iterable[str]) -> ValueError:
    """The error for a name the family does not have, with the close choices.

    Args:
      name: the name asked for, without the prefix.
      prefix: the family's prefix without the slash.
      names: every name the installed family registers.

    Returns:
      A :class:`ValueError` to raise, one line:
      ``unknown navix environment 'navix/X'; did you mean 'navix/Y'?`` (the
      closest name), or the list of all names when none is close.
    """
    full = sorted(f"{prefix}/{n}" for n in names)
    hint = arguments.did_you_mean(f"{prefix}/{name}", full)
    listed = "" if hint else f"; available: {', '.join(full)}"
    return ValueError(f"unknown {prefix} environment {prefix + '/' + name!r}{hint}{listed}")


def flat_float32(obs: Any) -> jax.Array:
    """One observation as ``float32[size]``: an array of any shape and numeric (or bool)
    dtype flattened, or a structured one (a pytree: a NamedTuple, dict...) as its
    leaves flattened and concatenated in pytree order."""
    return jnp.concatenate([jnp.asarray(x, jnp.float32).reshape(-1)
                            for x in jax.tree.leaves(obs)])
