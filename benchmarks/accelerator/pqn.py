"""Row 2 of the accelerator table: PQN on MinAtar against purejaxql's own script.

    python benchmarks/accelerator/pqn.py --purejaxql PATH_TO_PUREJAXQL \\
        [--env Breakout-MinAtar] [--seeds 3] [--total-timesteps 1e7] [--hidden 128] \\
        [--ours-pythonpath DIR] [--peer-pythonpath DIR] [--json FILE]

Three programs one after the other on the same chip, each in its own process:

* the limit: the env alone with random actions on ``128 x seeds`` envs
  (``env_limit.py``: one jitted scan, nothing else);
* ours: ``jaxtrainer fit pqn --config pqn_minatar.yaml sweep.seeds=S`` (purejaxql's
  MinAtar settings: 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam 5e-4
  annealed, epsilon 1 to 0.05 over a tenth, lambda 0.65) with ``env.name``,
  ``trainer.max_env_steps`` and ``algorithm.hidden_sizes=[H]`` (``--hidden``; 128:
  purejaxql's dense layer, the recipe's own is 256) and ``callbacks.throughput=true``;
  its summary line gives env steps/s of the training loop over all members
  (compilation excluded, the CSV and TensorBoard loggers included);
* the peer: purejaxql's ``purejaxql/pqn_minatar.py`` (``PATH_TO_PUREJAXQL``,
  unmodified) with its own Hydra config ``+alg=pqn_minatar`` and the overrides
  ``alg.ENV_NAME``, ``alg.TOTAL_TIMESTEPS`` (and ``alg.TOTAL_TIMESTEPS_DECAY``, so
  that its schedules span the run as ours do: the same at its own budget, 1e7),
  ``NUM_SEEDS=S`` (its ``jax.vmap`` over seeds in one program) and
  ``alg.TEST_DURING_TRAINING=False`` (its greedy test of 128 envs x 1000 steps
  every 5% of the updates is outside the training being timed; ours evaluates
  after the loop), run by ``_purejaxql_original.py``: the compiled call alone timed.

The two sides need different gymnax releases (purejaxql unpacks the 5-tuple
``step`` of gymnax < 1.0) and OmegaConf releases (its Hydra needs < 2.4), so each
side runs with its own packages: ``--ours-pythonpath`` / ``--peer-pythonpath`` are
added to ``PYTHONPATH`` of that side's processes (after what is there, so the
machine's own JAX stays first). Breakout-MinAtar's dynamics are the same in
gymnax 0.0.9 and 1.0.1 (1.0 splits the time limit out of ``done``).

Returns per seed, mean over the last tenth of the updates: ours, the members'
``train/episode_return`` rows of ``metrics.csv`` (episodes completed there, epsilon
0.05); the peer, its logged ``returned_episode_returns`` (each env's last completed
episode, epsilon 0.05). Ours also gives each member's final greedy evaluation.

Printed: one JSON line per program as it ends, then one summary line; ``--json``
appends the JSON lines to FILE; ``pqn.py --table FILE ...`` prints the markdown row
of ``docs/benchmarks.md`` from such files.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

from seeds import THROUGHPUT, _emit, _run

HERE = pathlib.Path(__file__).resolve().parent
NUM_ENVS = 128  # per seed, both sides' configs


def ours(n: int, env: str, total: float, hidden: int, extra: str | None, timeout: float) -> dict:
    """``jaxtrainer fit pqn --config pqn_minatar.yaml sweep.seeds=n`` on ``env``:
    env steps/s of the training loop, each member's training return over the
    last tenth and final greedy evaluation."""
    with tempfile.TemporaryDirectory() as root:
        out = _run([sys.executable, "-m", "jaxtrainer", "fit", "pqn", "--config", "pqn_minatar.yaml",
                    f"sweep.seeds={n}", f"env.name={env}", f"trainer.max_env_steps={int(total)}",
                    f"algorithm.hidden_sizes=[{hidden}]", f"trainer.default_root_dir={root}",
                    "trainer.enable_progress_bar=false", "trainer.enable_checkpointing=false",
                    "callbacks.throughput=true"], extra, timeout)
        match = THROUGHPUT.search(out)
        if match is None:
            raise RuntimeError(f"no throughput line in the command's output:\n{out[-2000:]}")
        rows = list(csv.DictReader(open(next(pathlib.Path(root).glob("version_*/metrics.csv")))))
    train = [r for r in rows if r.get("train/episode_return")]
    last = max(int(r["step"]) for r in train)
    tail = [r for r in train if int(r["step"]) > 0.9 * last]
    prefix = [f"member/{i}/" for i in range(n)] if n > 1 else [""]
    returns = [statistics.fmean(float(r[p + "train/episode_return"]) for r in tail
                                if r.get(p + "train/episode_return")) for p in prefix]
    evals = [float(r[p + "eval/episode_return"]) for p in prefix for r in rows[-1:]
             if r.get(p + "eval/episode_return")]
    steps = max(int(float(r["env_steps"])) for r in rows if r.get("env_steps"))
    return {"side": "ours", "env": env, "seeds": n, "env_steps_per_s": float(match[2].replace(",", "")),
            "train_s": float(match[3]), "compile_s": float(match[4]),
            "env_steps_per_seed": steps // n, "returns": returns, "eval_returns": evals}


def peer(n: int, env: str, total: float, path: str, extra: str | None, timeout: float) -> dict:
    """purejaxql's ``pqn_minatar.py`` over ``n`` seeds in one ``jit(vmap)``."""
    out = _run([sys.executable, str(HERE / "_purejaxql_original.py"), path,
                f"alg.ENV_NAME={env}", f"alg.TOTAL_TIMESTEPS={int(total)}",
                f"alg.TOTAL_TIMESTEPS_DECAY={int(total)}", f"NUM_SEEDS={n}",
                "alg.TEST_DURING_TRAINING=False"], extra, timeout)
    result = json.loads(out.strip().splitlines()[-1])
    return {"side": "purejaxql", "env": env, "seeds": n,
            "env_steps_per_s": n * result["env_steps_per_seed"] / result["run_s"],
            "train_s": result["run_s"], "compile_s": result["compile_s"],
            "env_steps_per_seed": result["env_steps_per_seed"], "returns": result["returns"]}


def limit(n: int, env: str, extra: str | None, timeout: float) -> dict:
    """``env`` alone on ``128 n`` envs."""
    out = _run([sys.executable, str(HERE / "env_limit.py"), "--env", env,
                "--batch", str(NUM_ENVS * n)], extra, timeout)
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return {**line, "seeds": n}


def _spread(x: list[float]) -> str:
    return f"{statistics.fmean(x):.2f}" + (f" ± {statistics.pstdev(x):.2f}" if len(x) > 1 else "")


def summary(rows: dict[str, dict]) -> str:
    """One line: both sides' env steps/s, their ratio, the limit and both fractions
    of it, and the returns (mean ± standard deviation over the seeds)."""
    o, p, lim = rows["ours"], rows["purejaxql"], rows["env_only"]["env_steps_per_s"]
    a, b = o["env_steps_per_s"], p["env_steps_per_s"]
    return (f"{o['env']} seeds={o['seeds']} ours={a:,.0f} purejaxql={b:,.0f} ratio={a / b:.3f} "
            f"limit={lim:,.0f} ours_fraction={a / lim:.3f} purejaxql_fraction={b / lim:.3f} "
            f"return ours={_spread(o['returns'])} purejaxql={_spread(p['returns'])}")


def table(paths: list[str]) -> str:
    """The markdown rows of ``docs/benchmarks.md`` from JSON-line files of runs
    (the last row of each side per env and number of seeds)."""
    runs: dict[tuple[str, int], dict[str, dict]] = {}
    for path in paths:
        for line in open(path):
            row = json.loads(line)
            runs.setdefault((row["env"], row["seeds"]), {})[row["side"]] = row
    out = ["| env | seeds | env steps a seed | ours env steps/s | purejaxql | ratio | "
           "env-only limit (128 x seeds envs) | ours / limit | purejaxql / limit | "
           "return ours | return purejaxql | ours greedy eval |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (env, n), sides in sorted(runs.items()):
        o, p, lim = sides.get("ours"), sides.get("purejaxql"), sides.get("env_only")
        if not (o and p and lim) or "error" in o or "error" in p:
            continue
        a, b, c = o["env_steps_per_s"], p["env_steps_per_s"], lim["env_steps_per_s"]
        out.append(f"| {env} | {n} | {p['env_steps_per_seed']:,} | {a:,.0f} | {b:,.0f} | "
                   f"{a / b:.2f} | {c:,.0f} | {a / c:.3f} | {b / c:.3f} | {_spread(o['returns'])} | "
                   f"{_spread(p['returns'])} | {_spread(o['eval_returns'])} |")
    return "\n".join(out)


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2:]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--purejaxql", required=True, help="a checkout of mttga/purejaxql")
    parser.add_argument("--env", default="Breakout-MinAtar", help="a gymnax MinAtar env name")
    parser.add_argument("--seeds", type=int, default=3, help="seeds, one program each side")
    parser.add_argument("--total-timesteps", type=float, default=1e7, help="env steps per seed")
    parser.add_argument("--hidden", type=int, default=128, help="ours: units after the convolution")
    parser.add_argument("--ours-pythonpath", default=None)
    parser.add_argument("--peer-pythonpath", default=None)
    parser.add_argument("--timeout", type=float, default=900, help="seconds a program may take")
    parser.add_argument("--json", default=None, help="append every program's JSON line here")
    args = parser.parse_args()
    n, env, total = args.seeds, args.env, args.total_timesteps
    results: dict[str, dict] = {}
    sides = [("env_only", lambda: limit(n, env, args.ours_pythonpath, args.timeout)),
             ("ours", lambda: ours(n, env, total, args.hidden, args.ours_pythonpath, args.timeout)),
             ("purejaxql", lambda: peer(n, env, total, args.purejaxql, args.peer_pythonpath,
                                        args.timeout))]
    for name, side in sides:
        try:
            results[name] = side()
        except (RuntimeError, subprocess.TimeoutExpired) as error:  # e.g. out of chip memory
            results[name] = {"side": name, "env": env, "seeds": n, "error": str(error)[-600:]}
        _emit(results[name], args.json)
    failed = {k: v["error"][:200] for k, v in results.items() if "error" in v}
    print(summary(results) if not failed else " ".join(f"{k}: {v!r}" for k, v in failed.items()))


if __name__ == "__main__":
    main()
