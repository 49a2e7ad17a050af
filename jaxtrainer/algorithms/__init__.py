"""Algorithms as :class:`jaxtrainer.Module` subclasses.

Each name is imported from its submodule on first use (``from
jaxtrainer.algorithms import PPO`` imports ``jaxtrainer.algorithms.ppo`` and what
it needs, not the other algorithms: a PPO run does not pay for importing evosax).
The names and their submodules are listed in ``__init__.pyi``, which type
checkers and the API reference read.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
