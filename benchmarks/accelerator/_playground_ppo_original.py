"""MuJoCo Playground's PPO as Playground trains it (its ``learning/train_jax_ppo.py``):
Brax's ``ppo.train`` on the task from ``mujoco_playground.registry.load(name)``, wrapped by
Playground's ``wrapper.wrap_for_brax_training``, with Playground's published PPO config for
the task (``mujoco_playground.config.dm_control_suite_params.brax_ppo_config(name)`` for a
DM Control suite task, ``locomotion_params.brax_ppo_config(name)`` for a locomotion one),
called unmodified. A config's ``network_factory`` (a locomotion task's: layer sizes, the
policy's and the critic's observation keys) goes to Brax's ``ppo_networks.make_ppo_networks``
and ``--domain-randomization`` passes ``registry.get_domain_randomizer(name)`` as
``randomization_fn``, both as ``train_jax_ppo.py`` does (its ``--domain_randomization``);
so does the evaluation env, a second ``registry.load(name)``.

    python _playground_ppo_original.py [--env CartpoleBalance] [--num-timesteps N] \\
        [--num-evals K] [--seed 0] [--domain-randomization] [--set NAME=VALUE ...]

``--num-timesteps`` and ``--num-evals`` change the budget only; ``--set`` changes one
setting of the published config, a parameter of Brax's ``ppo.train`` or an entry of the
config's ``network_factory`` (tiny sizes for a smoke test on a CPU); ``--impl`` the
task's MJX implementation (``jax`` as ``ppo_playground.yaml`` and ``train_jax_ppo.py``'s
default; Playground's own default for a locomotion task is MuJoCo Warp). Prints one
JSON line: ``env_steps`` (Brax's count at the end), ``run_s`` and ``env_steps_per_s``
over the training epochs after the first (which compiles), by Brax's clock of training
time (``training/walltime``: evaluations excluded), ``wall_s`` (the call, everything included), ``eval_return``:
Brax's evaluation after the last epoch, the evaluation curve, and the settings.

Brax 0.14's trainer calls a replication function JAX 0.10 no longer has:
``benchmarks/brax_ppo.py``'s shim supplies it for the duration of the call.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import _settings  # noqa: E402
import jax  # noqa: E402
from brax.training.agents.ppo import networks as ppo_networks  # noqa: E402
from brax.training.agents.ppo import train as brax_ppo  # noqa: E402
from brax_ppo import _brax_replication_shim  # noqa: E402
from mujoco_playground import dm_control_suite, locomotion, registry, wrapper  # noqa: E402
from mujoco_playground.config import dm_control_suite_params, locomotion_params  # noqa: E402


def published(env: str, impl: str) -> dict:
    """Playground's PPO config for ``env`` (``train_jax_ppo.py``'s ``get_rl_config``,
    without vision), as a dict; ``network_factory`` a dict where the config has one."""
    if env in locomotion._envs:
        config = locomotion_params.brax_ppo_config(env, impl)
    elif env in dm_control_suite._envs:
        config = dm_control_suite_params.brax_ppo_config(env, impl)
    else:
        raise SystemExit(f"--env {env!r}: expected a Playground DM Control suite or "
                         "locomotion task")
    settings = dict(config)
    if "network_factory" in settings:
        settings["network_factory"] = dict(settings["network_factory"])
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartpoleBalance",
                        help="a Playground DM Control suite or locomotion task")
    parser.add_argument("--num-timesteps", type=int, default=None, help="default: the published")
    parser.add_argument("--num-evals", type=int, default=None, help="default: the published")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--impl", default="jax", help="the task's MJX implementation (config "
                        "override impl; ppo_playground.yaml's: jax)")
    parser.add_argument("--domain-randomization", action="store_true",
                        help="the task's randomizer (registry.get_domain_randomizer)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    settings = published(args.env, args.impl)
    network = settings.pop("network_factory", None)
    for name, value in (("num_timesteps", args.num_timesteps), ("num_evals", args.num_evals)):
        if value is not None:
            settings[name] = value
    known = inspect.signature(brax_ppo.train).parameters
    for item in args.set:
        name, _, value = item.partition("=")
        if network is not None and name in network and value:
            network[name] = _settings.value(value, network[name])
            continue
        if name not in known or not value:
            parser.error(f"--set {item!r}: expected NAME=VALUE with NAME a parameter of Brax's "
                         "ppo.train" + (f" or one of {sorted(network)}" if network else ""))
        default = settings.get(name, known[name].default)
        settings[name] = _settings.value(value, default if default is not None else 0)
    num_eval_envs = settings.pop("num_eval_envs", 128)  # train_jax_ppo.py's default
    if network is not None:
        settings["network_factory"] = functools.partial(ppo_networks.make_ppo_networks,
                                                        **network)
    if args.domain_randomization:
        settings["randomization_fn"] = registry.get_domain_randomizer(args.env)
    progress: list[tuple[int, dict]] = []
    start = time.perf_counter()
    overrides = {"impl": args.impl}
    with _brax_replication_shim():
        brax_ppo.train(environment=registry.load(args.env, config_overrides=overrides),
                       eval_env=registry.load(args.env, config_overrides=overrides),
                       num_eval_envs=num_eval_envs, seed=args.seed,
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
        "settings": {**{k: v for k, v in settings.items()
                        if isinstance(v, (int, float, bool, str))},
                     "num_eval_envs": num_eval_envs, "network_factory": network,
                     "domain_randomization": args.domain_randomization, "impl": args.impl},
        "device": jax.devices()[0].device_kind, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main()
