"""Packages of the optional extras, imported where they are first needed."""

from __future__ import annotations

import importlib
import importlib.util
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
        raise ModuleNotFoundError(_not_installed(missing, extra, purpose), name=missing) from None


def check_installed(package: str, extra: str, purpose: str) -> None:
    """Check that top-level ``package`` (of an optional extra) is installed, without
    importing it: for objects that import it later (a logger when ``fit`` starts), so
    a missing one is said when they are made, before anything compiles.

    Raises:
      ModuleNotFoundError: as :func:`import_optional`'s.
    """
    try:
        found = importlib.util.find_spec(package) is not None
    except ValueError:  # imported without a spec (a module made at run time): it is there
        found = True
    if not found:
        raise ModuleNotFoundError(_not_installed(package, extra, purpose), name=package)


def _not_installed(package: str, extra: str, purpose: str) -> str:
    return f"{purpose} needs {package}, which is not installed: pip install 'jaxtrainer[{extra}]'"
