"""The marker for an argument left out, so that a form's own ``None`` stays a value."""

from __future__ import annotations

from typing import Any


class _Unset:
    """Marks an argument left out (shown as ``<unset>`` in signatures)."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()

