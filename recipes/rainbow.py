"""Rainbow's parts: C51 + 3-step returns + dueling + double DQN (CartPole-v1): ``jaxtrainer fit rainbow`` as a script.

    python recipes/rainbow.py --help            # the examples, and every key with its value
    python recipes/rainbow.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="rainbow")


if __name__ == "__main__":
    script.main("rainbow")  # a bad config: one line, status 2; Ctrl-C while starting: one line
