"""CMA-ES neuroevolution on a gymnax environment: ``jaxtrainer fit cma_es`` as a script.

    python recipes/cma_es.py --help            # the examples, and every key with its value
    python recipes/cma_es.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

import sys

from jaxtrainer.recipes import fit


def main(argv: list[str]) -> dict[str, float]:
    return fit.run(argv, recipe="cma_es")


if __name__ == "__main__":
    fit.script("cma_es", sys.argv[1:], prog=sys.argv[0])  # a bad config: one line, status 2
