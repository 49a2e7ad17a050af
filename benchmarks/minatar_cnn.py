"""PPO with the CNN torso on Breakout-MinAtar: final greedy return and wall time per seed.

Runs ``python recipes/ppo.py --config recipes/configs/ppo_minatar.yaml
trainer.seed=<seed>`` once per seed, one after the other (each a fresh process,
progress bar, checkpoints and loggers off), and prints a table: seed, env steps,
the final greedy evaluation (``eval/episode_return`` over the config's 32
episodes) and the wall seconds of the whole process (compilation included).

    python benchmarks/minatar_cnn.py                       # seeds 0,1,2, 5e6 env steps each
    python benchmarks/minatar_cnn.py --seeds 0 --max-env-steps 1e6
    python benchmarks/minatar_cnn.py --torso mlp           # the flattened observation instead

Measured 2026-12-02 on 2 CPU cores shared with other work: seed 0, 4,997,120 env
steps, greedy return 19.81, 37 min (one run of the recipe, not through this
script); seeds 1 and 2 not yet run.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "recipes" / "configs" / "ppo_minatar.yaml"
LAST_LINE = re.compile(r"eval/episode_return=(-?[\d.]+|nan)")


def run_seed(seed: int, max_env_steps: int, torso: str, root: str) -> tuple[float, float]:
    """``(final greedy return, wall seconds)`` of one recipe run.

    Raises:
      RuntimeError: the run failed or printed no ``eval/episode_return=`` line
        (the message holds its last output).
    """
    command = [sys.executable, str(ROOT / "recipes" / "ppo.py"), "--config", str(CONFIG),
               f"trainer.seed={seed}", f"trainer.max_env_steps={max_env_steps}",
               f"trainer.default_root_dir={root}/seed{seed}", "trainer.enable_progress_bar=false",
               "trainer.enable_checkpointing=false", "trainer.logger=false",
               f"network.torso={torso}"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    found = LAST_LINE.findall(done.stdout)
    if done.returncode or not found:
        raise RuntimeError(f"seed {seed}: exit status {done.returncode}\n"
                           f"{(done.stdout + done.stderr)[-2000:]}")
    return float(found[-1]), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated trainer seeds")
    parser.add_argument("--max-env-steps", type=float, default=5e6,
                        help="env steps per run (the config's 5e6 by default)")
    parser.add_argument("--torso", default="cnn", help="network.torso (cnn, or mlp to compare)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    steps = int(args.max_env_steps)
    print(f"PPO on Breakout-MinAtar, network.torso={args.torso}, {steps:,} env steps per seed")
    print(f"{'seed':>4}  {'env steps':>10}  {'greedy return':>13}  {'wall s':>8}", flush=True)
    returns = []
    with tempfile.TemporaryDirectory(prefix="minatar-cnn-") as root:
        for seed in seeds:
            value, seconds = run_seed(seed, steps, args.torso, root)
            returns.append(value)
            print(f"{seed:>4}  {steps:>10,}  {value:>13.2f}  {seconds:>8.0f}", flush=True)
    print(f"mean={statistics.mean(returns):.2f} min={min(returns):.2f} over seeds {args.seeds}")


if __name__ == "__main__":
    main()
