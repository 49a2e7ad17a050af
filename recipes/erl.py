"""ERL on a continuous-control environment: ``jaxtrainer fit erl`` as a script.

    python recipes/erl.py --help            # the examples, and every key with its value
    python recipes/erl.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

from jaxtrainer.recipes import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.recipes import fit

    return fit.run(argv, recipe="erl")


if __name__ == "__main__":
    script.main("erl")  # a bad config: one line, status 2; Ctrl-C while starting: one line
