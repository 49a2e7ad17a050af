"""The ``__main__`` of ``recipes/<name>.py``: this module imports no JAX, so a
script that imports it first takes Ctrl-C from its first line
(:func:`jaxtrainer.startup.begin`) before the heavy imports start."""

from __future__ import annotations

import sys

from jaxtrainer import startup


def main(recipe: str) -> None:
    """Run ``recipe`` as the command ``sys.argv[0]``: :func:`jaxtrainer.startup.begin`,
    then :func:`jaxtrainer.recipes.fit.script` with ``sys.argv[1:]`` (a bad
    config: one line, status 2)."""
    prog = sys.argv[0]
    startup.begin(prog)
    from jaxtrainer.recipes import fit  # the heavy imports, after the guard

    fit.script(recipe, sys.argv[1:], prog=prog)
