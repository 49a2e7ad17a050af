"""PPO on a gymnax environment: ``jaxtrainer fit ppo`` as a script.

    python recipes/ppo.py --help            # the examples, and every key with its value
    python recipes/ppo.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="ppo")


if __name__ == "__main__":
    fit.script("ppo", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
