"""A successive-halving search against a 4 x 4 grid sweep over the same ranges.

Runs, one after the other, as a user types them (CartPole PPO, the recipe's
budget of 500k env steps per member):

* the search: ``recipes/ppo.py search.method=asha search.members=32
  search.space.lr=loguniform(1e-5,1e-2) search.space.ent_coef=uniform(0,0.05)``;
* the grid: ``recipes/ppo.py sweep.hyperparams.lr=[1e-5,1e-4,1e-3,1e-2]
  sweep.hyperparams.ent_coef=[0,0.01667,0.03333,0.05]`` (4 points of each range:
  log-spaced for ``lr``, even for ``ent_coef``).

Both with ``JAX_LOG_COMPILES=1``: the Trainer's programs (``jit(body)``) are
counted from its log lines: 3 when nothing recompiles (the initial state, the
training program, the evaluation program), however many trials run. Both with
``trainer.log_every_n_steps=2`` (the recipe logs every 10 updates), so the
step at which a return is first reached is read to 2 updates. From each run's ``metrics.csv``: the total env steps spent (every member;
the Trainer's ``env_steps``), and the env steps spent until the best result:
the first logged step at which some member's ``train/episode_return`` reaches
``--solved`` (475), times the member count, the whole run's cost up to then.
Prints both runs' compile counts, their best final greedy evaluation (the
search's: the member with the best fitness; the grid's: its best configuration's
mean), both env-step counts, and ``ratio=<search/grid>`` of the env steps to
the solved level.

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
BOTH = ["trainer.log_every_n_steps=2"]
LAST_LINE = re.compile(r"eval/episode_return=(\S+).* run_dir=(\S+)")


def run(overrides: list[str], root: str) -> dict:
    """Run the recipe with ``overrides``; its last line, compiles and run directory."""
    env = dict(os.environ, JAX_LOG_COMPILES="1")
    done = subprocess.run([sys.executable, str(RECIPE), *overrides, *BOTH,
                           f"trainer.default_root_dir={root}"],
                          capture_output=True, text=True, env=env, check=True)
    match = LAST_LINE.search(done.stdout)
    compiles = [line for line in done.stderr.splitlines() if "Compiling jit(body)" in line]
    return {"eval": float(match.group(1)), "run_dir": match.group(2), "compiles": len(compiles)}


def env_steps(run_dir: str, members: int, solved: float) -> tuple[int, int | None]:
    """``(total env steps, env steps until some member's training return
    first reached solved)`` from ``metrics.csv``."""
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    columns = [c for c in rows[0] if c.startswith("member/") and c.endswith("/train/episode_return")]
    assert len(columns) == members, (len(columns), members)
    total = max(int(float(r["env_steps"])) for r in rows)
    for r in rows:
        if any(r[c] and float(r[c]) >= solved for c in columns):
            return total, int(float(r["env_steps"]))
    return total, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--solved", type=float, default=475.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        rows = {}
        for name, overrides, members in (("search", SEARCH, 32), ("grid", GRID, 16)):
            out = run(overrides, os.path.join(root, name))
            total, to_solved = env_steps(out["run_dir"], members, args.solved)
            rows[name] = dict(out, total=total, to_solved=to_solved)
            solved = f"{to_solved:,}" if to_solved else "never"
            print(f"{name:6s}: {members} members, {out['compiles']} program compiles (initial "
                  f"state, training, evaluation), best final greedy eval {out['eval']:.2f}, env steps spent "
                  f"{total:,}, to a training return >= {args.solved:g}: {solved}", flush=True)
    s, g = rows["search"]["to_solved"], rows["grid"]["to_solved"]
    if s and g:
        print(f"ratio={s / g:.3f}  (search/grid env steps to a training return >= {args.solved:g})")


if __name__ == "__main__":
    main()
