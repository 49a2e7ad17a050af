"""Packages of the optional extras, imported where they are first needed."""

from __future__ import annotations

import importlib
from types import ModuleType


def import_optional(name: str, extra: str, purpose: str) -> ModuleType:
    """Import module ``name`` (of an optional extra).

    Raises:
      ModuleNotFoundError: its package is not installed; the message names
        ``purpose`` and the extra that installs it (``pip install 'jaxtrainer[<extra>]'``).
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing != name.split(".")[0]:
            raise  # the package is there; something it imports is not
        raise ModuleNotFoundError(f"{purpose} needs {missing}, which is not installed: "
                                  f"pip install 'jaxtrainer[{extra}]'", name=missing) from None
