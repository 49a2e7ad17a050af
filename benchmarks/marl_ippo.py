"""Our IPPO (and MAPPO) against JaxMARL's own IPPO baseline on MPE simple_spread_v3.

Both sides train on JaxMARL's ``MPE_simple_spread_v3`` (3 agents, 26-step
episodes; the installed ``jaxmarl`` package) at JaxMARL's published IPPO
settings (``baselines/IPPO/config/ippo_ff_mpe.yaml``: 16 games, 128-step
rollouts, 4 epochs of 4 minibatches, lr 2.5e-4 annealed over the run, clip 0.2,
entropy 0.01, tanh 64x64, terminal-only GAE), in one process, one pair of runs
per seed, alternating (ours, theirs, theirs, ours, ...):

* ours: ``Trainer(strategy="single")`` with ``recipes/configs/ippo.yaml`` (PPO on
  :class:`~jaxtrainer.envs.AgentsAsEnvs`: 48 agent-envs = 16 games x 3), timed
  from ``on_train_start`` (programs compiled) to ``on_train_end`` (last state
  ready); loggers, checkpoints and the progress bar off;
* theirs: the baseline's ``make_train(config)`` (``baselines/IPPO/ippo_ff_mpe.py``)
  for one seed, ``jax.jit``-compiled ahead, then the compiled call timed to the
  last output being ready. Its per-update ``wandb.log`` callback is kept and
  made a no-op (wandb off, as the config's ``WANDB_MODE: disabled``).

The baseline is not part of this repository; get it with::

    git clone https://github.com/FLAIROx/JaxMARL /tmp/jaxmarl_src
    python benchmarks/marl_ippo.py --baseline /tmp/jaxmarl_src

(any checkout whose ``baselines/IPPO/ippo_ff_mpe.py`` imports against the
installed ``jaxmarl``; only that file and its YAML are read, and ``hydra``, which
the file imports for its command line, is replaced by a stub when missing).

Env steps are GAME steps (JaxMARL's ``TOTAL_TIMESTEPS``; each is 3 agent
steps), ``--env-steps`` per run (default 2e6: 976 updates of 2,048). The final
return is the mean episode return over the last ``--last`` fraction of the
updates (default 0.1), per agent and averaged over agents and games, both sides:
ours is ``train/episode_return`` (each update's mean over the episodes it
completed) averaged over those updates;
theirs is the baseline's ``returned_episode_returns`` (each update's mean over
its steps of the last completed episode's return) averaged over those updates,
divided by the 3 agents (its ``MPELogWrapper`` logs rewards times the
number of agents).

``--json PATH`` adds every run's figures to that file (``benchmarks/published.py``
reads it for the baselines page).

``--mappo`` (on by default; ``--no-mappo`` to skip) also trains MAPPO
(``recipes/configs/mappo.yaml``: a centralised critic on each agent's game's
global state and its one-hot id) at the same budget, one run per seed.

Prints every run, the median env steps/s and final return of each side over the
seeds, the return gap, and last a line ``ratio=<ours/theirs>``: the median over
the back-to-back pairs of our env steps/s over theirs.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from pathlib import Path

import jax
import numpy as np
from _jaxmarl_baseline import load_baseline
from _timing import LoopClock, TrainingReturns, record_run, use_compilation_cache

import jaxtrainer as jt
from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.recipes import config

ROOT = Path(__file__).resolve().parents[1] / "recipes" / "configs"
GAMES, STEPS, AGENTS = 16, 128, 3


def run_theirs(baseline: types.ModuleType, cfg: dict, game_steps: int, seed: int,
               last: int) -> tuple[float, float, list[list[float]]]:
    """(game steps/s of the compiled run, mean per-agent return over the last updates,
    the per-agent return of every update as ``[game steps, return]`` pairs)."""
    train = jax.jit(baseline.make_train({**cfg, "TOTAL_TIMESTEPS": game_steps}))
    rng = jax.random.PRNGKey(seed)
    compiled = train.lower(rng).compile()
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(rng))
    seconds = time.perf_counter() - start
    returns = np.asarray(out["metrics"]["returned_episode_returns"]) / AGENTS
    updates = returns.shape[0]
    per_update = returns.reshape(updates, -1).mean(axis=1)
    curve = [[float((u + 1) * GAMES * STEPS), float(r)] for u, r in enumerate(per_update)]
    return updates * GAMES * STEPS / seconds, float(np.mean(returns[-last:])), curve


def run_ours(recipe: str, updates: int, seed: int,
             last: int) -> tuple[float, float, list[list[float]]]:
    """(game steps/s after compilation, mean per-agent return over the last updates,
    the return of every update as ``[game steps, return]`` pairs)."""
    cfg = config.load(ROOT / recipe, [], defaults=ROOT / "ppo.yaml")
    module = PPO(PPOConfig(env=cfg.env.name, **config.section(cfg, "algorithm")),
                 env=config.make_env(cfg))
    assert module.config.num_envs == GAMES * AGENTS and module.config.num_steps == STEPS
    clock, returns = LoopClock(), TrainingReturns()
    trainer = jt.Trainer(strategy="single", max_steps=updates, seed=seed, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         log_every_n_steps=1, callbacks=[clock, returns],
                         compile_evaluation_ahead=False,
                         default_root_dir="/tmp/jaxtrainer-bench-marl-ippo")
    trainer.fit(module)
    curve = [[steps / AGENTS, ret] for steps, ret in returns.curve]  # agent steps -> game steps
    final = float(np.mean([ret for _, ret in curve[-last:]]))
    return updates * GAMES * STEPS / clock.seconds, final, curve


def _report(name: str, seed: int, speed: float, ret: float, start: float) -> None:
    print(f"  seed {seed} {name:6s}: {speed:9,.0f} env steps/s  return {ret:8.2f}  "
          f"({time.perf_counter() - start:.0f} s with compile)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True,
                        help="a JaxMARL checkout (git clone https://github.com/FLAIROx/JaxMARL)")
    parser.add_argument("--env-steps", type=float, default=2e6, help="game steps per run")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated; one pair per seed")
    parser.add_argument("--last", type=float, default=0.1,
                        help="fraction of the updates the final return averages over")
    parser.add_argument("--mappo", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", type=Path, default=None,
                        help="add every run's figures and curve to this JSON file")
    args = parser.parse_args()
    baseline, cfg = load_baseline(args.baseline)
    seeds = [int(s) for s in args.seeds.split(",")]
    updates = int(args.env_steps) // (GAMES * STEPS)
    last = max(1, round(args.last * updates))
    use_compilation_cache()
    print(f"MPE_simple_spread_v3 on {jax.devices()[0].device_kind}: {GAMES} games x {AGENTS} "
          f"agents, {updates} updates x {GAMES * STEPS:,} game steps = "
          f"{updates * GAMES * STEPS:,} per run; final return over the last {last} updates")
    sps: dict[str, list[float]] = {"ours": [], "theirs": [], "mappo": []}
    rets: dict[str, list[float]] = {"ours": [], "theirs": [], "mappo": []}
    runs = {"ours": lambda seed: run_ours("ippo.yaml", updates, seed, last),
            "theirs": lambda seed: run_theirs(baseline, cfg, updates * GAMES * STEPS, seed, last),
            "mappo": lambda seed: run_ours("mappo.yaml", updates, seed, last)}
    for r, seed in enumerate(seeds):
        order = ["ours", "theirs"] if r % 2 == 0 else ["theirs", "ours"]
        for name in order + (["mappo"] if args.mappo else []):
            start = time.perf_counter()
            speed, ret, curve = runs[name](seed)
            sps[name].append(speed)
            rets[name].append(ret)
            _report(name, seed, speed, ret, start)
            record_run(args.json, side=name, seed=seed, env="MPE_simple_spread_v3",
                       env_steps=updates * GAMES * STEPS, env_steps_per_s=speed,
                       final_return=ret, wall_s=time.perf_counter() - start, curve=curve)
    med = {name: statistics.median(v) for name, v in rets.items() if v}
    pairs = [a / b for a, b in zip(sps["ours"], sps["theirs"], strict=True)]
    gap = (med["ours"] - med["theirs"]) / abs(med["theirs"])
    print(f"median env steps/s: ours {statistics.median(sps['ours']):,.0f}, "
          f"theirs {statistics.median(sps['theirs']):,.0f}; pair ratios "
          f"{np.round(pairs, 3).tolist()}")
    print(f"median final return over seeds {args.seeds}: ours {med['ours']:.2f}, theirs "
          f"{med['theirs']:.2f} (ours {100 * gap:+.1f}% of |theirs|)")
    if args.mappo:
        print(f"MAPPO: median final return {med['mappo']:.2f} (IPPO ours {med['ours']:.2f}), "
              f"median {statistics.median(sps['mappo']):,.0f} env steps/s")
    print(f"ratio={statistics.median(pairs):.3f}")


if __name__ == "__main__":
    main()
