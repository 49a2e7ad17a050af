"""MAP-Elites on QDax's planar arm (8 joints, 100x100 end-effector cells): ``jaxtrainer fit map_elites`` as a script.

    python recipes/map_elites.py --help            # the examples, and every key with its value
    python recipes/map_elites.py [--config FILE] [section.key=value ...]

Generated from the recipe catalog by ``python -m jaxtrainer.commands.script recipes``.
"""

from __future__ import annotations

from jaxtrainer.commands import script  # imports no JAX: Ctrl-C is taken from the first line


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.commands import fit

    return fit.run(argv, recipe="map_elites")


if __name__ == "__main__":
    script.main("map_elites")  # a bad config: one line, status 2; Ctrl-C while starting: one line
