"""Our PPO against Brax's own trainer (``brax.training.agents.ppo.train``).

Both train on the same brax environment (brax's default pipeline) with the same
sizes and the same number of updates, in one process, alternating (ours, Brax,
Brax, ours, ...), each timed after compilation:

* ours: ``Trainer(strategy="single")`` with ``recipes/configs/ppo_brax.yaml``
  (Brax's published ant settings) at the chosen size, timed from
  ``on_train_start`` (programs compiled) to ``on_train_end`` (last state ready);
  loggers, checkpoints and the progress bar off, as Brax's trainer has none;
* Brax: its ``training/sps`` over every training epoch but the first (which
  compiles), evaluations excluded, as Brax reports it.

Same sizes means: ``num_envs``, Brax's ``batch_size * num_minibatches /
num_envs`` unrolls of ``unroll_length`` steps per update (our ``num_steps``, GAE
per unroll), ``num_minibatches``, 4 epochs, policy 4 x 32 and value 5 x 256
swish MLPs, observation normalisation and reward scaling on, and the same
policy (``ppo_brax.yaml``'s ``policy: brax``: Brax's tanh-squashed Gaussian with
a learned scale and ``lecun_uniform`` layers), so the returns are compared.

    python benchmarks/brax_ppo.py --size small   # CPU: inverted_pendulum, 64 envs (minutes)
    python benchmarks/brax_ppo.py --size full    # accelerator: ant, 4096 envs, Brax's settings, 6.5e6 env steps
    python benchmarks/brax_ppo.py --size full --env-steps 50000000 --seeds 0   # Brax's published budget

``--env-steps`` sets each run's budget (both sides; rounded up to whole Brax training
epochs, the number of epochs kept); ``--sides`` runs one side only (``ours`` or ``brax``),
so that long runs can be split; ``--json PATH`` adds every run's figures to that file
(``benchmarks/published.py`` reads it for the baselines page), with a curve per run: ours
the training return after every Brax epoch's worth of updates, Brax's its evaluation
return after every epoch.

One pair of runs per seed (``--seeds``, default 0,1,2; the order alternates).
Prints env steps/s and the final greedy return of each run, the median return
of each side over the seeds and their difference, and last a line
``ratio=<ours/brax>``: the median over the back-to-back pairs of our env
steps/s over Brax's.

Brax 0.14's trainer calls a replication function JAX 0.10 no longer has;
for the duration of that call only, this script supplies an equivalent (a copy per device, laid out as
``jax.pmap`` lays out its outputs) before calling it.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _timing import LoopClock, TrainingReturns, record_run, use_compilation_cache

import jaxtrainer as jt
from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.recipes import config

ROOT = Path(__file__).resolve().parents[1] / "recipes" / "configs"

SIZES = {
    # env, num_envs, batch_size (Brax: unrolls per minibatch), num_minibatches,
    # updates per Brax epoch, Brax epochs timed (one more compiles), eval envs
    "small": dict(env="inverted_pendulum", num_envs=64, batch_size=64, num_minibatches=4,
                  updates_per_epoch=10, epochs=4, eval_envs=16),
    "full": dict(env="ant", num_envs=4096, batch_size=2048, num_minibatches=32,
                 updates_per_epoch=4, epochs=4, eval_envs=128),
}
UNROLL, EPOCHS_PER_UPDATE = 5, 4


@contextlib.contextmanager
def _brax_replication_shim():
    """For the duration of Brax's trainer only: the replication call it makes,
    which JAX 0.10 no longer has (a copy of every leaf per device, laid out as
    ``jax.pmap`` lays out its outputs). Restored on exit; our side never uses it."""
    name = "device_put_replicated"
    if hasattr(jax, name):
        yield
        return

    def replicate(tree, devices):
        stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(devices),) + jnp.shape(x)), tree)
        return jax.pmap(lambda x: x, devices=devices)(stacked)

    setattr(jax, name, replicate)
    try:
        yield
    finally:
        delattr(jax, name)


def steps_per_update(size: dict) -> int:
    return size["batch_size"] * size["num_minibatches"] * UNROLL


def with_budget(size: dict, env_steps: int | None) -> dict:
    """``size`` with as many updates per Brax epoch as ``env_steps`` needs over its
    ``epochs + 1`` training epochs (unchanged when ``env_steps`` is None)."""
    if env_steps is None:
        return size
    epochs = size["epochs"] + 1
    return dict(size, updates_per_epoch=math.ceil(env_steps / (epochs * steps_per_update(size))))


def run_ours(size: dict, updates: int, seed: int) -> tuple[float, float, list[list[float]]]:
    """(env steps/s after compilation, final evaluation return, the training return at
    the end of every Brax epoch's worth of updates as ``[env steps, return]`` pairs)."""
    num_steps = steps_per_update(size) // size["num_envs"]
    cfg = config.load(ROOT / "ppo_brax.yaml", [
        f"env.name=brax/{size['env']}", f"algorithm.num_envs={size['num_envs']}",
        f"algorithm.num_steps={num_steps}", f"algorithm.num_minibatches={size['num_minibatches']}",
        f"algorithm.eval_episodes={size['eval_envs']}"], defaults=ROOT / "ppo.yaml")
    module = PPO(PPOConfig(env=cfg.env.name, **config.section(cfg, "algorithm")),
                 env=config.make_env(cfg))
    clock, returns = LoopClock(), TrainingReturns()
    trainer = jt.Trainer(strategy="single", max_steps=updates, seed=seed, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         log_every_n_steps=size["updates_per_epoch"], callbacks=[clock, returns],
                         default_root_dir="/tmp/jaxtrainer-bench-brax-ppo")
    trainer.fit(module)
    result = trainer.evaluate(module)
    return (updates * module.env_steps_per_step / clock.seconds, result["eval/episode_return"],
            returns.curve)


def run_brax(size: dict, seed: int) -> tuple[float, float, list[list[float]]]:
    """(env steps/s of Brax's training epochs after the first, final evaluation return,
    its evaluation return after every epoch as ``[env steps, return]`` pairs)."""
    from brax import envs
    from brax.training.agents.ppo import train as brax_ppo

    progress: list[dict] = []
    num_evals = size["epochs"] + 2  # an initial evaluation, then one after each epoch
    with _brax_replication_shim():
        brax_ppo.train(
            envs.get_environment(size["env"]),
            num_timesteps=(num_evals - 1) * size["updates_per_epoch"] * steps_per_update(size),
            num_evals=num_evals, num_envs=size["num_envs"], batch_size=size["batch_size"],
            num_minibatches=size["num_minibatches"], unroll_length=UNROLL,
            num_updates_per_batch=EPOCHS_PER_UPDATE, episode_length=1000, discounting=0.97,
            learning_rate=3e-4, entropy_cost=1e-2, reward_scaling=10, normalize_observations=True,
            num_eval_envs=size["eval_envs"], seed=seed,
            progress_fn=lambda step, metrics: progress.append(dict(metrics, env_steps=step)))
    timed = [m for m in progress if "training/sps" in m][1:]  # the first epoch compiles
    seconds = sum(size["updates_per_epoch"] * steps_per_update(size) / m["training/sps"]
                  for m in timed)
    sps = len(timed) * size["updates_per_epoch"] * steps_per_update(size) / seconds
    curve = [[float(m["env_steps"]), float(m["eval/episode_reward"])] for m in progress]
    return sps, float(progress[-1]["eval/episode_reward"]), curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--seeds", default="0,1,2",
                        help="comma-separated seeds: one pair of runs (ours, Brax) per seed")
    parser.add_argument("--env-steps", type=int, default=None,
                        help="env steps per run, both sides (default: the size's)")
    parser.add_argument("--sides", default="ours,brax",
                        help="which trainers run: ours, brax or both (ours,brax)")
    parser.add_argument("--json", type=Path, default=None,
                        help="add every run's figures and curve to this JSON file")
    args = parser.parse_args()
    size = with_budget(SIZES[args.size], args.env_steps)
    seeds = [int(s) for s in args.seeds.split(",")]
    sides = tuple(args.sides.split(","))
    if not set(sides) <= {"ours", "brax"} or len(set(sides)) != len(sides):
        parser.error(f"--sides {args.sides!r}: expected ours, brax or ours,brax")
    updates = (size["epochs"] + 1) * size["updates_per_epoch"]
    use_compilation_cache()
    print(f"{args.size}: brax/{size['env']} on {jax.devices()[0].device_kind} "
          f"({jax.device_count()} device(s)), {size['num_envs']} envs, "
          f"{steps_per_update(size):,} env steps per update, {updates} updates per run "
          f"= {updates * steps_per_update(size):,} env steps", flush=True)
    sps: dict[str, list[float]] = {"ours": [], "brax": []}
    returns: dict[str, list[float]] = {"ours": [], "brax": []}
    for r, seed in enumerate(seeds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name in order:
            start = time.perf_counter()
            speed, ret, curve = (run_ours(size, updates, seed) if name == "ours"
                                 else run_brax(size, seed))
            sps[name].append(speed)
            returns[name].append(ret)
            wall = time.perf_counter() - start
            record_run(args.json, side=name, seed=seed, env=f"brax/{size['env']}",
                       env_steps=updates * steps_per_update(size), env_steps_per_s=speed,
                       final_return=ret, wall_s=wall, curve=curve)
            print(f"  seed {seed} {name:4s}: {speed:10,.0f} env steps/s  return {ret:9.2f}  "
                  f"({wall:.0f} s with compile and evaluation)", flush=True)
    if len(sides) == 1:
        name = sides[0]
        print(f"{name}: median env steps/s {statistics.median(sps[name]):,.0f}, median final "
              f"return {statistics.median(returns[name]):.2f} over seeds {args.seeds}")
        return
    pairs = [a / b for a, b in zip(sps["ours"], sps["brax"], strict=True)]
    ours_ret, brax_ret = statistics.median(returns["ours"]), statistics.median(returns["brax"])
    gap = abs(ours_ret - brax_ret) / max(abs(brax_ret), 1e-9)
    print(f"median env steps/s: ours {statistics.median(sps['ours']):,.0f}, "
          f"brax {statistics.median(sps['brax']):,.0f}; pair ratios {np.round(pairs, 3).tolist()}")
    print(f"median final return over seeds {args.seeds}: ours {ours_ret:.2f}, brax {brax_ret:.2f} "
          f"(difference {100 * gap:.1f}% of Brax's)")
    print(f"ratio={statistics.median(pairs):.3f}")


if __name__ == "__main__":
    main()
