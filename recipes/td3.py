"""TD3 on a continuous-control environment: ``jaxtrainer fit td3`` as a script.

    python recipes/td3.py --help            # the examples, and every key with its value
    python recipes/td3.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="td3")


if __name__ == "__main__":
    fit.script("td3", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
