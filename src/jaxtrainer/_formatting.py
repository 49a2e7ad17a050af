"""Numbers as the commands print them."""

from __future__ import annotations


def fixed(value: float, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals, as ``f"{value:.{digits}f}"`` but never
    a negative zero: ``-0.001`` prints ``0.00``, not ``-0.00`` (a return that
    rounds to zero has no sign worth reading). ``nan`` and ``inf`` print as
    Python does (``nan``, ``-inf``)."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and text.strip("-0.") == "" else text
