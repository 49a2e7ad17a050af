"""CEMRL-OpenES: OpenAI-ES + TD3 gradient steps (Pendulum-v1): ``jaxtrainer fit cemrl_openes`` as a script.

    python recipes/cemrl_openes.py --help            # the examples, and every key with its value
    python recipes/cemrl_openes.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="cemrl_openes")


if __name__ == "__main__":
    script.main("cemrl_openes")  # a bad config: one line, status 2; Ctrl-C while starting: one line
