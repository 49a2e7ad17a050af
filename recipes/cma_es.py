"""CMA-ES neuroevolution of a 30-parameter policy (CartPole-v1): ``jaxtrainer fit cma_es`` as a script.

    python recipes/cma_es.py --help            # the examples, and every key with its value
    python recipes/cma_es.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="cma_es")


if __name__ == "__main__":
    script.main("cma_es")  # a bad config: one line, status 2; Ctrl-C while starting: one line
