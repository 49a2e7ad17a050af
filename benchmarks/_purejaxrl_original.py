"""Run one of PureJaxRL's own scripts, unmodified, and print its final returns as JSON.

    python benchmarks/_purejaxrl_original.py PATH_TO_PUREJAXRL SCRIPT TOTAL_TIMESTEPS SEED [SEED ...]

``SCRIPT`` is ``ppo``, ``ppo_rnn`` or ``dqn``. The script is imported from
``PATH_TO_PUREJAXRL/purejaxrl`` as it is; only its config dict is ours (its own
``__main__`` settings with ``TOTAL_TIMESTEPS`` set and ``DEBUG``/wandb off), and
``jax.jit(jax.vmap(make_train(config)))`` runs the seeds' ``PRNGKey(seed)`` in one
program, as PureJaxRL runs seeds. Printed: ``{"returns": [one per seed], ...}``, each
the mean return over the last tenth of the run's updates (PPO scripts: of the
episodes completed there, from ``traj_batch.info``; DQN: its logged ``returns``,
the LogWrapper's last completed return per env, averaged over those updates), with
``compile_s`` and ``run_s`` (the compiled call alone, waited for) and
``env_steps_per_seed``.

Run by ``benchmarks/purejaxrl_ports.py`` with an interpreter whose packages the
scripts were written for (see its docstring); it imports nothing of jaxtrainer.
"""

from __future__ import annotations

import importlib
import json
import sys
import time

PPO = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4,
       "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
       "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True,
       "DEBUG": False}
DQN = {"NUM_ENVS": 10, "BUFFER_SIZE": 10000, "BUFFER_BATCH_SIZE": 128, "EPSILON_START": 1.0,
       "EPSILON_FINISH": 0.05, "EPSILON_ANNEAL_TIME": 25e4, "TARGET_UPDATE_INTERVAL": 500,
       "LR": 2.5e-4, "LEARNING_STARTS": 10000, "TRAINING_INTERVAL": 10, "LR_LINEAR_DECAY": False,
       "GAMMA": 0.99, "TAU": 1.0, "ENV_NAME": "CartPole-v1", "SEED": 0, "NUM_SEEDS": 1,
       "WANDB_MODE": "disabled", "ENTITY": "", "PROJECT": ""}
CONFIGS = {"ppo": PPO, "ppo_rnn": PPO, "dqn": DQN}


def main() -> None:
    path, script, total = sys.argv[1], sys.argv[2], float(sys.argv[3])
    seeds = [int(s) for s in sys.argv[4:]]
    sys.path.insert(0, f"{path}/purejaxrl")
    module = importlib.import_module(script)
    import jax
    import numpy as np

    config = {**CONFIGS[script], "TOTAL_TIMESTEPS": total}
    keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in seeds])
    start = time.perf_counter()
    train = jax.jit(jax.vmap(module.make_train(config))).lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(train(keys))
    run_s = time.perf_counter() - start
    # reduced on the device: the scripts keep every step's info ([seeds, updates, ...])
    metrics = out["metric" if script == "ppo_rnn" else "metrics"]
    if script == "dqn":
        values = metrics["returns"]
        returns = values[:, -max(1, values.shape[1] // 10):].mean(axis=1)
        per_seed = int(total) // config["NUM_ENVS"] * config["NUM_ENVS"]
    else:
        tail = max(1, metrics["returned_episode"].shape[1] // 10)
        ret = metrics["returned_episode_returns"][:, -tail:].reshape(len(seeds), -1)
        done = metrics["returned_episode"][:, -tail:].reshape(len(seeds), -1)
        returns = (ret * done).sum(axis=1) / done.sum(axis=1)
        batch = config["NUM_ENVS"] * config["NUM_STEPS"]
        per_seed = int(total) // batch * batch
    print(json.dumps({"returns": [float(r) for r in np.asarray(returns)],
                      "compile_s": compile_s, "run_s": run_s,
                      "env_steps_per_seed": per_seed, "device": jax.devices()[0].device_kind,
                      "jax": jax.__version__}))

if __name__ == "__main__":
    main()
