"""JaxMARL's feedforward IPPO baseline on MPE (``baselines/IPPO/ippo_ff_mpe.py``) at its
own config, called unmodified, its seeds in one program as its ``main`` runs them.

    python _jaxmarl_ippo_original.py JAXMARL_DIR [--set NAME=VALUE ...]

``JAXMARL_DIR`` is a JaxMARL checkout (only ``baselines/IPPO/ippo_ff_mpe.py`` and
``baselines/IPPO/config/ippo_ff_mpe.yaml`` are read, by ``benchmarks/_jaxmarl_baseline.py``:
the file imported as it is, its per-update ``wandb.log`` a no-op). Its config
(``ippo_ff_mpe.yaml``: MPE_simple_spread_v3, 16 games, 128-step rollouts, 4 epochs of 4
minibatches, lr 2.5e-4 annealed, 1e7 game steps, ``SEED: 30``, ``NUM_SEEDS: 10``) with
``--set NAME=VALUE`` changes of its keys (``TOTAL_TIMESTEPS``, or tiny sizes for a smoke
test on a CPU). Then what its ``main`` does, without wandb and the plot:
``make_train(config)`` over ``jax.random.split(PRNGKey(SEED), NUM_SEEDS)``, as
``jax.jit(jax.vmap(...))`` (its ``main`` writes ``jax.vmap(jax.jit(...))``: the same
program), lowered and compiled first (``compile_s``), then the compiled call alone timed
until its result is ready (``run_s``).

Printed, one JSON line: ``env_steps_per_seed`` (game steps: updates x ``NUM_STEPS`` x
``NUM_ENVS``), ``env_steps_per_s`` over all seeds, ``returns`` (one per seed: its logged
``returned_episode_returns`` divided by the agents, whose rewards its ``MPELogWrapper``
sums, averaged over the last tenth of the updates), ``seeds``, ``seed`` (``SEED``),
``compile_s``, ``run_s``, ``device`` and ``jax``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import _settings  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from _jaxmarl_baseline import load_baseline  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=pathlib.Path, help="a JaxMARL checkout")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="change one key of ippo_ff_mpe.yaml")
    args = parser.parse_args()
    module, config = load_baseline(args.baseline)
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in config or not value:
            parser.error(f"--set {item!r}: expected NAME=VALUE with NAME one of "
                         f"{', '.join(config)}")
        config[name] = _settings.value(value, config[name])
    rngs = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_SEEDS"])
    train = module.make_train(config)  # sets NUM_UPDATES and NUM_ACTORS in config
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(rngs).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(rngs))
    run_s = time.perf_counter() - start
    agents = config["NUM_ACTORS"] // config["NUM_ENVS"]
    values = np.asarray(jax.device_get(out["metrics"]["returned_episode_returns"])) / agents
    values = values.reshape(values.shape[0], values.shape[1], -1).mean(axis=2)  # [seeds, updates]
    returns = values[:, -max(1, values.shape[1] // 10):].mean(axis=1)
    per_seed = int(config["NUM_UPDATES"]) * config["NUM_STEPS"] * config["NUM_ENVS"]
    print(json.dumps({
        "side": "jaxmarl", "env": config["ENV_NAME"], "seed": config["SEED"],
        "seeds": int(config["NUM_SEEDS"]), "env_steps_per_seed": per_seed,
        "env_steps_per_s": config["NUM_SEEDS"] * per_seed / run_s, "run_s": run_s,
        "compile_s": compile_s, "returns": [float(r) for r in returns],
        "device": jax.devices()[0].device_kind, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main()
