"""Algorithms as :class:`jaxtrainer.Module` subclasses.

Each name is imported from its submodule on first use (``from
jaxtrainer.algorithms import PPO`` imports ``jaxtrainer.algorithms.ppo`` and what
it needs, not the other algorithms: a PPO run does not pay for importing evosax).
The names and their submodules are listed in ``__init__.pyi``, which type
checkers and the API reference read.
"""

import lazy_loader

from jaxtrainer import aliases

_getattr, _dir, __all__ = lazy_loader.attach_stub(__name__, __file__)
# names that moved to another package in 0.2.0: still found here, with a
# DeprecationWarning naming their new home, until 0.3.0 (jaxtrainer.aliases.ALIASES)
__getattr__, __dir__ = aliases.attach(__name__, _getattr, _dir)
__all__ = [*__all__, *aliases.names_of(__name__)]
