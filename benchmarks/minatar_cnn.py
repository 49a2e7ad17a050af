"""PPO and PQN with the CNN torso on Breakout-MinAtar: final greedy return and wall time per seed.

Runs ``python recipes/<algorithm>.py --config recipes/configs/<algorithm>_minatar.yaml
trainer.seed=<seed>`` once per seed and algorithm (each a fresh process,
progress bar, checkpoints and loggers off; ``--jobs`` runs at once), and prints a
table per algorithm: seed, env steps, the final greedy evaluation
(``eval/episode_return`` over the config's 32 episodes) and the wall seconds of
the whole process (compilation included); with both algorithms, the means side by
side and whether PQN's is at least PPO's.

    python benchmarks/minatar_cnn.py                       # ppo and pqn, seeds 0,1,2, 5e6 env steps
    python benchmarks/minatar_cnn.py --algorithms ppo --seeds 0 --max-env-steps 1e6
    python benchmarks/minatar_cnn.py --algorithms ppo --torso mlp   # the flattened observation

Measured 2026-12-03 with the PPO config's ``ent_coef: 0.05`` and ``hidden_sizes: [256]``
(the three seeds at once, beside the test suite, on 2 CPU cores; the recipe
command itself, as this script runs it): greedy return 59.94 / 20.00 / 23.97 for
seeds 0 / 1 / 2 at 4,997,120 env steps, 29-31 min each. With the earlier
``ent_coef: 0.03`` and 128 units: 19.81 / 11.53 / 7.00.

2026-12-06, both algorithms, one run at a time on 2 idle CPU cores: PQN 69.00 / 81.00 /
68.00 (mean 72.67, 276-307 s each), PPO 53.94 / 23.50 / 22.69 (mean 33.38, 387-505 s).
"""

from __future__ import annotations

import argparse
import statistics

from _recipe_seeds import ROOT, table

CONFIGS = {"ppo": ROOT / "recipes" / "configs" / "ppo_minatar.yaml",
           "pqn": ROOT / "recipes" / "configs" / "pqn_minatar.yaml"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", default="ppo,pqn",
                        help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated trainer seeds")
    parser.add_argument("--max-env-steps", type=float, default=5e6,
                        help="env steps per run (the configs' 5e6 by default)")
    parser.add_argument("--torso", default="cnn", help="network.torso (cnn, or mlp to compare)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    args = parser.parse_args()
    algorithms = args.algorithms.split(",")
    unknown = [a for a in algorithms if a not in CONFIGS]
    if unknown:
        parser.error(f"--algorithms: unknown {unknown}; choose from {list(CONFIGS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    means = {}
    for name in algorithms:
        returns = table(f"{name.upper()} on Breakout-MinAtar", name, CONFIGS[name], seeds,
                        int(args.max_env_steps), [f"network.torso={args.torso}"], args.jobs)
        means[name] = statistics.mean(returns)
    if {"ppo", "pqn"} <= set(means):
        verdict = "at or above" if means["pqn"] >= means["ppo"] else "BELOW"
        print(f"PQN mean {means['pqn']:.2f} is {verdict} PPO mean {means['ppo']:.2f} "
              f"(seeds {args.seeds})", flush=True)


if __name__ == "__main__":
    main()
