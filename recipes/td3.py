"""TD3 on a continuous-control environment: ``jaxtrainer fit td3`` as a script.

    python recipes/td3.py --help            # the examples, and every key with its value
    python recipes/td3.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

from jaxtrainer.recipes import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.recipes import fit

    return fit.run(argv, recipe="td3")


if __name__ == "__main__":
    script.main("td3")  # a bad config: one line, status 2; Ctrl-C while starting: one line
