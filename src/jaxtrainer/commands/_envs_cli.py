"""``jaxtrainer envs``: the environment names ``env.name`` takes.

    jaxtrainer envs            # every name, one a line, then the prefixed families
    jaxtrainer envs brax/      # the names starting with a prefix

The list is :func:`jaxtrainer.envs.available` (gymnax's names, their
``-NoVelocity`` variants, ``brax/<name>`` and ``playground/<name>``); the
families named by a prefix (``navix/``, ``envpool/``, ...) check their names
when an env is made, with their own packages.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

_NEEDS = {"brax/": ("brax", "brax"), "playground/": ("mujoco_playground", "playground")}
"""Listed names' prefixes whose package may be missing: ``(module, jaxtrainer extra)``."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jaxtrainer envs",
                                     description="The environment names env.name takes.")
    parser.add_argument("prefix", nargs="?", default="",
                        help="list only names starting with this (e.g. brax/, Cart)")
    args = parser.parse_args(argv)
    from jaxtrainer.envs.registry import FAMILIES, available

    names = [n for n in available() if n.lower().startswith(args.prefix.lower())]
    families = [p for p in FAMILIES if p.startswith(args.prefix.lower()) or not args.prefix]
    if not names and not families:
        print(f"jaxtrainer envs: no name starts with {args.prefix!r}", file=sys.stderr)
        return 2
    sys.stdout.write("".join(f"{n}\n" for n in names))
    for prefix, (module, extra) in _NEEDS.items():
        if any(n.startswith(prefix) for n in names) and importlib.util.find_spec(module) is None:
            print(f"jaxtrainer envs: the {prefix}<name> envs need {module}, which is not installed: "
                  f'pip install "jaxtrainer[{extra}]"', file=sys.stderr)
    if families:
        print("families named by a prefix (their names are checked when made, with the "
              f"family's package): {', '.join(f'{p}<name>' for p in families)}")
    return 0
