"""EvoRL's own PPO or OpenES workflow on a brax env at its own hydra configs, run as its
``scripts/train.py`` runs it (EMI-Group/evorl, released as ``evorl-jax``): the config
composed by hydra from EvoRL's ``configs`` folder (``agent=exp/ppo/brax/<env>`` or
``agent=exp/ec/openes/brax-default``, ``env=brax/<env>``), the workflow class it names
built with ``build_from_config(config, enable_jit=config.enable_jit)`` (train.py's path on
one device; this driver takes it on any number), then ``workflow.init(PRNGKey(seed))`` and
``workflow.learn(state)``, unmodified.

    python _evorl_original.py --algo ppo|openes [--env ant] [--agent CONFIG] [--seed 42] \\
        [--configs DIR] [--set KEY=VALUE ...]

``--configs``: EvoRL's ``configs`` folder (in its source tree and its sdist; default
``$EVORL_CONFIGS`` or ``.peers/evorl/configs``). ``--set``: one hydra override of EvoRL's
config (the budget: ``total_timesteps=...`` for PPO, ``num_iters=...`` for OpenES; its
evaluations: ``eval_interval=...``; tiny sizes for a smoke test: ``num_envs=4``, ...).
Logging off: none of train.py's recorders (log, wandb) is added; the driver's one
recorder only reads the clock and keeps the numbers ``learn`` writes.

Timing: ``learn`` writes, every iteration, the workflow metrics and the train metrics
(each converted to host numbers, so each write follows the finished step), then every
``eval_interval`` iterations the evaluation's. An iteration's seconds run from the end of
the previous one (its train write, or its evaluation's) to its own train write: the
evaluations are excluded (as Brax's trainers exclude theirs), EvoRL's per-iteration host
work (the metric conversions, ES's histograms) included. The first iteration compiles:
``compile_s`` is from the call of ``learn`` to its train write, and the rate counts the
iterations after it (``run_s``).

Printed, one JSON line: ``iterations``, ``env_steps`` (EvoRL's own count at the end:
``sampled_timesteps``; OpenES ``sampled_timesteps_m`` x 1e6, the episodes' steps until
they end), ``env_steps_per_s`` (the count over the timed iterations / ``run_s``),
``generations_per_s`` (OpenES: timed iterations / ``run_s``), ``iteration_s``,
``compile_s``, ``eval_s``, ``wall_s``, ``eval_return`` (the last evaluation's mean return:
PPO's policy, OpenES's population mean, over ``eval_episodes``), ``best_fitness`` (OpenES:
``best_objective``, the best member's fitness over the run), ``curve`` (iteration,
evaluation return) and the composed ``settings``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import time

import jax
from evorl.recorders import Recorder
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import OmegaConf

ROOT = pathlib.Path(__file__).resolve().parents[2]
AGENTS = {"ppo": "exp/ppo/brax/{env}", "openes": "exp/ec/openes/brax-default"}
"""EvoRL's agent config for each workflow on a brax env (its ``configs/agent/...``)."""


class _Clock(Recorder):
    """Each write's step, ``perf_counter`` time and kind (``workflow``, ``train``, ``eval``)
    and the few numbers the JSON line reports."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, float, str, dict]] = []

    def init(self) -> None:
        pass

    def write(self, data, step: int) -> None:
        now = time.perf_counter()
        if any(k.startswith("eval") for k in data):
            kind, keep = "eval", data
        elif "iterations" in data:
            kind = "workflow"
            keep = {
                k: data[k]
                for k in ("sampled_timesteps", "sampled_timesteps_m", "best_objective")
                if k in data
            }
        else:
            kind, keep = "train", {}
        self.writes.append((int(step), now, kind, keep))

    def close(self) -> None:
        pass


def _eval_return(data: dict) -> float:
    """The mean return of an evaluation write: PPO's ``eval/episode_returns``, OpenES's
    ``eval/pop_center`` ``episode_returns``."""
    inner = data.get("eval/pop_center", data)
    value = inner.get("episode_returns", inner.get("eval/episode_returns"))
    return float(value)


def _summary(clock: _Clock, learn_start: float) -> dict:
    """Per-iteration seconds (evaluations excluded), compile and evaluation seconds, the
    env-step count at each iteration's end and the evaluation curve."""
    train_end, end, steps, evals, best = {}, {}, {}, {}, None
    for step, now, kind, data in clock.writes:
        if kind == "workflow":
            steps[step] = (
                float(data["sampled_timesteps_m"]) * 1e6
                if "sampled_timesteps_m" in data
                else float(data["sampled_timesteps"])
            )
            if "best_objective" in data:
                best = float(data["best_objective"])
        elif kind == "train":
            train_end[step] = end[step] = now
        else:
            evals[step] = (now - train_end[step], _eval_return(data))
            end[step] = now
    order = sorted(train_end)
    iteration_s = [train_end[order[0]] - learn_start] + [
        train_end[i] - end[j] for j, i in itertools.pairwise(order)
    ]
    out = {
        "iterations": len(order),
        "iteration_s": iteration_s,
        "compile_s": iteration_s[0],
        "run_s": sum(iteration_s[1:]),
        "eval_s": sum(s for s, _ in evals.values()),
        "env_steps": steps[order[-1]],
        "timed_env_steps": steps[order[-1]] - steps[order[0]],
        "curve": [[i, r] for i, (_, r) in sorted(evals.items())],
    }
    if best is not None:
        out["best_fitness"] = best
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", required=True, choices=sorted(AGENTS))
    parser.add_argument("--env", default="ant", help="a brax env with an EvoRL env config")
    parser.add_argument(
        "--agent",
        default=None,
        help="EvoRL's agent config (default: the workflow's for --env; a "
        "smoke test on brax's fast takes ant's)",
    )
    parser.add_argument("--seed", type=int, default=None, help="EvoRL's seed (default: its 42)")
    parser.add_argument(
        "--configs",
        default=os.environ.get("EVORL_CONFIGS", str(ROOT / ".peers" / "evorl" / "configs")),
        help="EvoRL's configs folder",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one hydra override of EvoRL's config",
    )
    args = parser.parse_args()
    configs = pathlib.Path(args.configs).resolve()
    agent = args.agent or AGENTS[args.algo].format(env=args.env)
    if not (configs / "agent" / f"{agent}.yaml").is_file():
        parser.error(
            f"--configs {args.configs}: no agent/{agent}.yaml there (expected "
            "EvoRL's configs folder, from its source tree or sdist)"
        )
    if not (configs / "env" / "brax" / f"{args.env}.yaml").is_file():
        parser.error(f"--env {args.env!r}: EvoRL has no env/brax/{args.env}.yaml")
    for item in args.set:
        if "=" not in item:
            parser.error(f"--set {item!r}: expected KEY=VALUE (a hydra override)")
    overrides = [f"agent={agent}", f"env=brax/{args.env}", *args.set]
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    start_wall = time.perf_counter()
    with initialize_config_dir(config_dir=str(configs), version_base=None):
        config = compose(config_name="config", overrides=overrides)

    # From here on train.py's calls, in its order (recorders: the clock only).
    workflow_cls = get_class(config.workflow_cls)
    workflow_cls = type(workflow_cls.__name__, (workflow_cls,), {})
    workflow = workflow_cls.build_from_config(config, enable_jit=config.enable_jit)
    clock = _Clock()
    workflow.add_recorders([clock])
    try:
        state = workflow.init(jax.random.PRNGKey(config.seed))
        learn_start = time.perf_counter()
        state = workflow.learn(state)
    finally:
        workflow.close()
    wall = time.perf_counter() - start_wall
    row = _summary(clock, learn_start)
    if row["iterations"] < 2:
        raise SystemExit(
            f"{row['iterations']} iteration: expected at least 2 (the first "
            "compiles); give a larger budget"
        )
    timed = row["iterations"] - 1
    rates = {"env_steps_per_s": row.pop("timed_env_steps") / row["run_s"]}
    if args.algo == "openes":
        rates["generations_per_s"] = timed / row["run_s"]
    print(
        json.dumps(
            {
                "side": "evorl",
                "algo": args.algo,
                "env": args.env,
                "seed": int(config.seed),
                **row,
                **rates,
                "eval_return": row["curve"][-1][1] if row["curve"] else None,
                "wall_s": wall,
                "overrides": args.set,
                "settings": OmegaConf.to_container(config, resolve=True),
                "device": jax.devices()[0].device_kind,
                "jax": jax.__version__,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
