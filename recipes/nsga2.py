"""NSGA-II on ZDT1 (30 variables, 2 objectives; Deb et al. 2002's settings): ``jaxtrainer fit nsga2`` as a script.

    python recipes/nsga2.py --help            # the examples, and every key with its value
    python recipes/nsga2.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="nsga2")


if __name__ == "__main__":
    script.main("nsga2")  # a bad config: one line, status 2; Ctrl-C while starting: one line
