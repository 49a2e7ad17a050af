"""Row 6 of the accelerator table: IPPO on MPE against JaxMARL's own IPPO baseline, each
side's seeds in one program.

    python benchmarks/accelerator/ippo.py --baseline JAXMARL_DIR [--env-steps 1e7] \\
        [--seeds 10] [--seed 30] [--sides env_only,ours,jaxmarl] [--pythonpath DIR] \\
        [--json FILE]

Three programs one after the other on the same chip, each in its own process:

* the limit: MPE_simple_spread_v3 alone with random actions on ``16 x seeds`` games
  (``env_limit.py --env jaxmarl/MPE_simple_spread_v3``: one jitted scan, nothing else);
* ours: ``jaxtrainer fit ppo --config ippo.yaml sweep.seeds=S`` (JaxMARL's settings:
  16 games x 3 agents, 128-step rollouts, 4 epochs of 4 minibatches, lr 2.5e-4
  annealed, tanh 64x64, terminal-only GAE) with ``trainer.max_env_steps`` the budget in
  agent steps (3 a game step), ``trainer.seed`` and ``callbacks.throughput=true``: env
  steps/s of the training loop over all members (compilation excluded, the CSV and
  TensorBoard loggers included), divided by the 3 agents;
* JaxMARL: its ``baselines/IPPO/ippo_ff_mpe.py`` at its own ``ippo_ff_mpe.yaml``
  (``JAXMARL_DIR``; run by ``_jaxmarl_ippo_original.py``, which loads it with
  ``benchmarks/_jaxmarl_baseline.py``) with ``TOTAL_TIMESTEPS``, ``NUM_SEEDS`` and
  ``SEED`` from the arguments (their defaults are its config's: 1e7, 10, 30): its
  ``make_train`` over the seeds in one ``jit(vmap)``, the compiled call timed.

Env steps are game steps. Returns per seed, mean over the last tenth of the updates,
per agent: ours the members' ``train/episode_return`` rows of ``metrics.csv``; JaxMARL
its logged ``returned_episode_returns`` divided by the 3 agents (its ``MPELogWrapper``
sums their rewards).

Both sides use the same packages (``requirements/ours.txt`` and
``requirements/jaxmarl.txt``; ``--pythonpath`` is added to ``PYTHONPATH``). Printed: one
JSON line per program, then a summary line; ``--json`` appends the lines to FILE;
``ippo.py --table FILE ...`` prints the rows of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import pathlib
import sys

import seeds
from sac import row_parser, run_sides, table
from seeds import _run

HERE = pathlib.Path(__file__).resolve().parent
ENV, AGENTS, GAMES = "MPE_simple_spread_v3", 3, 16  # JaxMARL's ippo_ff_mpe.yaml
TABLE = {"peer": "jaxmarl", "title": "JaxMARL", "family": "jaxmarl", "envs": f"{GAMES} x seeds",
         "result": "returns", "seed_key": "seeds", "seed_label": "seeds",
         "steps_label": "game steps a seed"}


def ours(n: int, game_steps: int, seed: int, extra: str | None, timeout: float,
         overrides: tuple[str, ...] = ()) -> dict:
    """``jaxtrainer fit ppo --config ippo.yaml sweep.seeds=n`` for ``game_steps`` a seed:
    game steps/s of the training loop and each member's per-agent return over the last
    tenth (``overrides``: more ``key=value`` arguments)."""
    row = seeds.ours(n, AGENTS * game_steps, extra, timeout, (f"trainer.seed={seed}", *overrides),
                     config="ippo.yaml")
    return {"side": "ours", "env": ENV, "seed": seed, "seeds": n,
            "env_steps_per_s": row["env_steps_per_s"] / AGENTS, "train_s": row["train_s"],
            "compile_s": row["compile_s"], "returns": row["returns"]}


def jaxmarl(n: int, game_steps: int, seed: int, baseline: str, extra: str | None,
            timeout: float, settings: tuple[str, ...] = ()) -> dict:
    """JaxMARL's ``ippo_ff_mpe.py`` over ``n`` seeds in one ``jit(vmap)`` (``settings``:
    ``NAME=VALUE`` changes of its config, for a smoke test)."""
    out = _run([sys.executable, str(HERE / "_jaxmarl_ippo_original.py"), baseline,
                *(x for kv in (f"TOTAL_TIMESTEPS={game_steps}", f"NUM_SEEDS={n}", f"SEED={seed}",
                               *settings) for x in ("--set", kv))], extra, timeout)
    row = json.loads(out.strip().splitlines()[-1])
    return {**row, "env_steps": row["env_steps_per_seed"]}


def limit(n: int, extra: str | None, timeout: float) -> dict:
    """MPE_simple_spread_v3 alone on ``16 n`` games."""
    out = _run([sys.executable, str(HERE / "env_limit.py"), "--env", f"jaxmarl/{ENV}",
                "--batch", str(GAMES * n)], extra, timeout)
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return {**line, "env": ENV, "seeds": n}


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2:], **TABLE))
        return
    parser = row_parser(__doc__, None, "", None, 30, None, "jaxmarl")
    parser.add_argument("--baseline", default=None,
                        help="a JaxMARL checkout (needed for the jaxmarl side)")
    parser.add_argument("--env-steps", type=float, default=1e7, help="game steps a seed, both sides")
    parser.add_argument("--seeds", type=int, default=10, help="seeds in one program, both sides")
    args = parser.parse_args()
    if "jaxmarl" in args.sides.split(",") and not args.baseline:
        parser.error("--baseline JAXMARL_DIR is needed to run the jaxmarl side")
    n, steps, seed = args.seeds, int(args.env_steps), args.seed
    run = {"env_only": lambda: limit(n, args.pythonpath, args.timeout),
           "ours": lambda: ours(n, steps, seed, args.pythonpath, args.timeout),
           "jaxmarl": lambda: jaxmarl(n, steps, seed, args.baseline, args.pythonpath, args.timeout)}
    run_sides(run, args.sides, ENV, seed, args.json, parser, peer="jaxmarl", result="returns")


if __name__ == "__main__":
    main()
