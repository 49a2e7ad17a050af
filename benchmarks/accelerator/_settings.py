"""One ``--set NAME=VALUE`` of a peer's driver: the text as the type of the setting it replaces."""

from __future__ import annotations


def value(text: str, like: object) -> object:
    """``text`` as ``like``'s type: a tuple of ints from ``a,b,...``, a bool from
    ``true``/``false``, an int or float through ``float`` (``1e7`` for an int), anything
    else the text itself."""
    if isinstance(like, tuple):
        return tuple(int(x) for x in text.split(","))
    if isinstance(like, bool):
        return text.lower() == "true"
    return type(like)(float(text)) if isinstance(like, (int, float)) else text
