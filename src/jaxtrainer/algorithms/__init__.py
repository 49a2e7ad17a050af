"""Algorithms as :class:`jaxtrainer.Module` subclasses.

Each name is imported from its submodule on first use (``from
jaxtrainer.algorithms import PPO`` imports ``jaxtrainer.algorithms.ppo`` and what
it needs, not the other algorithms: a PPO run does not pay for importing evosax).
The names and their submodules are listed in ``__init__.pyi``, which type
checkers and the API reference read.
"""

import lazy_loader

_getattr, _dir, __all__ = lazy_loader.attach_stub(__name__, __file__)

MOVED = {"PBT": "jaxtrainer.population", "PBTState": "jaxtrainer.population",
         "Hyperparam": "jaxtrainer.population", "Sweep": "jaxtrainer.population",
         "SweepState": "jaxtrainer.population"}
"""Names that moved to another package in 0.2.0: still found here, with a
DeprecationWarning naming their new home, until 0.3.0."""
__all__ = [*__all__, *MOVED]


def __dir__() -> list[str]:
    return sorted({*_dir(), *MOVED})


def __getattr__(name: str):
    if name in MOVED:
        import importlib

        from jaxtrainer.deprecation import warn_moved

        warn_moved(f"jaxtrainer.algorithms.{name}", f"{MOVED[name]}.{name}")
        return getattr(importlib.import_module(MOVED[name]), name)
    return _getattr(name)
