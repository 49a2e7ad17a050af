"""Helpers for the scripts in ``recipes/``, kept out of the library core.

:mod:`jaxtrainer.recipes.config` loads a recipe's YAML file with ``key=value``
command-line overrides and builds the Trainer, the environment and the final
report from it; :mod:`~jaxtrainer.recipes._components` builds the loggers and
callbacks of its ``logger:`` and ``callbacks:`` sections,
:mod:`~jaxtrainer.recipes._usage` writes ``--help`` and ``--print-config``, and
:mod:`~jaxtrainer.recipes._command` runs a recipe as a command (one-line config
errors, the run's ``config.yaml``, the final evaluation in the logs). The library (``jaxtrainer.Trainer``, modules, strategies) does
not import it.
"""
