"""Sweep throughput: 16 PPO seeds through the Trainer against hand-fusing and sequential runs.

Three variants of the same work (PPO on CartPole-v1, 4 envs x 128 steps, 4
epochs x 4 minibatches; 16 seeds x ``--updates`` updates each) in one process,
alternating (a b c, c b a, ...), timed after compilation:

(a) ``sweep``: ``Sweep(ppo, seeds=16)`` through ``Trainer(strategy="single")``,
    logging every 10 updates (CSV and TensorBoard on, progress bar and
    checkpoints off), from ``on_train_start`` to ``on_train_end``;
(b) ``vmapped``: the same module hand-fused as PureJaxRL does it,
    ``jax.jit(jax.vmap(lax.scan(training_step)))`` over the 16 seeds, one call;
(c) ``sequential``: the 16 seeds as 16 single ``Trainer`` runs one after
    another (the programs compile once; the summed training loops are timed).

Prints env steps/s of each (medians over the repeats) and, as its last two
lines, ``ratio sweep/vmapped=<x>`` and ``ratio sweep/sequential=<y>`` (env
steps/s of (a) over (b) and over (c), medians of back-to-back ratios).

    python benchmarks/sweep_throughput.py [--updates 100] [--repeats 3] [--seeds 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import jax
from _timing import LoopClock, use_compilation_cache

import jaxtrainer as jt
from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.population import Sweep


def make_module(updates: int) -> PPO:
    return PPO(PPOConfig(env="CartPole-v1", total_updates=updates))


def trainer_seconds(module, updates: int, seed: int = 0) -> float:
    """Seconds of one Trainer's training loop (``_timing.LoopClock``)."""
    clock = LoopClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = jt.Trainer(strategy="single", max_steps=updates, log_every_n_steps=10,
                             seed=seed, default_root_dir=root, callbacks=[clock],
                             enable_progress_bar=False, enable_checkpointing=False, logger=True)
        trainer.fit(module)
    return clock.seconds


def vmapped(module: PPO, updates: int, seeds: int):
    """A function timing one call of the hand-fused jit(vmap(scan)) over ``seeds``
    seeds (compiled here, once)."""
    keys = jax.vmap(jax.random.key)(jax.numpy.arange(seeds))

    def run(state, key):
        return jax.lax.scan(module.training_step, state, jax.random.split(key, updates))

    fused = jax.jit(jax.vmap(run), donate_argnums=0)
    init = jax.jit(lambda k: jax.lax.map(module.init_state, k))
    compiled = fused.lower(init(keys), keys).compile()

    def timed() -> float:
        state = jax.block_until_ready(init(keys))
        t = time.perf_counter()
        state, metrics = compiled(state, keys)
        jax.block_until_ready((state, metrics))
        jax.device_get(metrics)
        return time.perf_counter() - t

    return timed


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=100, help="PPO updates of every seed")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per variant, alternating; medians are reported")
    parser.add_argument("--seeds", type=int, default=16)
    args = parser.parse_args(argv)
    use_compilation_cache()
    module = make_module(args.updates)
    env_steps = args.seeds * args.updates * module.env_steps_per_step
    print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} device(s), "
          f"{args.seeds} seeds x {args.updates} updates = {env_steps:,} env steps per variant, "
          f"{args.repeats} runs each", flush=True)
    fused = vmapped(module, args.updates, args.seeds)
    sweep = Sweep(make_module(args.updates), seeds=args.seeds)
    variants = {
        "sweep": lambda: trainer_seconds(sweep, args.updates),
        "vmapped": fused,
        "sequential": lambda: sum(trainer_seconds(make_module(args.updates), args.updates, s)
                                  for s in range(args.seeds)),
    }
    trainer_seconds(sweep, 2)  # compile the Trainer's programs before timing
    trainer_seconds(make_module(args.updates), 2)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            seconds[name].append(variants[name]())
            print(f"  run {r}: {name:<10} {env_steps / seconds[name][-1]:>12,.0f} env steps/s",
                  flush=True)
    for name, values in seconds.items():
        print(f"{name:<10} {env_steps / statistics.median(values):>12,.0f} env steps/s "
              f"(median of {len(values)})")
    for ref in ("vmapped", "sequential"):
        ratio = statistics.median(b / a for a, b in zip(seconds["sweep"], seconds[ref], strict=True))
        print(f"ratio sweep/{ref}={ratio:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
