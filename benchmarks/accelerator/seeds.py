"""Row 1 of the accelerator table: many seeds of PPO on CartPole-v1 in one program.

    python benchmarks/accelerator/seeds.py --purejaxrl PATH_TO_PUREJAXRL \\
        [--n 1,64,512,2048] [--total-timesteps 5e5] \\
        [--ours-pythonpath DIR] [--peer-pythonpath DIR] [--json FILE]

For each number of seeds ``N``, three programs one after the other on the same chip,
each in its own process (one program holds the chip at a time; the order alternates
from one ``N`` to the next):

* ours: the command ``jaxtrainer fit ppo --config ppo_purejaxrl.yaml sweep.seeds=N``
  (PureJaxRL's PPO settings: 4 envs x 128 steps, 4 epochs x 4 minibatches) with
  ``callbacks.throughput=true``; its summary line gives env steps/s from
  ``on_train_start`` to ``on_train_end`` (compilation excluded, logging, the CSV and
  TensorBoard loggers included), over all members;
* the peer: PureJaxRL's own ``purejaxrl/ppo.py`` (``PATH_TO_PUREJAXRL``, unmodified)
  as ``jax.jit(jax.vmap(make_train(config)))`` over ``N`` keys
  (``benchmarks/_purejaxrl_original.py``), the compiled call alone timed;
* the limit: CartPole-v1 alone with random actions on ``4 N`` envs
  (``env_limit.py``), one process for every ``N``.

The two trainers need different gymnax releases (PureJaxRL's script unpacks the
5-tuple ``step`` of gymnax < 1.0), so each side runs with its own packages:
``--ours-pythonpath`` / ``--peer-pythonpath`` are added to ``PYTHONPATH`` of that
side's processes (after what is there, so the machine's own JAX stays first;
``install_wheels.sh`` fills them).

Returns per seed, both sides alike: the mean return of the episodes completed over
the last tenth of the run's updates (ours: the members' ``train/episode_return``
rows of ``metrics.csv`` over that tenth).

Printed: one JSON line per program as it ends, then one summary line per ``N``;
``--json`` appends the JSON lines to FILE; ``seeds.py --table FILE ...`` prints the
markdown rows of ``docs/benchmarks.md`` from such files.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
THROUGHPUT = re.compile(r"throughput ([\d,.]+) updates/s, ([\d,.]+) env steps/s over ([\d.]+) s; "
                        r"compile ([\d.]+) s")


def _env(extra: str | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), extra) if p)
    return env


def _run(cmd: list[str], extra: str | None, timeout: float) -> str:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(extra), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    print(f"# {cmd[1] if len(cmd) > 1 else cmd[0]}: {time.perf_counter() - start:.1f} s wall",
          file=sys.stderr, flush=True)
    return proc.stdout


def ours(n: int, total: float, extra: str | None, timeout: float,
         overrides: tuple[str, ...] = (), config: str = "ppo_purejaxrl.yaml") -> dict:
    """``jaxtrainer fit ppo --config CONFIG sweep.seeds=n [overrides]``: env steps/s of
    the training loop and each member's return over the last tenth."""
    with tempfile.TemporaryDirectory() as root:
        out = _run([sys.executable, "-m", "jaxtrainer", "fit", "ppo", "--config", config,
                    f"sweep.seeds={n}", f"trainer.max_env_steps={int(total)}",
                    f"trainer.default_root_dir={root}", "trainer.enable_progress_bar=false",
                    "trainer.enable_checkpointing=false", "callbacks.throughput=true", *overrides],
                   extra, timeout)
        match = THROUGHPUT.search(out)
        if match is None:
            raise RuntimeError(f"no throughput line in the command's output:\n{out[-2000:]}")
        rows = list(csv.DictReader(open(next(pathlib.Path(root).glob("version_*/metrics.csv")))))
    rows = [r for r in rows if r.get("train/episode_return")]
    last = max(int(r["step"]) for r in rows)
    tail = [r for r in rows if int(r["step"]) > 0.9 * last]
    columns = [f"member/{i}/train/episode_return" for i in range(n)] if n > 1 else ["train/episode_return"]
    returns = [statistics.fmean(float(r[c]) for r in tail if r.get(c)) for c in columns]
    row = {"side": "ours", "n": n, "env_steps_per_s": float(match[2].replace(",", "")),
           "train_s": float(match[3]), "compile_s": float(match[4]), "returns": returns}
    return {**row, "overrides": list(overrides)} if overrides else row


def peer(n: int, total: float, path: str, extra: str | None, timeout: float) -> dict:
    """PureJaxRL's ``ppo.py`` over ``n`` seeds in one ``jit(vmap)``."""
    out = _run([sys.executable, str(BENCHMARKS / "_purejaxrl_original.py"), path, "ppo", str(total),
                *map(str, range(n))], extra, timeout)
    result = json.loads(out.strip().splitlines()[-1])
    return {"side": "purejaxrl", "n": n,
            "env_steps_per_s": n * result["env_steps_per_seed"] / result["run_s"],
            "train_s": result["run_s"], "compile_s": result["compile_s"], "returns": result["returns"]}


def limit(ns: list[int], extra: str | None, timeout: float) -> list[dict]:
    """CartPole-v1 alone on ``4 n`` envs for every ``n``."""
    out = _run([sys.executable, str(HERE / "env_limit.py"), "--env", "CartPole-v1",
                "--batch", ",".join(str(4 * n) for n in ns)], extra, timeout)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [{"side": "env_only", "n": n, **line} for n, line in zip(ns, lines, strict=True)]


def summary(n: int, rows: dict[str, dict]) -> str:
    o, p, lim = rows["ours"], rows["purejaxrl"], rows["env_only"]["env_steps_per_s"]
    spread = statistics.pstdev(p["returns"]) if len(p["returns"]) > 1 else 0.0
    return (f"N={n} ours={o['env_steps_per_s']:,.0f} purejaxrl={p['env_steps_per_s']:,.0f} "
            f"ratio={o['env_steps_per_s'] / p['env_steps_per_s']:.3f} limit={lim:,.0f} "
            f"ours_fraction={o['env_steps_per_s'] / lim:.3f} "
            f"purejaxrl_fraction={p['env_steps_per_s'] / lim:.3f} "
            f"return ours={statistics.fmean(o['returns']):.1f} "
            f"purejaxrl={statistics.fmean(p['returns']):.1f}+-{spread:.1f}")


def _emit(row: dict, path: str | None) -> None:
    """Print ``row`` as a JSON line at once (and append it to ``path``)."""
    line = json.dumps(row)
    print(line, flush=True)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def table(paths: list[str]) -> str:
    """The markdown rows of ``docs/benchmarks.md`` from JSON-line files of runs."""
    runs: dict[int, dict[str, dict]] = {}
    for path in paths:
        for line in open(path):
            row = json.loads(line)
            runs.setdefault(row["n"], {})[row["side"]] = row
    out = ["| seeds N | ours env steps/s | PureJaxRL | ratio | env-only limit (4N envs) | "
           "ours / limit | PureJaxRL / limit | return ours | return PureJaxRL |",
           "|---|---|---|---|---|---|---|---|---|"]

    def ret(r: dict) -> str:
        x = r["returns"]
        return f"{statistics.fmean(x):.1f}" + (f" ± {statistics.pstdev(x):.1f}" if len(x) > 1 else "")

    for n in sorted(runs):
        o, p, lim = runs[n].get("ours"), runs[n].get("purejaxrl"), runs[n].get("env_only")
        if not (o and p and lim) or "error" in o or "error" in p:
            continue
        a, b, c = o["env_steps_per_s"], p["env_steps_per_s"], lim["env_steps_per_s"]
        out.append(f"| {n} | {a:,.0f} | {b:,.0f} | {a / b:.2f} | {c:,.0f} | {a / c:.3f} | "
                   f"{b / c:.3f} | {ret(o)} | {ret(p)} |")
    return "\n".join(out)


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2:]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--purejaxrl", required=True, help="a checkout of luchris429/purejaxrl")
    parser.add_argument("--n", default="1,64,512,2048", help="numbers of seeds, comma-separated")
    parser.add_argument("--total-timesteps", type=float, default=5e5, help="env steps per seed")
    parser.add_argument("--ours-pythonpath", default=None)
    parser.add_argument("--peer-pythonpath", default=None)
    parser.add_argument("--timeout", type=float, default=900, help="seconds a program may take")
    parser.add_argument("--json", default=None, help="append every program's JSON line here")
    parser.add_argument("--ours-override", action="append", default=[],
                        help="a further override of our command (repeatable), e.g. "
                             "trainer.log_every_n_steps=976 (one host round trip per run); "
                             "recorded in its JSON line")
    parser.add_argument("--sides", default="env_only,ours,purejaxrl",
                        help="which programs to run, comma-separated")
    args = parser.parse_args()
    wanted = set(args.sides.split(","))
    ns = [int(n) for n in args.n.split(",")]
    results = {n: {} for n in ns}
    for row in limit(ns, args.ours_pythonpath, args.timeout) if "env_only" in wanted else []:
        results[row["n"]]["env_only"] = row
        _emit(row, args.json)
    for i, n in enumerate(ns):
        sides = [("ours", lambda n=n: ours(n, args.total_timesteps, args.ours_pythonpath, args.timeout,
                                           tuple(args.ours_override))),
                 ("purejaxrl", lambda n=n: peer(n, args.total_timesteps, args.purejaxrl,
                                            args.peer_pythonpath, args.timeout))]
        for name, side in (sides if i % 2 == 0 else sides[::-1]):
            if name not in wanted:
                continue
            try:
                results[n][name] = side()
            except (RuntimeError, subprocess.TimeoutExpired) as error:  # e.g. out of chip memory
                results[n][name] = {"side": name, "n": n, "error": str(error)[-600:]}
            _emit(results[n][name], args.json)
    for n in ns:
        if all("error" not in row for row in results[n].values()) and len(results[n]) == 3:
            print(summary(n, results[n]))
        else:
            print(f"N={n} " + " ".join(f"{k}: {v['error'][:200]!r}" for k, v in results[n].items()
                                       if "error" in v))


if __name__ == "__main__":
    main()
