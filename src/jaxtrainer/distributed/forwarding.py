"""A module whose names live in another module, imported on first use.

``jaxtrainer.distributed.comm``, ``.sharding`` and ``.gradients`` are EvoRL's
module paths; their functions are :mod:`jaxtrainer.compat.evorl`'s. Forwarding
keeps ``import jaxtrainer.distributed`` (and the core) from importing the
compatibility layer until EvoRL's code asks for one of its names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any


def forward(module: str, names: Sequence[str],
            here: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module ``here`` whose ``names`` are
    ``module``'s (PEP 562): ``from here import name`` imports ``module`` then."""
    known = frozenset(names)

    def getattr_(name: str) -> Any:
        if name in known:
            return getattr(importlib.import_module(module), name)
        raise AttributeError(f"module {here!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted(known)

    return getattr_, dir_
