"""Environment families: raw env steps per second, and PPO through the recipe.

1. **env steps/s** of each family by name: ``num_envs`` envs stepped with random
   actions for ``steps`` steps in one jitted ``lax.scan`` (a host env: one host
   callback per batched step), timed after a first run that compiles; the best of
   ``repeats`` runs.
2. ``--ppo NAME ...``: ``python recipes/ppo.py env.name=NAME`` (the recipe's
   defaults: 4 envs x 128 steps, 5e5 env steps) in a subprocess, its wall seconds
   and its last line (the final greedy evaluation over 32 episodes); for an env
   with extra episode statistics (Craftax's achievements) also their last logged
   ``train/...`` values, read from the run's ``metrics.csv``.

    python benchmarks/env_families.py                 # the table's env steps/s
    python benchmarks/env_families.py --ppo navix/Navix-Empty-5x5-v0 \
        trainer.max_env_steps=200000
    python benchmarks/env_families.py --ppo craftax/Craftax-Classic-Symbolic-v1 \
        trainer.max_env_steps=100000                 # and its achievements
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import subprocess
import sys
import time

import jax

from jaxtrainer import envs

NAMES = ("CartPole-v1", "gymnasium/CartPole-v1", "navix/Navix-Empty-5x5-v0",
         "xminigrid/MiniGrid-Empty-5x5", "jumanji/Snake-v1",
         "craftax/Craftax-Classic-Symbolic-v1", "envpool/CartPole-v1")


def steps_per_second(name: str, num_envs: int, steps: int, repeats: int) -> float:
    """Env transitions per wall second of ``name`` under random actions."""
    env = envs.make(name)

    def run(key):
        obs, state = env.reset_batch(key, num_envs)

        def one(state, k):
            if env.discrete:
                action = jax.random.randint(k, (num_envs,), 0, env.num_actions)
            else:
                action = jax.random.uniform(k, (num_envs, env.action_size), minval=-1.0)
            _, state, info = jax.vmap(env.step)(jax.random.split(k, num_envs), state, action)
            return state, info.reward

        return jax.lax.scan(one, state, jax.random.split(key, steps))[1].sum()

    run = jax.jit(run)
    jax.block_until_ready(run(jax.random.key(0)))
    best = float("inf")
    for i in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(i + 1)))
        best = min(best, time.perf_counter() - start)
    return num_envs * steps / best


def extra_statistics(last_line: str) -> str:
    """The last logged ``train/<name>`` values of the run ``last_line`` names
    (``run_dir=<dir>``) beyond return and length, nonzero ones, as ``name=value``."""
    run_dir = last_line.rsplit("run_dir=", 1)[-1].strip()
    with (pathlib.Path(run_dir) / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/episode_return")]
    last = rows[-1] if rows else {}
    return " ".join(f"{k[len('train/'):]}={float(v):.2f}" for k, v in last.items()
                    if k.startswith("train/") and not k.startswith("train/episode_")
                    and v and float(v) != 0.0)


def ppo(name: str, overrides: list[str]) -> None:
    """Run the PPO recipe on ``name`` and print its last line, wall time and extras."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "recipes/ppo.py", f"env.name={name}",
                           "trainer.enable_progress_bar=false", *overrides],
                          capture_output=True, text=True, check=True)
    last = done.stdout.strip().splitlines()[-1]
    print(f"{name}: {last} wall={time.perf_counter() - start:.0f}s")
    extras = extra_statistics(last)
    if extras:
        print(f"  last logged: {extras}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--names", nargs="+", default=NAMES, help="env names to time")
    parser.add_argument("--ppo", nargs="+", metavar=("NAME", "OVERRIDE"),
                        help="run the PPO recipe on NAME with these overrides instead")
    args = parser.parse_args(argv)
    if args.ppo:
        ppo(args.ppo[0], args.ppo[1:])
        return
    for name in args.names:
        rate = steps_per_second(name, args.num_envs, args.steps, args.repeats)
        print(f"{name:32s} {args.num_envs} envs: {rate:12,.0f} env steps/s")


if __name__ == "__main__":
    main()
