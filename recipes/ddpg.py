"""DDPG on a continuous-control environment: ``jaxtrainer fit ddpg`` as a script.

    python recipes/ddpg.py --help            # the examples, and every key with its value
    python recipes/ddpg.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="ddpg")


if __name__ == "__main__":
    fit.script("ddpg", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
