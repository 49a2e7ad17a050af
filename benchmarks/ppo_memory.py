"""Recurrent PPO on CartPole-v1 with the velocities hidden: with and without memory.

Runs ``python recipes/ppo.py --config recipes/configs/ppo_memory.yaml
trainer.seed=<seed>`` once per seed (a GRU core of 128 units; the policy sees the
cart position and pole angle only), then the same with ``network.core=null`` (no
memory: the same layout without the core), and prints per seed the final greedy
evaluation (``eval/episode_return`` over the config's 32 episodes; 500 is the
time limit) and the wall seconds (compilation included).

    python benchmarks/ppo_memory.py                       # seeds 0,1,2, 1e6 env steps each
    python benchmarks/ppo_memory.py --seeds 0 --max-env-steps 2e5

The task needs memory when the GRU's runs reach 450 and the memoryless ones stay
below 250; the README's table holds the measured numbers.
"""

from __future__ import annotations

import argparse

from _recipe_seeds import ROOT, table

CONFIG = ROOT / "recipes" / "configs" / "ppo_memory.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated trainer seeds")
    parser.add_argument("--max-env-steps", type=float, default=1e6,
                        help="env steps per run (the config's 1e6 by default)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    steps = int(args.max_env_steps)
    gru = table("PPO, GRU core, CartPole-v1 without velocities", "ppo", CONFIG, seeds, steps, [])
    none = table("PPO, no core (memoryless), CartPole-v1 without velocities", "ppo", CONFIG,
                 seeds, steps, ["network.core=null"])
    print(f"memory needed: GRU min {min(gru):.2f} >= 450: {min(gru) >= 450}; "
          f"no core max {max(none):.2f} < 250: {max(none) < 250}")


if __name__ == "__main__":
    main()
