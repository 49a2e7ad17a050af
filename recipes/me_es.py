"""ME-ES on QDax's walker2d_uni (feet-contact descriptors, 32x32 cells): ``jaxtrainer fit me_es`` as a script.

    python recipes/me_es.py --help            # the examples, and every key with its value
    python recipes/me_es.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="me_es")


if __name__ == "__main__":
    script.main("me_es")  # a bad config: one line, status 2; Ctrl-C while starting: one line
