"""Brax's own SAC trainer, ``brax.training.agents.sac.train``, at the settings Brax
publishes for hopper (its training notebook, ``notebooks/training.ipynb``:
``num_timesteps=6_553_600, num_evals=20, reward_scaling=30, episode_length=1000,
normalize_observations=True, action_repeat=1, discounting=0.997, learning_rate=6e-4,
num_envs=128, batch_size=512, grad_updates_per_step=64, max_devices_per_host=1,
max_replay_size=1048576, min_replay_size=8192``), called unmodified.

    python _brax_sac_original.py [--env hopper] [--num-timesteps 6553600] [--num-evals 20] [--seed 1]

``--num-timesteps`` and ``--num-evals`` change the budget only (Brax counts the
replay buffer's prefill of ``min_replay_size`` env steps in it); ``--set name=value``
changes one published setting (tiny sizes for a smoke test on a CPU). Prints one JSON line:
``env_steps`` (Brax's count at the end), ``run_s`` and ``env_steps_per_s`` over the
training epochs after the first (which compiles; evaluations excluded, as Brax's
``training/sps``), ``first_epoch_s``, ``wall_s`` (the call, everything included) and
``eval_return``: Brax's evaluation after the last epoch (``num_eval_envs=128``
episodes of ``episode_length`` steps, a stochastic policy: Brax's
``deterministic_eval=False``).

Brax 0.14's trainer calls a replication function JAX 0.10 no longer has:
``benchmarks/brax_ppo.py``'s shim supplies it for the duration of the call.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
from brax import envs  # noqa: E402
from brax.training.agents.sac import train as brax_sac  # noqa: E402
from brax_ppo import _brax_replication_shim  # noqa: E402

PUBLISHED = {  # Brax's notebook, "hopper"
    "num_timesteps": 6_553_600, "num_evals": 20, "reward_scaling": 30, "episode_length": 1000,
    "normalize_observations": True, "action_repeat": 1, "discounting": 0.997,
    "learning_rate": 6e-4, "num_envs": 128, "batch_size": 512, "grad_updates_per_step": 64,
    "max_devices_per_host": 1, "max_replay_size": 1048576, "min_replay_size": 8192,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="hopper", help="a brax env name")
    parser.add_argument("--num-timesteps", type=int, default=PUBLISHED["num_timesteps"])
    parser.add_argument("--num-evals", type=int, default=PUBLISHED["num_evals"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help=f"change one of {', '.join(PUBLISHED)}")
    args = parser.parse_args()
    progress: list[tuple[int, dict]] = []
    settings = dict(PUBLISHED, num_timesteps=args.num_timesteps, num_evals=args.num_evals)
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in PUBLISHED or not value:
            parser.error(f"--set {item!r}: expected NAME=VALUE with NAME one of {', '.join(PUBLISHED)}")
        settings[name] = type(PUBLISHED[name])(float(value) if isinstance(PUBLISHED[name], float)
                                               else int(value) if not isinstance(PUBLISHED[name], bool)
                                               else value.lower() == "true")
    start = time.perf_counter()
    with _brax_replication_shim():
        brax_sac.train(envs.get_environment(args.env), seed=args.seed,
                       progress_fn=lambda step, m: progress.append((int(step), dict(m))), **settings)
    wall = time.perf_counter() - start
    epochs = [(step, m) for step, m in progress if "training/walltime" in m]
    if len(epochs) < 2:
        raise SystemExit(f"{len(epochs)} training epoch(s): give --num-evals >= 3 to time one "
                         "after the compiling first")
    (first_step, first), (last_step, last) = epochs[0], epochs[-1]
    run_s = float(last["training/walltime"]) - float(first["training/walltime"])
    print(json.dumps({
        "side": "brax", "env": args.env, "seed": args.seed, "env_steps": last_step,
        "env_steps_per_s": (last_step - first_step) / run_s, "run_s": run_s,
        "first_epoch_s": float(first["training/walltime"]), "wall_s": wall,
        "eval_return": float(progress[-1][1]["eval/episode_reward"]),
        "curve": [[s, float(m["eval/episode_reward"])] for s, m in progress],
        "device": jax.devices()[0].device_kind, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main()
