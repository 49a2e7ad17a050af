"""Double DQN on a gymnax environment: ``jaxtrainer fit dqn`` as a script.

    python recipes/dqn.py --help            # the examples, and every key with its value
    python recipes/dqn.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="dqn")


if __name__ == "__main__":
    fit.script("dqn", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
