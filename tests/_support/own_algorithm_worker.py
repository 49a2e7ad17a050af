"""One process of a 2-process run of plain-JAX modules (tests/trainer/test_own_algorithm.py).

Usage (through ``jaxtrainer launch --nproc-per-node 2``): ``own_algorithm_worker.py OUT``.
Rank 0 writes ``OUT/result.json``: the per-device-loss weight after one step and
the actor-critic's greedy return after a short run.
"""

import json
import sys
from pathlib import Path

import jaxtrainer as jt

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from actor_critic import ActorCritic  # noqa: E402

from tests.trainer.test_own_algorithm import AC_SMALL, PerDeviceLoss  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    sgd = jt.Trainer(strategy="multi_node", max_steps=1, log_every_n_steps=1,
                     default_root_dir=out / "sgd", enable_progress_bar=False)
    sgd.fit(PerDeviceLoss())
    module = ActorCritic(**AC_SMALL)
    rl = jt.Trainer(strategy="multi_node", max_env_steps=AC_BUDGET, log_every_n_steps=50,
                    default_root_dir=out / "rl", enable_progress_bar=False)
    rl.fit(module)
    result = {"w": float(sgd.state["w"]), "devices": sgd.strategy.num_devices,
              "greedy": rl.evaluate(module)["eval/episode_return"]}
    if rl.strategy.is_global_zero:
        (out / "result.json").write_text(json.dumps(result))


AC_BUDGET = 60_000

if __name__ == "__main__":
    main()
