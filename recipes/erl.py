"""ERL on a continuous-control environment: ``jaxtrainer fit erl`` as a script.

    python recipes/erl.py --help            # the examples, and every key with its value
    python recipes/erl.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="erl")


if __name__ == "__main__":
    fit.script("erl", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
