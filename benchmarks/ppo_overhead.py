"""Trainer overhead on PPO: the Trainer against a hand-fused jit(lax.scan) loop.

Runs the same PPO module (CartPole-v1, 4 envs x 128 steps, 4 epochs x 4
minibatches) four ways in one process and prints env steps/s, ratios and
compile times:

1. ``Trainer(strategy="single")`` logging every 10 updates (CSV and TensorBoard
   loggers on, progress bar and checkpoints off; default ``sync_every_n_seconds``)
   vs one ``jax.jit(lax.scan(training_step))``. Both are timed after compilation and
   initialisation: the Trainer from ``on_train_start`` (after waiting for its
   background evaluation compile) to ``on_train_end`` (all fused calls, metric
   fetches and callbacks), the fused loop around one call.
2. ``Trainer(strategy="pmap")`` on 2 devices vs the same scan under ``jax.pmap``
   with the same gradient ``pmean``.

On CPU, fake devices share the cores and every minibatch all-reduce is real
work, so (2) measures our overhead, not a speed-up.

Variants alternate (A B, B A, ...) and the ratios compare medians and
back-to-back pairs; a throwaway
persistent compilation cache spares the repeats' compiles.

    python benchmarks/ppo_overhead.py [--updates 300] [--repeats 11]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from _timing import LoopClock, interleaved, paired_ratio, summarise, use_compilation_cache  # noqa: E402

import jaxtrainer as jt  # noqa: E402
from jaxtrainer.algorithms import PPO, PPOConfig  # noqa: E402
from jaxtrainer.distributed import AXIS_NAME  # noqa: E402


def make_module(updates: int) -> PPO:
    return PPO(PPOConfig(env="CartPole-v1", total_updates=updates))


def hand_fused_single(module: PPO, updates: int, seed: int) -> tuple[float, float, float]:
    """(run seconds, run CPU seconds, compile seconds) of one jit(scan) over all updates."""
    key = jax.random.key(seed)
    state = jax.jit(module.init_state)(key)

    def run(state, key):
        keys = jax.random.split(key, updates)
        return jax.lax.scan(module.training_step, state, keys)

    t = time.perf_counter()
    compiled = jax.jit(run, donate_argnums=0).lower(state, key).compile()
    compile_s = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    state, metrics = compiled(state, key)
    jax.block_until_ready((state, metrics))
    jax.device_get(metrics)
    return time.perf_counter() - t, time.process_time() - c, compile_s


def hand_fused_pmap(module: PPO, updates: int, seed: int, n: int) -> tuple[float, float, float]:
    """The same scan under jax.pmap over ``n`` devices (gradients pmean-ed by the module)."""
    key = jax.random.key(seed)
    init = jax.pmap(module.init_state, axis_name=AXIS_NAME)
    state = init(jnp.stack([key] * n))

    def run(state, key):
        keys = jax.random.split(jax.random.fold_in(key, jax.lax.axis_index(AXIS_NAME)), updates)
        return jax.lax.scan(module.training_step, state, keys)

    prun = jax.pmap(run, axis_name=AXIS_NAME, donate_argnums=0)
    keys = jnp.stack([key] * n)
    t = time.perf_counter()
    compiled = prun.lower(state, keys).compile()
    compile_s = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    state, metrics = compiled(state, keys)
    jax.block_until_ready((state, metrics))
    jax.device_get(metrics)
    return time.perf_counter() - t, time.process_time() - c, compile_s


def trainer_run(module: PPO, updates: int, seed: int, strategy: str, devices) -> tuple[float, ...]:
    """(seconds and CPU seconds of the training loop, compile seconds of the
    training program, host seconds of the loop; see ``_timing.LoopClock``)."""
    clock = LoopClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = jt.Trainer(strategy=strategy, devices=devices, max_steps=updates,
                             log_every_n_steps=10, seed=seed, default_root_dir=root,
                             callbacks=[clock], enable_progress_bar=False,
                             enable_checkpointing=False, logger=True)
        trainer.fit(module)
    return clock.seconds, clock.cpu_seconds, trainer.compile_seconds["train"], clock.host_seconds


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=300, help="PPO updates per run")
    parser.add_argument("--repeats", type=int, default=11,
                        help="runs per variant, interleaved; medians are reported")
    args = parser.parse_args(argv)
    use_compilation_cache()
    env_steps = args.updates * 4 * 128
    module = make_module(args.updates)
    print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} devices, "
          f"{args.updates} updates = {env_steps:,} env steps per run, {args.repeats} runs each")
    layouts = {
        "single": {"trainer": lambda: trainer_run(module, args.updates, 0, "single", 1),
                   "fused": lambda: hand_fused_single(module, args.updates, 0)},
        "pmap x2": {"trainer": lambda: trainer_run(module, args.updates, 0, "pmap", 2),
                    "fused": lambda: hand_fused_pmap(module, args.updates, 0, 2)},
    }
    print(f"{'layout':<9}{'trainer env steps/s':>21}{'fused env steps/s':>19}{'ratio':>8}"
          f"{'paired':>8}{'CPU ratio':>11}{'best ratio':>12}{'host share':>12}"
          f"{'trainer compile s':>19}{'fused compile s':>17}")
    for name, variants in layouts.items():
        runs = interleaved(variants, args.repeats)
        ours, ref = summarise(runs["trainer"]), summarise(runs["fused"])
        print(f"{name:<9}{env_steps / ours.median_seconds:>21,.0f}"
              f"{env_steps / ref.median_seconds:>19,.0f}"
              f"{ref.median_seconds / ours.median_seconds:>8.3f}"
              f"{paired_ratio(runs['trainer'], runs['fused']):>8.3f}"
              f"{ref.median_cpu_seconds / ours.median_cpu_seconds:>11.3f}"
              f"{ref.best_seconds / ours.best_seconds:>12.3f}"
              f"{ours.median_host_share:>12.2%}"
              f"{ours.compile_seconds:>19.2f}{ref.compile_seconds:>17.2f}", flush=True)
    print("ratio: Trainer / hand-fused env steps/s, medians over the runs; paired: median over "
          "back-to-back pairs of the same ratio; CPU ratio: hand-fused / Trainer median CPU "
          "seconds (>= 1: no more CPU spent); best ratio: fastest run against fastest run; "
          "host share: median part of the Trainer's loop spent outside waiting for the device "
          "(dispatch, callbacks, loggers), the overhead itself.")


if __name__ == "__main__":
    main(sys.argv[1:])
