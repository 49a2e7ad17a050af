"""Run a shipped recipe once per seed and report its final greedy evaluation.

Shared by the benchmarks that measure what a recipe config reaches
(``minatar_cnn.py``, ``ppo_memory.py``): each run is a fresh process of
``python recipes/<recipe>.py --config <config> trainer.seed=<seed> ...`` with the
progress bar, checkpoints and loggers off, one after the other (or ``jobs`` at once).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAST_LINE = re.compile(r"eval/episode_return=(-?[\d.]+|nan)(?:.*run_dir=(\S+))?")


def run_seed(recipe: str, config: Path, seed: int, max_env_steps: int, root: str,
             overrides: list[str]) -> tuple[float, float]:
    """``(final greedy return, wall seconds)`` of one recipe run (the recipe's
    last line, ``eval/episode_return=...``; seconds of the whole process, compilation
    included unless the compilation cache already holds the programs).

    Raises:
      RuntimeError: the run failed or printed no ``eval/episode_return=`` line
        (the message holds its last output).
    """
    command = [sys.executable, str(ROOT / "recipes" / f"{recipe}.py"), "--config", str(config),
               f"trainer.seed={seed}", f"trainer.max_env_steps={max_env_steps}",
               f"trainer.default_root_dir={root}/seed{seed}", "trainer.enable_progress_bar=false",
               "trainer.enable_checkpointing=false", "trainer.logger=false", *overrides]
    final, _, _, seconds = run_command(command, f"seed {seed}")
    return final, seconds


def run_command(command: list[str], label: str) -> tuple[float, str | None, str, float]:
    """Run one recipe command from the repository root: ``(final greedy return,
    its run directory or None, its stdout, wall seconds)``, read from its last
    line ``eval/episode_return=<x> run_dir=<dir>``.

    Raises:
      RuntimeError: the command failed or printed no ``eval/episode_return=`` line
        (the message names ``label`` and holds the command's last output).
    """
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    found = LAST_LINE.findall(done.stdout)
    if done.returncode or not found:
        raise RuntimeError(f"{label}: exit status {done.returncode}\n{' '.join(command)}\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    final, run_dir = found[-1]
    return float(final), run_dir or None, done.stdout, seconds


def table(title: str, recipe: str, config: Path, seeds: list[int], max_env_steps: int,
          overrides: list[str], jobs: int = 1) -> list[float]:
    """Print ``title``, then one row per seed (seed, env steps, greedy return,
    wall seconds) as each run ends, then the mean and minimum; returns the returns
    in seed order. ``jobs``: runs at once (each a process; with more than one,
    a run's wall seconds include sharing the machine's cores)."""
    print(f"{title}, {max_env_steps:,} env steps per seed"
          + (f" ({' '.join(overrides)})" if overrides else "")
          + (f", {jobs} runs at once" if jobs > 1 else ""))
    print(f"{'seed':>4}  {'env steps':>10}  {'greedy return':>13}  {'wall s':>8}", flush=True)
    returns = {}
    with tempfile.TemporaryDirectory(prefix=f"{config.stem}-") as root, \
            ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = {pool.submit(run_seed, recipe, config, seed, max_env_steps, root, overrides): seed
                for seed in seeds}
        for done in as_completed(runs):
            seed = runs[done]
            value, seconds = done.result()
            returns[seed] = value
            print(f"{seed:>4}  {max_env_steps:>10,}  {value:>13.2f}  {seconds:>8.0f}", flush=True)
    returns = [returns[seed] for seed in seeds]
    print(f"mean={statistics.mean(returns):.2f} min={min(returns):.2f} "
          f"over seeds {','.join(map(str, seeds))}", flush=True)
    return returns
