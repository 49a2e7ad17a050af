"""The recipe scripts ``recipes/<name>.py`` of a clone: their ``__main__``
(:func:`main`) and their text (:func:`source`), one per recipe of the catalog.

This module imports no JAX, so a script that imports it first takes Ctrl-C from
its first line (:func:`jaxtrainer.runtime._startup.begin`) before the heavy imports
start. The scripts are generated: ``python -m jaxtrainer.commands.script
recipes`` writes one per :data:`jaxtrainer.recipes._catalog.RECIPES` entry (a
test checks that each file equals :func:`source`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from jaxtrainer.runtime import _startup as startup


def main(recipe: str) -> NoReturn:
    """Run ``recipe`` as the command ``sys.argv[0]``: :func:`jaxtrainer.runtime._startup.begin`,
    then :func:`jaxtrainer.commands.fit.script` with ``sys.argv[1:]`` (a bad
    config: one line, status 2), ending the process with its status as
    ``jaxtrainer fit`` does (:func:`jaxtrainer.runtime._startup.run_and_exit`)."""
    prog = sys.argv[0]
    startup.begin(prog)
    from jaxtrainer.commands import fit  # the heavy imports, after the guard

    startup.run_and_exit(lambda: fit.script(recipe, sys.argv[1:], prog=prog))


_TEMPLATE = '''"""{summary}: ``jaxtrainer fit {name}`` as a script.

    python recipes/{name}.py --help            # the examples, and every key with its value
    python recipes/{name}.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="{name}")


if __name__ == "__main__":
    script.main("{name}")  # a bad config: one line, status 2; Ctrl-C while starting: one line
'''


def source(recipe: str) -> str:
    """The text of ``recipes/<recipe>.py``.

    Raises:
      KeyError: ``recipe`` is not in :data:`jaxtrainer.recipes._catalog.RECIPES`.
    """
    from jaxtrainer.recipes._catalog import RECIPES

    return _TEMPLATE.format(name=recipe, summary=RECIPES[recipe].summary)


def _write_scripts(directory: str | Path) -> list[Path]:
    """Write ``<directory>/<name>.py`` for every recipe (:func:`source`); returns the paths."""
    from jaxtrainer.recipes._catalog import RECIPES

    paths = [Path(directory) / f"{name}.py" for name in RECIPES]
    for path in paths:
        path.write_text(source(path.stem))
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m jaxtrainer.commands.script DIRECTORY")
    for written in _write_scripts(sys.argv[1]):
        print(written)
