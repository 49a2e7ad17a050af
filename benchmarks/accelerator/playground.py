"""Row 4 of the accelerator table: PPO on a MuJoCo Playground task against Playground's own
training (Brax's PPO with Playground's published config for the task).

    python benchmarks/accelerator/playground.py [--env CartpoleBalance] [--env-steps N] \\
        [--seed 0] [--num-evals 10] [--sides env_only,ours,playground] [--pythonpath DIR] \\
        [--json FILE]

Three programs one after the other on the same chip, each in its own process:

* the limit: the task alone with random actions on 2,048 envs (``env_limit.py --env
  playground/<task>``: Playground's training wrapper, MJX's JAX implementation);
* ours: ``jaxtrainer fit ppo --config ppo_playground.yaml env.name=playground/<task>``
  (Playground's DM Control suite PPO settings: 2,048 envs, 983,040 env steps an update,
  16 epochs of 32 minibatches, discount 0.995, reward scaling 10, Adam 1e-3), with
  ``trainer.max_env_steps`` the budget, one evaluation at the end
  (``trainer.eval_every_n_steps=null``) and ``callbacks.throughput=true``;
* Playground: ``_playground_ppo_original.py``: Brax's ``ppo.train`` on
  ``registry.load(task)`` through ``wrapper.wrap_for_brax_training`` with
  ``dm_control_suite_params.brax_ppo_config(task)``, the same budget, its env steps/s
  over its training epochs after the first (which compiles), evaluations excluded.

Returns: ours, the greedy evaluation at the end (128 episodes); Playground's, Brax's
evaluation after its last epoch. Both sides use the same packages (``--pythonpath``).
Printed: one JSON line per program, then a summary line; ``--json`` appends the lines to
FILE; ``playground.py --table FILE ...`` prints the rows of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import pathlib
import sys

from sac import fit_row, row_parser, run_sides, table
from seeds import _run

HERE = pathlib.Path(__file__).resolve().parent
NUM_ENVS = 2048  # Playground's DM Control suite PPO config, and ppo_playground.yaml's


def ours(env: str, env_steps: int, seed: int, extra: str | None, timeout: float,
         overrides: tuple[str, ...] = ()) -> dict:
    """``jaxtrainer fit ppo --config ppo_playground.yaml`` on ``playground/<env>``."""
    return fit_row("ppo", "ppo_playground.yaml", f"playground/{env}", env_steps, seed, extra,
                   timeout, overrides)


def playground(env: str, env_steps: int, seed: int, num_evals: int, extra: str | None,
               timeout: float, settings: tuple[str, ...] = ()) -> dict:
    """Playground's training of ``env`` (Brax's PPO, Playground's config) at ``env_steps``."""
    out = _run([sys.executable, str(HERE / "_playground_ppo_original.py"), "--env", env,
                "--num-timesteps", str(env_steps), "--num-evals", str(num_evals),
                "--seed", str(seed), *(x for kv in settings for x in ("--set", kv))],
               extra, timeout)
    return json.loads(out.strip().splitlines()[-1])


def limit(env: str, extra: str | None, timeout: float, batch: int = NUM_ENVS) -> dict:
    """``playground/<env>`` alone on ``batch`` envs."""
    out = _run([sys.executable, str(HERE / "env_limit.py"), "--env", f"playground/{env}",
                "--batch", str(batch)], extra, timeout)
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return {**line, "env": env}


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2:], peer="playground", title="Playground", family="playground",
                    envs=NUM_ENVS))
        return
    parser = row_parser(__doc__, "CartpoleBalance", "a Playground DM Control task", 60_000_000, 0,
                        10, "playground")
    args = parser.parse_args()
    env, steps, seed = args.env, args.env_steps, args.seed
    run = {"env_only": lambda: limit(env, args.pythonpath, args.timeout),
           "ours": lambda: ours(env, steps, seed, args.pythonpath, args.timeout),
           "playground": lambda: playground(env, steps, seed, args.num_evals, args.pythonpath,
                                            args.timeout)}
    run_sides(run, args.sides, env, seed, args.json, parser, peer="playground")


if __name__ == "__main__":
    main()
