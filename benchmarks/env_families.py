"""Environment families: raw env steps per second, and PPO through the recipe.

1. **env steps/s** of each family by name: ``num_envs`` envs stepped with random
   actions for ``steps`` steps in one jitted ``lax.scan`` (a host env: one host
   callback per batched step), timed after a first run that compiles; the best of
   ``repeats`` runs.
2. ``--ppo NAME ...``: ``python recipes/ppo.py env.name=NAME`` (the recipe's
   defaults: 4 envs x 128 steps, 5e5 env steps) in a subprocess, its wall seconds
   and its last line (the final greedy evaluation over 32 episodes).

    python benchmarks/env_families.py                 # the table's env steps/s
    python benchmarks/env_families.py --ppo navix/Navix-Empty-5x5-v0 \
        trainer.max_env_steps=200000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import jax

from jaxtrainer import envs

NAMES = ("CartPole-v1", "gymnasium/CartPole-v1", "navix/Navix-Empty-5x5-v0",
         "xminigrid/MiniGrid-Empty-5x5", "jumanji/Snake-v1")


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
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "recipes/ppo.py", f"env.name={args.ppo[0]}",
                               "trainer.enable_progress_bar=false", *args.ppo[1:]],
                              capture_output=True, text=True, check=True)
        print(f"{args.ppo[0]}: {done.stdout.strip().splitlines()[-1]} "
              f"wall={time.perf_counter() - start:.0f}s")
        return
    for name in args.names:
        rate = steps_per_second(name, args.num_envs, args.steps, args.repeats)
        print(f"{name:32s} {args.num_envs} envs: {rate:12,.0f} env steps/s")


if __name__ == "__main__":
    main()
