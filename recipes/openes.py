"""OpenAI-ES neuroevolution on a gymnax environment: ``jaxtrainer fit openes`` as a script.

    python recipes/openes.py --help            # the examples, and every key with its value
    python recipes/openes.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="openes")


if __name__ == "__main__":
    fit.script("openes", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
