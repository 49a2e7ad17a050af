"""A2C on a gymnax environment: ``jaxtrainer fit a2c`` as a script.

    python recipes/a2c.py --help            # the examples, and every key with its value
    python recipes/a2c.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="a2c")


if __name__ == "__main__":
    fit.script("a2c", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
