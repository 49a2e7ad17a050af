"""VideoCallback's cost: PPO's env steps per second on CartPole-v1 with videos
on against off, in one process (issue 50, must-show 1: >= 0.9).

Each run is the ``ppo`` recipe's PPO (4 envs x 128 steps, 4 epochs x 4
minibatches) for ``--updates`` updates under ``Trainer(strategy="single")``,
logging CSV and TensorBoard every 10 updates (progress bar and checkpoints off).
"on" adds ``VideoCallback(every_n_steps=--every)``: with the defaults 976 updates
(PureJaxRL's budget, 5e5 env steps) and a video every 200, 4 videos of up to 100
frames each. The clock (``_timing.LoopClock``) runs from ``on_train_start`` to
``on_train_end``: the training, with every video rendered while it runs. Videos
still rendering when training ends are finished in ``on_fit_end``; the whole
``fit`` (that tail included) is printed beside. Runs alternate (on off, off on, ...) after one warm-up
pair (compiles; a throwaway persistent compilation cache spares later compiles,
the episode program's included); the headline is the median ratio of
back-to-back pairs.

    python benchmarks/video_overhead.py [--updates 976] [--every 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _timing import LoopClock, interleaved, paired_ratio, use_compilation_cache

import jaxtrainer as jt
from jaxtrainer.algorithms.ppo import PPO, PPOConfig

STEPS_PER_UPDATE = 4 * 128
FIT_SECONDS: dict[str, list[float]] = {"on": [], "off": []}


def run(updates: int, every: int | None, seed: int) -> tuple:
    """(loop seconds, loop CPU seconds, training compile seconds, host seconds); the whole
    ``fit``'s seconds are appended to ``FIT_SECONDS["on" or "off"]``."""
    clock = LoopClock()
    module = PPO(PPOConfig(env="CartPole-v1", total_updates=updates))
    with tempfile.TemporaryDirectory() as root:
        video = [] if every is None else [jt.VideoCallback(every_n_steps=every)]
        trainer = jt.Trainer(strategy="single", max_steps=updates, log_every_n_steps=10,
                             seed=seed, default_root_dir=root, callbacks=[*video, clock],
                             enable_progress_bar=False, enable_checkpointing=False, logger=True)
        start = time.perf_counter()
        trainer.fit(module)
        fit_seconds = time.perf_counter() - start
        if video:
            made = [step for step, _ in video[0].videos]
            assert made == list(range(every, updates + 1, every)), made
            assert all(Path(p).stat().st_size > 0 for _, p in video[0].videos)
    FIT_SECONDS["off" if every is None else "on"].append(fit_seconds)
    return clock.seconds, clock.cpu_seconds, trainer.compile_seconds["train"], clock.host_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=976)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    use_compilation_cache()
    seeds = iter(range(1000))
    variants = {"on": lambda: run(args.updates, args.every, next(seeds)),
                "off": lambda: run(args.updates, None, next(seeds))}
    interleaved(variants, 1)  # warm-up pair: compiles (training, evaluation, episode programs)
    runs = interleaved(variants, args.repeats)
    env_steps = args.updates * STEPS_PER_UPDATE
    rates = {name: [env_steps / r.seconds for r in rs] for name, rs in runs.items()}
    print(f"PPO CartPole-v1, {args.updates} updates ({env_steps:,} env steps), "
          f"{args.repeats} alternating pairs; video every {args.every} updates "
          f"({args.updates // args.every} videos)")
    for name in ("off", "on"):
        print(f"  video {name:<3}  env steps/s  median {statistics.median(rates[name]):>9,.0f}  "
              f"runs {', '.join(f'{r:,.0f}' for r in rates[name])}; whole fit median "
              f"{statistics.median(FIT_SECONDS[name][1:]):.2f} s")  # [0]: the warm-up
    # paired_ratio(ours, ref): median of ref.seconds / ours.seconds = rate(on) / rate(off)
    ratio = paired_ratio(runs["on"], runs["off"])
    print(f"ratio on/off (median of back-to-back pairs): {ratio:.3f} (must be >= 0.9)")


if __name__ == "__main__":
    main()
