"""Trainer overhead on PPO: the Trainer against a hand-fused jit(lax.scan) loop.

Runs the same PPO module (CartPole-v1, 4 envs x 128 steps, 4 epochs x 4
minibatches) four ways in one process and prints env steps/s, ratios and
compile times:

1. ``Trainer(strategy="single")`` logging every 10 updates (CSV and TensorBoard
   loggers on, progress bar and checkpoints off) vs one
   ``jax.jit(lax.scan(training_step))``. Both are timed after compilation and
   initialisation: the Trainer from ``on_train_start`` (after waiting for its
   background evaluation compile) to ``on_train_end`` (all fused calls, metric
   fetches and callbacks), the fused loop around one call.
2. ``Trainer(strategy="pmap")`` on 2 devices vs the same scan under ``jax.pmap``
   with the same gradient ``pmean``.

On CPU, fake devices share the cores and every minibatch all-reduce is real
work, so (2) measures our overhead, not a speed-up.

    python benchmarks/ppo_overhead.py [--updates 300] [--repeats 3]
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


class _LoopClock(jt.Callback):
    """Wall time from ``on_train_start`` (programs compiled, state initialised)
    to ``on_train_end``: every fused call, metric fetch and callback of the loop."""

    def needs_state(self, trainer, module, step):
        return False  # a clock: the next interval may be enqueued before its hooks

    def on_train_start(self, trainer, module):
        trainer.wait_for_compilation()  # the evaluation program compiles in the background
        self.start, self.cpu = time.perf_counter(), time.process_time()

    def on_train_end(self, trainer, module):
        jax.block_until_ready(trainer.state)
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = time.process_time() - self.cpu


def trainer_run(module: PPO, updates: int, seed: int, strategy: str, devices) -> tuple[float, float, float]:
    """(seconds and CPU seconds of the training loop, compile seconds of the training program)."""
    clock = _LoopClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = jt.Trainer(strategy=strategy, devices=devices, max_steps=updates,
                             log_every_n_steps=10, seed=seed, default_root_dir=root,
                             callbacks=[clock], enable_progress_bar=False,
                             enable_checkpointing=False, logger=True)
        trainer.fit(module)
    return clock.seconds, clock.cpu_seconds, trainer.compile_seconds["train"]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=300, help="PPO updates per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant, interleaved; best is kept")
    args = parser.parse_args(argv)
    env_steps = args.updates * 4 * 128
    module = make_module(args.updates)
    print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} devices, "
          f"{args.updates} updates = {env_steps:,} env steps per run, best of {args.repeats}")

    def best_interleaved(ours, ref):
        """Alternate the two variants (this machine's speed drifts between runs)
        and keep each one's best run: (ours, ref), each (seconds, CPU seconds,
        compile s). CPU seconds (all threads of the process) are less sensitive
        to other jobs on the machine than wall time."""
        runs_a, runs_b = [], []
        for _ in range(args.repeats):
            runs_a.append(ours())
            runs_b.append(ref())
        return ((min(r[0] for r in runs_a), min(r[1] for r in runs_a), runs_a[0][2]),
                (min(r[0] for r in runs_b), min(r[1] for r in runs_b), runs_b[0][2]))

    rows = [
        ("single", *best_interleaved(lambda: trainer_run(module, args.updates, 0, "single", 1),
                                     lambda: hand_fused_single(module, args.updates, 0))),
        ("pmap x2", *best_interleaved(lambda: trainer_run(module, args.updates, 0, "pmap", 2),
                                      lambda: hand_fused_pmap(module, args.updates, 0, 2))),
    ]
    print(f"{'layout':<9}{'trainer env steps/s':>21}{'fused env steps/s':>19}{'ratio':>8}"
          f"{'CPU ratio':>11}{'trainer compile s':>19}{'fused compile s':>17}")
    for name, (t_run, t_cpu, t_comp), (f_run, f_cpu, f_comp) in rows:
        ours, ref = env_steps / t_run, env_steps / f_run
        print(f"{name:<9}{ours:>21,.0f}{ref:>19,.0f}{ours / ref:>8.3f}{f_cpu / t_cpu:>11.3f}"
              f"{t_comp:>19.2f}{f_comp:>17.2f}")
    print("ratio: wall-clock env steps/s, Trainer / hand-fused; CPU ratio: hand-fused CPU "
          "seconds / Trainer CPU seconds for the same work (>= 1: no more CPU spent).")


if __name__ == "__main__":
    main(sys.argv[1:])
