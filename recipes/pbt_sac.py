"""Population-based training of SAC agents: ``jaxtrainer fit pbt_sac`` as a script.

    python recipes/pbt_sac.py --help            # the examples, and every key with its value
    python recipes/pbt_sac.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="pbt_sac")


if __name__ == "__main__":
    fit.script("pbt_sac", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
