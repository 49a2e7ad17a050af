"""Population-based training of PPO agents: ``jaxtrainer fit pbt_ppo`` as a script.

    python recipes/pbt_ppo.py --help            # the examples, and every key with its value
    python recipes/pbt_ppo.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="pbt_ppo")


if __name__ == "__main__":
    fit.script("pbt_ppo", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
