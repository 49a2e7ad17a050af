"""MuJoCo Playground's PPO as Playground trains it: Brax's ``ppo.train`` on the task from
``mujoco_playground.registry.load(name)``, wrapped by Playground's
``wrapper.wrap_for_brax_training``, with Playground's published PPO config for the task
(``mujoco_playground.config.dm_control_suite_params.brax_ppo_config(name)``), called
unmodified.

    python _playground_ppo_original.py [--env CartpoleBalance] [--num-timesteps N] \\
        [--num-evals K] [--seed 0] [--set NAME=VALUE ...]

``--num-timesteps`` and ``--num-evals`` change the budget only; ``--set`` changes one
setting of the published config (tiny sizes for a smoke test on a CPU); ``--impl`` the
task's MJX implementation (``jax`` as ``ppo_playground.yaml``; Playground picks MuJoCo
Warp where it is installed). Prints one
JSON line: ``env_steps`` (Brax's count at the end), ``run_s`` and ``env_steps_per_s``
over the training epochs after the first (which compiles), by Brax's clock of training
time (``training/walltime``: evaluations excluded), ``wall_s`` (the call, everything included), ``eval_return``:
Brax's evaluation after the last epoch, and the evaluation curve.

Brax 0.14's trainer calls a replication function JAX 0.10 no longer has:
``benchmarks/brax_ppo.py``'s shim supplies it for the duration of the call.
"""

from __future__ import annotations

import argparse
import inspect
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import _settings  # noqa: E402
import jax  # noqa: E402
from brax.training.agents.ppo import train as brax_ppo  # noqa: E402
from brax_ppo import _brax_replication_shim  # noqa: E402
from mujoco_playground import registry, wrapper  # noqa: E402
from mujoco_playground.config import dm_control_suite_params  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartpoleBalance", help="a Playground DM Control suite task")
    parser.add_argument("--num-timesteps", type=int, default=None, help="default: the published")
    parser.add_argument("--num-evals", type=int, default=None, help="default: the published")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--impl", default="jax", help="the task's MJX implementation (config "
                        "override impl; ppo_playground.yaml's: jax)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    settings = dict(dm_control_suite_params.brax_ppo_config(args.env))
    for name, value in (("num_timesteps", args.num_timesteps), ("num_evals", args.num_evals)):
        if value is not None:
            settings[name] = value
    known = inspect.signature(brax_ppo.train).parameters
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in known or not value:
            parser.error(f"--set {item!r}: expected NAME=VALUE with NAME a parameter of Brax's "
                         "ppo.train")
        default = settings.get(name, known[name].default)
        settings[name] = _settings.value(value, default if default is not None else 0)
    progress: list[tuple[int, dict]] = []
    start = time.perf_counter()
    with _brax_replication_shim():
        brax_ppo.train(environment=registry.load(args.env, config_overrides={"impl": args.impl}),
                       seed=args.seed,
                       wrap_env_fn=wrapper.wrap_for_brax_training,
                       progress_fn=lambda step, m: progress.append((int(step), dict(m))),
                       **settings)
    wall = time.perf_counter() - start
    epochs = [(step, m) for step, m in progress if "training/sps" in m]
    if len(epochs) < 2:
        raise SystemExit(f"{len(epochs)} training epoch(s): give --num-evals >= 3 to time one "
                         "after the compiling first")
    steps = [s for s, _ in progress]
    # Timed from the end of the first training epoch (which compiles) to the end of the last,
    # by Brax's own clock of training time (evaluations excluded). Not from its training/sps:
    # with num_resets_per_eval > 0 (Playground's suite config sets 10) Brax multiplies one
    # sub-epoch's steps by num_resets_per_eval, a figure that many times too high.
    run_s = float(epochs[-1][1]["training/walltime"]) - float(epochs[0][1]["training/walltime"])
    trained = epochs[-1][0] - epochs[0][0]
    print(json.dumps({
        "side": "playground", "env": args.env, "seed": args.seed, "env_steps": steps[-1],
        "env_steps_per_s": trained / run_s, "run_s": run_s, "wall_s": wall,
        "eval_return": float(progress[-1][1]["eval/episode_reward"]),
        "curve": [[s, float(m["eval/episode_reward"])] for s, m in progress],
        "settings": {k: v for k, v in settings.items() if isinstance(v, (int, float, bool, str))},
        "device": jax.devices()[0].device_kind, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main()
