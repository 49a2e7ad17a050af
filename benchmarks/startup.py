"""Start-up times of the commands a user types first, against a budget.

    python benchmarks/startup.py [--repeats 5] [--budget 1.5]

Each command runs ``--repeats`` times in a fresh process (wall seconds from
``subprocess`` start to exit, the median printed with the fastest). The rows:
``import jaxtrainer``, ``jaxtrainer --help``, ``jaxtrainer fit --list``, every
recipe's ``jaxtrainer fit NAME --help``, a config typo (``trainer.logger=flase``,
an error before any JAX work), an unknown env name, and the other commands'
``--help``; then ``import jax`` and ``import ml_dtypes`` alone, the floor every
config check pays (ml_dtypes 0.7.0's extension took 0.5 s to import on this
project's machines, 0.6.0's 0.05 s; the dependency is pinned below 0.7).

Run on an idle machine. Exits 1 when a row's median is over ``--budget``
seconds; the budget is for commands that print or check and exit, not for
training.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PY = sys.executable
CLI = [PY, "-m", "jaxtrainer.commands._cli"]


def rows() -> list[tuple[str, list[str], int]]:
    """``(label, argv, expected exit status)`` for every timed command."""
    from jaxtrainer.recipes._catalog import RECIPES

    out = [("import jaxtrainer", [PY, "-c", "import jaxtrainer"], 0),
           ("jaxtrainer --help", [*CLI, "--help"], 0),
           ("jaxtrainer fit --list", [*CLI, "fit", "--list"], 0)]
    out += [(f"jaxtrainer fit {name} --help", [*CLI, "fit", name, "--help"], 0) for name in RECIPES]
    out += [("fit ppo trainer.logger=flase (error)", [*CLI, "fit", "ppo", "trainer.logger=flase"], 2),
            ("fit ppo env.name=CartPol-v1 (error)", [*CLI, "fit", "ppo", "env.name=CartPol-v1"], 2)]
    out += [(f"jaxtrainer {c} --help", [*CLI, c, "--help"], 0)
            for c in ("eval", "plot", "launch", "envs")]
    return out


FLOORS = [("import jax (floor)", [PY, "-c", "import jax"], 0),
          ("import ml_dtypes", [PY, "-c", "import ml_dtypes"], 0)]


def timed(argv: list[str], expected: int) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != expected:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}, expected {expected}:\n"
                         f"{done.stderr[-2000:]}")
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1.5, help="seconds (default 1.5)")
    args = parser.parse_args(argv)
    import ml_dtypes

    print(f"python {sys.version.split()[0]}, ml_dtypes {ml_dtypes.__version__}; "
          f"{args.repeats} runs each, seconds (median, fastest); budget {args.budget} s")
    over = []
    for label, command, expected in rows() + FLOORS:
        times = [timed(command, expected) for _ in range(args.repeats)]
        median = statistics.median(times)
        floor = label in dict((f[0], 0) for f in FLOORS)
        mark = "" if floor else ("  OVER" if median > args.budget else "  ok")
        if mark == "  OVER":
            over.append(label)
        print(f"  {label:<44} {median:6.2f} {min(times):6.2f}{mark}")
    print(f"{len(over)} over the budget" + (f": {', '.join(over)}" if over else ""))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
