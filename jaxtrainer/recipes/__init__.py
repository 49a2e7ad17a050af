"""Helpers for the scripts in ``recipes/``, kept out of the library core.

:mod:`jaxtrainer.recipes.config` loads a recipe's YAML file with ``key=value``
command-line overrides and builds the Trainer, the environment and the final
report from it. The library (``jaxtrainer.Trainer``, modules, strategies) does
not import it.
"""
