"""jaxtrainer: train RL agents and evolving populations in JAX on any device layout.

Each exported name is imported from its submodule on first use, so ``import
jaxtrainer`` (and every ``jaxtrainer`` command's ``--help``) does not import JAX:
``jaxtrainer.Trainer`` imports the Trainer and what it needs. The names and
their submodules are listed in ``__init__.pyi``, which type checkers and the
API reference read.
"""

import lazy_loader

from jaxtrainer import aliases

__version__ = "0.2.0"

aliases.install()  # module paths found at a second place (moved: with a warning, until 0.3.0)

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
