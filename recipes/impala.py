"""IMPALA (synchronous, V-trace) on a gymnax environment: ``jaxtrainer fit impala`` as a script.

    python recipes/impala.py --help            # the examples, and every key with its value
    python recipes/impala.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="impala")


if __name__ == "__main__":
    fit.script("impala", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
