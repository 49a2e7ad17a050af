"""Config parts: a group of fields declared once (a frozen dataclass, such as
:class:`~jaxtrainer.algorithms.advantages.GAEConfig`) and composed, flat, into
every algorithm config that has them, so a key keeps one name everywhere
(``config.gae_lambda``, YAML ``algorithm.gae_lambda``,
``dataclasses.replace(config, gae_lambda=0.9)``) without a base class for each
group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def composes(*parts: type, **defaults: Any) -> Callable[[type], type]:
    """A class decorator, applied before ``@dataclasses.dataclass``: the class
    declares every field of ``parts`` (in their order, before its own fields),
    with ``defaults`` in place of the parts' defaults.

    Raises:
      TypeError: a part that is not a dataclass, a field with no default, a
        field the class declares itself, or a key of ``defaults`` that names no
        field of ``parts``.
    """

    def compose(cls: type) -> type:
        own = dict(cls.__dict__.get("__annotations__", {}))
        added: dict[str, Any] = {}
        for part in parts:
            for f in dataclasses.fields(part):
                if f.name in own or f.default is dataclasses.MISSING:
                    raise TypeError(
                        f"{cls.__name__} composes {part.__name__}: its field "
                        f"{f.name!r} is declared again or has no default"
                    )
                added[f.name] = f.type
                setattr(cls, f.name, defaults.get(f.name, f.default))
        unknown = sorted(set(defaults) - set(added))
        if unknown:
            raise TypeError(
                f"{cls.__name__}: defaults for {unknown}, which no part of "
                f"{[p.__name__ for p in parts]} declares"
            )
        cls.__annotations__ = {**added, **own}
        return cls

    return compose


def values(part: type, config: Any) -> dict[str, Any]:
    """``{field: value}`` of ``part``'s fields, read from ``config`` (a config
    composing it)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(part)}
