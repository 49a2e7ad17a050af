"""Population-based training of PPO agents: ``jaxtrainer fit pbt_ppo`` as a script.

    python recipes/pbt_ppo.py --help            # the examples, and every key with its value
    python recipes/pbt_ppo.py [--config FILE] [section.key=value ...]
"""

from __future__ import annotations

from jaxtrainer.recipes import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.recipes import fit

    return fit.run(argv, recipe="pbt_ppo")


if __name__ == "__main__":
    script.main("pbt_ppo")  # a bad config: one line, status 2; Ctrl-C while starting: one line
