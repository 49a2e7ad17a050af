"""PPO speed: the Trainer against PureJaxRL and against our own module hand-fused.

Four measurements in one process, CartPole-v1, 4 envs x 128 steps, 4 epochs x 4
minibatches (PureJaxRL's CartPole settings):

1. **against PureJaxRL**: ``Trainer(strategy="single")`` + :class:`PPO` (its
   defaults, and ``bootstrap_truncation=False``: PureJaxRL's terminal-only
   bootstrapping) vs the fused ``jit(lax.scan)`` PPO of PureJaxRL's
   ``purejaxrl/ppo.py`` (re-implemented in ``_reference_ppo.py``), 976 updates
   (5e5 env steps, its budget) per run. The Trainer logs CSV and TensorBoard every
   10 updates (progress bar and checkpoints off); both sides are timed after
   compilation and initialisation.
2. **Trainer overhead**: the Trainer vs one ``jax.jit(lax.scan(training_step))`` of the
   same module (``single``), and under ``pmap`` on 2 devices vs ``jax.pmap`` of the
   same scan with the same gradient ``pmean``. On CPU, fake devices share the cores
   and every minibatch all-reduce is real work, so the pmap row measures our
   overhead, not a speed-up.
3. **compile seconds** of the Trainer's training program
   (``Strategy.compile_train``: the fused interval loop, metric reductions,
   ``shard_map``) against the hand-fused scan, fresh traces without any cache,
   alternating, medians; and the seconds before the first step (init and
   training programs: the Trainer compiles them concurrently, the hand-written
   loop one after the other).
4. **second process**: ``python recipes/ppo.py`` on an empty persistent
   compilation cache, then ``--warm-runs`` more times: wall seconds of the cold
   and every warm run, their returns, and the warm runs' median.

Runs alternate (A B, B A, ...) and ratios compare medians and back-to-back pairs;
after (3), a throwaway persistent compilation cache spares the repeats' compiles of
(1); (2) compiles both sides afresh every run (XLA:CPU runs an executable loaded from
that cache in one of two thread modes, chosen by chance per process).

    python benchmarks/ppo_overhead.py [--updates 300] [--repeats 11] [--compile-repeats 7]
        [--warm-runs 3] [--only reference,overhead,compile,process]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from _reference_ppo import make_train  # noqa: E402
from _timing import (  # noqa: E402
    LoopClock,
    cpu_by_group,
    group_line,
    interleaved,
    paired_ratio,
    summarise,
    thread_cpu,
    use_compilation_cache,
)

import jaxtrainer as jt  # noqa: E402
from jaxtrainer.algorithms import PPO, PPOConfig  # noqa: E402
from jaxtrainer.distributed import AXIS_NAME  # noqa: E402
from jaxtrainer.strategies import resolve  # noqa: E402

REFERENCE_UPDATES = 976  # PureJaxRL's CartPole budget: 5e5 env steps // 512
STEPS_PER_UPDATE = 4 * 128


def make_module(updates: int, **config) -> PPO:
    return PPO(PPOConfig(env="CartPole-v1", total_updates=updates, **config))


def fused_program(module: PPO, updates: int, devices: int):
    """``(jitted init, jitted run)``: one ``lax.scan`` over all updates, under
    ``jax.pmap`` (gradients pmean-ed by the module) when ``devices > 1``."""
    if devices == 1:
        def run(state, key):
            return jax.lax.scan(module.training_step, state, jax.random.split(key, updates))
        return jax.jit(module.init_state), jax.jit(run, donate_argnums=0)

    def prun(state, key):
        keys = jax.random.split(jax.random.fold_in(key, jax.lax.axis_index(AXIS_NAME)), updates)
        return jax.lax.scan(module.training_step, state, keys)
    return (jax.pmap(module.init_state, axis_name=AXIS_NAME),
            jax.pmap(prun, axis_name=AXIS_NAME, donate_argnums=0))


def hand_fused(module: PPO, updates: int, seed: int, devices: int) -> tuple:
    """(run seconds, run CPU seconds, compile seconds, 0 host seconds, CPU
    seconds by thread group) of the fused scan."""
    init, run = fused_program(module, updates, devices)
    key = jax.random.key(seed) if devices == 1 else jnp.stack([jax.random.key(seed)] * devices)
    state = init(key)
    t = time.perf_counter()
    compiled = run.lower(state, key).compile()
    compile_s = time.perf_counter() - t
    threads = thread_cpu()
    t, c = time.perf_counter(), time.process_time()
    state, metrics = compiled(state, key)
    jax.block_until_ready((state, metrics))
    jax.device_get(metrics)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    return seconds, cpu, compile_s, 0.0, cpu_by_group(threads, thread_cpu())


def reference(updates: int, seed: int) -> tuple[float, float, float]:
    """(run seconds, run CPU seconds, compile seconds) of PureJaxRL's fused PPO."""
    train = jax.jit(make_train({"num_updates": updates}))
    key = jax.random.key(seed)
    t = time.perf_counter()
    compiled = train.lower(key).compile()
    compile_s = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    jax.device_get(compiled(key)[1])  # PureJaxRL returns every step's episode info
    return time.perf_counter() - t, time.process_time() - c, compile_s


def trainer_run(module: PPO, updates: int, seed: int, strategy: str, devices) -> tuple:
    """(seconds and CPU seconds of the training loop, compile seconds of the
    training program, host seconds of the loop, CPU seconds by thread group;
    see ``_timing.LoopClock``)."""
    clock = LoopClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = jt.Trainer(strategy=strategy, devices=devices, max_steps=updates,
                             log_every_n_steps=10, seed=seed, default_root_dir=root,
                             callbacks=[clock], enable_progress_bar=False,
                             enable_checkpointing=False, logger=True)
        trainer.fit(module)
    return (clock.seconds, clock.cpu_seconds, trainer.compile_seconds["train"], clock.host_seconds,
            clock.cpu_groups)


def compare(variants: dict, repeats: int, env_steps: int, ours: str, ref: str) -> str:
    runs = interleaved(variants, repeats)
    a, b = summarise(runs[ours]), summarise(runs[ref])
    row = (f"{env_steps / a.median_seconds:>12,.0f}{env_steps / b.median_seconds:>12,.0f}"
           f"{b.median_seconds / a.median_seconds:>8.3f}"
           f"{paired_ratio(runs[ours], runs[ref]):>8.3f}"
           f"{b.median_cpu_seconds / a.median_cpu_seconds:>11.3f}"
           f"{a.median_host_share:>12.2%}")
    groups = "\n".join(line for line in (group_line("ours", a), group_line("ref ", b)) if line)
    return row + ("\n" + groups if groups else "")


HEADER = (f"{'':<34}{'ours sps':>12}{'ref sps':>12}{'ratio':>8}{'paired':>8}{'CPU ratio':>11}"
          f"{'host share':>12}")


def against_reference(repeats: int) -> None:
    print(f"\n1. against PureJaxRL's PPO: {REFERENCE_UPDATES} updates = "
          f"{REFERENCE_UPDATES * STEPS_PER_UPDATE:,} env steps per run, {repeats} runs each")
    print(HEADER)
    steps = REFERENCE_UPDATES * STEPS_PER_UPDATE
    for name, config in (("Trainer + PPO (defaults)", {}),
                         ("Trainer + PPO (terminal-only GAE)", {"bootstrap_truncation": False})):
        module = make_module(REFERENCE_UPDATES, **config)
        variants = {"ours": lambda m=module: trainer_run(m, REFERENCE_UPDATES, 0, "single", 1),
                    "ref": lambda: reference(REFERENCE_UPDATES, 0)}
        print(f"{name:<34}{compare(variants, repeats, steps, 'ours', 'ref')}", flush=True)


def overhead(updates: int, repeats: int) -> None:
    """Both sides compile afresh every run (outside the timed loop): XLA:CPU runs
    an executable loaded from the persistent compilation cache in one of two
    thread modes, chosen by chance per process, which would decide a pair."""
    print(f"\n2. Trainer against the same module hand-fused: {updates} updates per run "
          "(programs compiled afresh, no persistent cache)")
    print(HEADER)
    module = make_module(updates)
    cached = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        for name, strategy, n in (("single", "single", 1), ("pmap x2", "pmap", 2)):
            variants = {"ours": lambda s=strategy, n=n: trainer_run(module, updates, 0, s, n),
                        "ref": lambda n=n: hand_fused(module, updates, 0, n)}
            row = compare(variants, repeats, updates * STEPS_PER_UPDATE, "ours", "ref")
            print(f"{name:<34}{row}", flush=True)
    finally:
        jax.config.update("jax_enable_compilation_cache", cached)


def compile_seconds(updates: int, repeats: int) -> None:
    """Fresh traces and compiles (no persistent cache yet), alternating."""
    print("\n3. compile seconds (medians of fresh compiles, alternating)")
    print(f"{'layout':<10}{'Trainer program':>17}{'hand-fused':>12}{'ratio':>8}"
          f"{'Trainer to 1st step':>21}{'fused to 1st step':>19}{'ratio':>8}")
    for name, strategy, n in (("single", "single", 1), ("pmap x2", "pmap", 2)):
        times: dict[str, list[float]] = {k: [] for k in ("trainer", "fused", "t_first", "f_first")}
        for r in range(repeats):
            for side in (("trainer", "fused") if r % 2 == 0 else ("fused", "trainer")):
                jax.clear_caches()
                module = make_module(updates)
                key = jax.random.key(r)
                start = time.perf_counter()
                if side == "trainer":
                    s = resolve(strategy, n)
                    state = s.init_state(module, key)
                    times["trainer"].append(s.compile_train(module, state, key).compile_seconds)
                    times["t_first"].append(first_step_seconds(module, strategy, n))
                else:
                    init, run = fused_program(module, updates, n)
                    keys = key if n == 1 else jnp.stack([key] * n)
                    state = jax.block_until_ready(init(keys))
                    t = time.perf_counter()
                    run.lower(state, keys).compile()
                    times["fused"].append(time.perf_counter() - t)
                    times["f_first"].append(time.perf_counter() - start)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name:<10}{med['trainer']:>17.2f}{med['fused']:>12.2f}"
              f"{med['trainer'] / med['fused']:>8.3f}{med['t_first']:>21.2f}{med['f_first']:>19.2f}"
              f"{med['t_first'] / med['f_first']:>8.3f}", flush=True)


class _Stop(Exception):
    pass


class _FirstStep(jt.Callback):
    def on_train_start(self, trainer, module):
        self.at = time.perf_counter()
        raise _Stop  # only the start-up is measured


def first_step_seconds(module: PPO, strategy: str, n: int) -> float:
    """Seconds from ``fit`` to the first training step (state and programs ready)."""
    jax.clear_caches()
    module = make_module(module.config.total_updates)
    clock = _FirstStep()
    with tempfile.TemporaryDirectory() as root:
        trainer = jt.Trainer(strategy=strategy, devices=n, max_steps=10, default_root_dir=root,
                             callbacks=[clock], enable_progress_bar=False, logger=False,
                             enable_checkpointing=False, compile_evaluation_ahead=False)
        start = time.perf_counter()
        try:
            trainer.fit(module)
        except _Stop:
            pass
    return clock.at - start


def second_process(warm_runs: int) -> None:
    """``python recipes/ppo.py`` cold, then ``warm_runs`` times warm, on a fresh
    cache directory."""
    print(f"\n4. second process: python recipes/ppo.py on an empty compilation cache, then "
          f"{warm_runs} more times")
    recipe = Path(__file__).parent.parent / "recipes" / "ppo.py"
    warm = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "JAXTRAINER_COMPILATION_CACHE": os.path.join(tmp, "cache")}
        env.pop("XLA_FLAGS", None)  # the recipe's own device setup
        for run in ["cold"] + [f"warm {i + 1}" for i in range(warm_runs)]:
            start = time.perf_counter()
            out = subprocess.run([sys.executable, str(recipe), f"trainer.default_root_dir={tmp}",
                                  "trainer.enable_progress_bar=false"], env=env,
                                 capture_output=True, text=True, check=True)
            seconds = time.perf_counter() - start
            warm += [seconds] if run != "cold" else []
            print(f"{run:<8}{seconds:>8.1f} s   {out.stdout.strip().splitlines()[-1]}", flush=True)
    print(f"warm median {statistics.median(warm):.1f} s")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=300,
                        help="PPO updates per run of the overhead and compile measurements")
    parser.add_argument("--repeats", type=int, default=11,
                        help="runs per variant, interleaved; medians are reported")
    parser.add_argument("--compile-repeats", type=int, default=7,
                        help="fresh compiles per side for the compile seconds (medians)")
    parser.add_argument("--warm-runs", type=int, default=3,
                        help="warm runs of the recipe after the cold one (second process)")
    parser.add_argument("--only", default="reference,overhead,compile,process",
                        help="comma-separated measurements to run")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} devices, "
          f"{os.cpu_count()} CPUs")
    if "process" in only:
        second_process(args.warm_runs)
    if "compile" in only:
        compile_seconds(args.updates, args.compile_repeats)
    use_compilation_cache()
    if "reference" in only:
        against_reference(args.repeats)
    if "overhead" in only:
        overhead(args.updates, args.repeats)
    print("\nsps: env steps/s (medians); ratio: ours / reference env steps/s (of the medians); "
          "paired: median over back-to-back pairs of the same ratio, the headline (a drift of "
          "the machine's speed hits both runs of a pair); CPU ratio: reference / ours CPU seconds (>= 1: no more CPU "
          "spent); host share: part of the Trainer's loop spent outside waiting for the device "
          "(dispatch, callbacks, loggers). Compile: Trainer program = Strategy.compile_train "
          "(trace, lower, XLA compile); to 1st step = from fit() (Trainer: init and training "
          "programs compiled concurrently) or from the first jit call (hand-fused: init, then "
          "the scan) until the first update can run.")


if __name__ == "__main__":
    main(sys.argv[1:])
