"""CEM-RL on a continuous-control environment: ``jaxtrainer fit cem_rl`` as a script.

    python recipes/cem_rl.py --help            # the examples, and every key with its value
    python recipes/cem_rl.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="cem_rl")


if __name__ == "__main__":
    fit.script("cem_rl", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
