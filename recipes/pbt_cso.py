"""PBT-CSO: PPO agents tuned by a competitive swarm (CartPole-v1, 8 members): ``jaxtrainer fit pbt_cso`` as a script.

    python recipes/pbt_cso.py --help            # the examples, and every key with its value
    python recipes/pbt_cso.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="pbt_cso")


if __name__ == "__main__":
    script.main("pbt_cso")  # a bad config: one line, status 2; Ctrl-C while starting: one line
