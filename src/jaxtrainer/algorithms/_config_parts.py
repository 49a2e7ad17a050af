"""Parts: a group of dataclass fields declared once (a dataclass such as
:class:`~jaxtrainer.algorithms.advantages.GAEConfig`) and composed, flat, into
every config (or state) that has them, so a key keeps one name everywhere
(``config.gae_lambda``, YAML ``algorithm.gae_lambda``,
``dataclasses.replace(config, gae_lambda=0.9)``) without a base class for each
group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def composes(*parts: type, after_own: bool = False, **defaults: Any) -> Callable[[type], type]:
    """A class decorator, applied before ``@dataclasses.dataclass`` (or
    ``@flax.struct.dataclass``): the class declares every field of ``parts``, in
    their order, before its own fields (``after_own``: after them), with
    ``defaults`` in place of the parts' defaults. The parts are kept as the
    class's ``composed_parts``, whose docstrings document their fields.

    Raises:
      TypeError: a part that is not a dataclass, a field the class declares
        itself, or a key of ``defaults`` that names no field of ``parts``.
    """

    def compose(cls: type) -> type:
        own = dict(cls.__dict__.get("__annotations__", {}))
        added: dict[str, Any] = {}
        for part in parts:
            for f in dataclasses.fields(part):
                if f.name in own:
                    raise TypeError(
                        f"{cls.__name__} composes {part.__name__}: its field "
                        f"{f.name!r} is declared again"
                    )
                added[f.name] = f.type
                default = defaults.get(f.name, f.default)
                if default is not dataclasses.MISSING or f.metadata:
                    setattr(cls, f.name, dataclasses.field(default=default, metadata=f.metadata))
        unknown = sorted(set(defaults) - set(added))
        if unknown:
            raise TypeError(
                f"{cls.__name__}: defaults for {unknown}, which no part of "
                f"{[p.__name__ for p in parts]} declares"
            )
        cls.__annotations__ = {**own, **added} if after_own else {**added, **own}
        cls.composed_parts = parts
        return cls

    return compose


def values(part: type, config: Any) -> dict[str, Any]:
    """``{field: value}`` of ``part``'s fields, read from ``config`` (a config
    composing it)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(part)}
