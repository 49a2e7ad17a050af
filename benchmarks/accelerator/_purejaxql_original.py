"""Run purejaxql's PQN MinAtar script, unmodified, and print its returns as JSON.

    python benchmarks/accelerator/_purejaxql_original.py PATH_TO_PUREJAXQL [OVERRIDE ...]

``PATH_TO_PUREJAXQL/purejaxql/pqn_minatar.py`` is imported as it is and its
config composed by Hydra from its own ``purejaxql/config`` (``config.yaml`` with
``+alg=pqn_minatar``, as its README runs it) with the command-line ``OVERRIDE``\\s
(Hydra's syntax: ``alg.ENV_NAME=Breakout-MinAtar NUM_SEEDS=3``). Then what its
``single_run`` does, without wandb and without saving the parameters:
``jax.jit(jax.vmap(make_train(config)))`` over ``jax.random.split(PRNGKey(SEED),
NUM_SEEDS)``, lowered and compiled first (``compile_s``), then the compiled call
alone timed until its result is ready (``run_s``).

Printed, one JSON line: ``returns`` (one per seed: the script's logged
``returned_episode_returns``, the LogWrapper's last completed episode return of
every env averaged over each update's steps and envs, averaged over the last tenth
of the updates), ``test_returns`` (its greedy test's last value per seed, when
``TEST_DURING_TRAINING`` is on), ``compile_s``, ``run_s``, ``env_steps_per_seed``
(updates x ``NUM_STEPS`` x ``NUM_ENVS``), ``seeds``, ``device`` and ``jax``.

Run by ``benchmarks/accelerator/pqn.py`` with the peer's packages on the path
(``requirements/purejaxql.txt``); it imports nothing of jaxtrainer.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path


def main() -> None:
    root = Path(sys.argv[1]).resolve() / "purejaxql"
    sys.path.insert(0, str(root))  # as `python purejaxql/pqn_minatar.py` puts it first
    module = importlib.import_module("pqn_minatar")
    import jax
    import numpy as np
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(root / "config"), version_base=None):
        cfg = compose(config_name="config", overrides=["+alg=pqn_minatar", *sys.argv[2:]])
    config = OmegaConf.to_container(cfg)
    config = {**config, **config["alg"]}  # as single_run
    rngs = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_SEEDS"])
    start = time.perf_counter()
    train = jax.jit(jax.vmap(module.make_train(config))).lower(rngs).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(train(rngs))
    run_s = time.perf_counter() - start
    metrics = jax.device_get(out["metrics"])  # every leaf [seeds, updates]
    values = np.asarray(metrics["returned_episode_returns"])
    returns = values[:, -max(1, values.shape[1] // 10):].mean(axis=1)
    test = metrics.get("test/returned_episode_returns")
    print(json.dumps({
        "returns": [float(r) for r in returns],
        "test_returns": None if test is None else [float(r) for r in np.asarray(test)[:, -1]],
        "compile_s": compile_s, "run_s": run_s,
        "env_steps_per_seed": int(config["NUM_UPDATES"]) * config["NUM_STEPS"] * config["NUM_ENVS"],
        "seeds": int(config["NUM_SEEDS"]), "env": config["ENV_NAME"],
        "device": jax.devices()[0].device_kind, "jax": jax.__version__}))


if __name__ == "__main__":
    main()
