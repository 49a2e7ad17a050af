"""A successive-halving search against a 4 x 4 grid sweep over the same ranges.

Runs, one after the other (CartPole PPO):

* the search exactly as a user types it: ``recipes/ppo.py search.method=asha
  search.members=32 search.space.lr=loguniform(1e-5,1e-2)
  search.space.ent_coef=uniform(0,0.05)``. Its budget is the recipe's default
  ``search.runs=8``: the 32 trials at once share 8 runs of the recipe's 500k
  env steps, 125k a member slot, and successive halving stops the worst half
  at 1/8, 1/4 and 1/2 of that;
* the grid: ``recipes/ppo.py sweep.hyperparams.lr=[1e-5,1e-4,1e-3,1e-2]
  sweep.hyperparams.ent_coef=[0,0.01667,0.03333,0.05]`` (4 points of each
  range: log-spaced for ``lr``, even for ``ent_coef``), 500k env steps each.

All with ``JAX_LOG_COMPILES=1``: the Trainer's programs (``jit(body)``) are
counted from the log: 3 when nothing recompiles (the initial state, the
training program, the evaluation program), however many trials run. For each
run: its best result (a search: the best final greedy evaluation of a trial
in ``search.csv``; the grid: the best configuration's final greedy evaluation
in ``sweep_summary.csv``) and the env steps it spent to get there (every
member's, the whole run: each result is a final evaluation). Last line:
``ratio=<search / grid>`` of those env steps.

    python benchmarks/search_asha.py            # about 2 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "ppo.py"
SEARCH = ["search.method=asha", "search.members=32", "search.space.lr=loguniform(1e-5,1e-2)",
          "search.space.ent_coef=uniform(0,0.05)"]
GRID = ["sweep.hyperparams.lr=[1e-5,1e-4,1e-3,1e-2]",
        "sweep.hyperparams.ent_coef=[0,0.01667,0.03333,0.05]"]
RUN_DIR = re.compile(r"run_dir=(\S+)")


def run(overrides: list[str], root: str) -> tuple[Path, int]:
    """Run the recipe with ``overrides``: its run directory and programs compiled."""
    env = dict(os.environ, JAX_LOG_COMPILES="1")
    done = subprocess.run([sys.executable, str(RECIPE), *overrides,
                           f"trainer.default_root_dir={root}"],
                          capture_output=True, text=True, env=env, check=True)
    compiles = sum("Compiling jit(body)" in line for line in done.stderr.splitlines())
    return Path(RUN_DIR.search(done.stdout).group(1)), compiles


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def spent(run_dir: Path) -> int:
    """The env steps of every member over the whole run (``metrics.csv``)."""
    return max(int(float(r["env_steps"])) for r in rows(run_dir / "metrics.csv"))


def best_trial(run_dir: Path) -> float:
    return max(float(r["eval"]) for r in rows(run_dir / "search.csv") if r["eval"])


def best_config(run_dir: Path) -> float:
    return max(float(r["mean"]) for r in rows(run_dir / "sweep_summary.csv"))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as root:
        for name, overrides, best in (("search", SEARCH, best_trial),
                                      ("grid 4 x 4", GRID, best_config)):
            run_dir, compiles = run(overrides, os.path.join(root, str(len(results))))
            results[name] = (best(run_dir), spent(run_dir))
            print(f"{name:10s}: {compiles} programs compiled (initial state, training, evaluation), "
                  f"best final greedy evaluation {results[name][0]:.2f}, env steps spent "
                  f"{results[name][1]:,}", flush=True)
    found, grid = results["search"], results["grid 4 x 4"]
    print(f"ratio={found[1] / grid[1]:.3f}  (search / grid env steps; best "
          f"{found[0]:.2f} vs {grid[0]:.2f})")


if __name__ == "__main__":
    main()
