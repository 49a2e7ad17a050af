"""Row 3 of the accelerator table: SAC on a brax env against Brax's own SAC trainer.

    python benchmarks/accelerator/sac.py [--env hopper] [--env-steps 6553600] [--seed 1] \\
        [--num-evals 20] [--sides env_only,ours,brax] [--pythonpath DIR] [--json FILE]

Three programs one after the other on the same chip, each in its own process:

* the limit: the env alone with random actions on Brax's 128 envs (``env_limit.py
  --env brax/<env>``: Brax's training wrapper, one jitted scan, nothing else);
* ours: ``jaxtrainer fit sac --config sac_brax.yaml`` with the settings Brax publishes
  for hopper that ``sac_brax.yaml`` (written after Brax's ant defaults) does not
  already have: ``env.name=brax/<env> algorithm.gamma=0.997
  algorithm.reward_scaling=30``; ``trainer.max_env_steps`` the budget, one evaluation
  at the end (``trainer.eval_every_n_steps=null``; Brax's evaluations between epochs
  are outside its timing too) and ``callbacks.throughput=true``: env steps/s of the
  training loop, compilation excluded, the CSV and TensorBoard loggers included;
* Brax: ``brax.training.agents.sac.train`` at its published hopper settings
  (``_brax_sac_original.py``; the same budget, ``--num-evals`` evaluations): env
  steps/s over its training epochs after the first, which compiles, as Brax's
  ``training/sps`` counts them.

Both sides: 128 envs, 64 gradient updates of a 512 batch per 128 env steps, a 2^20
replay filled with 8,192 env steps before learning, discount 0.997, reward scaling 30,
Adam 6e-4, two 256 x 256 relu critics and actor, observation normalisation, a tuned
entropy temperature. Returns: ours, the greedy evaluation of 128 episodes at the end;
Brax's, its evaluation after the last epoch (128 episodes, a stochastic policy).

Both sides run with the same packages (brax is one of ours): ``--pythonpath`` is
added to ``PYTHONPATH``. Printed: one JSON line per program, then one summary line;
``--json`` appends the JSON lines to FILE; ``sac.py --table FILE ...`` prints the
markdown rows of ``docs/benchmarks.md`` from such files.
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
from collections.abc import Callable

from seeds import THROUGHPUT, _emit, _run

HERE = pathlib.Path(__file__).resolve().parent
NUM_ENVS = 128  # Brax's published SAC settings, and sac_brax.yaml's
PUBLISHED_OVERRIDES = ("algorithm.gamma=0.997", "algorithm.reward_scaling=30")


def ours(env: str, env_steps: int, seed: int, extra: str | None, timeout: float,
         overrides: tuple[str, ...] = ()) -> dict:
    """``jaxtrainer fit sac --config sac_brax.yaml`` on ``brax/<env>`` at Brax's settings
    (``overrides``: more ``key=value`` arguments, e.g. tiny sizes for a smoke test)."""
    return fit_row("sac", "sac_brax.yaml", f"brax/{env}", env_steps, seed, extra, timeout,
                   (*PUBLISHED_OVERRIDES, *overrides))


def fit_row(recipe: str, config: str, env_name: str, env_steps: int, seed: int,
            extra: str | None, timeout: float, overrides: tuple[str, ...] = (),
            read: dict[str, str] | None = None, budget: str = "max_env_steps",
            eval_every: str = "eval_every_n_steps") -> dict:
    """``jaxtrainer fit RECIPE --config CONFIG env.name=ENV_NAME trainer.BUDGET=env_steps``
    (``budget="max_generations"`` for an evolution strategy, with ``eval_every=
    "eval_every_n_generations"``), one evaluation at the end: env steps/s of the training
    loop (``callbacks.throughput``), its seconds and compile seconds, the env steps run,
    the final evaluation return, and (``read``: row key -> column of ``metrics.csv``) the
    last logged value of more columns."""
    with tempfile.TemporaryDirectory() as root:
        out = _run([sys.executable, "-m", "jaxtrainer", "fit", recipe, "--config", config,
                    f"env.name={env_name}", f"trainer.{budget}={env_steps}",
                    f"trainer.seed={seed}", f"trainer.{eval_every}=null",
                    f"trainer.default_root_dir={root}", "trainer.enable_progress_bar=false",
                    "trainer.enable_checkpointing=false", "callbacks.throughput=true",
                    *overrides], extra, timeout)
        match = THROUGHPUT.search(out)
        if match is None:
            raise RuntimeError(f"no throughput line in the command's output:\n{out[-2000:]}")
        rows = list(csv.DictReader(open(next(pathlib.Path(root).glob("version_*/metrics.csv")))))
    evals = [r for r in rows if r.get("eval/episode_return")]
    if not evals:
        raise RuntimeError(f"no evaluation in metrics.csv:\n{out[-2000:]}")
    more = {}
    for key, column in (read or {}).items():
        logged = [r[column] for r in rows if r.get(column)]
        if not logged:
            raise RuntimeError(f"no {column} in metrics.csv:\n{out[-2000:]}")
        more[key] = float(logged[-1])
    steps = max(int(float(r["env_steps"])) for r in rows if r.get("env_steps"))
    return {"side": "ours", "env": env_name.split("/", 1)[-1], "seed": seed, "env_steps": steps,
            "env_steps_per_s": float(match[2].replace(",", "")), "run_s": float(match[3]),
            "compile_s": float(match[4]), "eval_return": float(evals[-1]["eval/episode_return"]),
            **more}


def brax(env: str, env_steps: int, seed: int, num_evals: int, extra: str | None,
         timeout: float, settings: tuple[str, ...] = ()) -> dict:
    """Brax's ``sac.train`` at its published hopper settings and ``env_steps``
    (``settings``: ``name=value`` changes of those settings, for a smoke test)."""
    out = _run([sys.executable, str(HERE / "_brax_sac_original.py"), "--env", env,
                "--num-timesteps", str(env_steps), "--num-evals", str(num_evals),
                "--seed", str(seed), *(x for kv in settings for x in ("--set", kv))],
               extra, timeout)
    return json.loads(out.strip().splitlines()[-1])


def limit(env: str, extra: str | None, timeout: float) -> dict:
    """``brax/<env>`` alone on 128 envs."""
    out = _run([sys.executable, str(HERE / "env_limit.py"), "--env", f"brax/{env}",
                "--batch", str(NUM_ENVS)], extra, timeout)
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return {**line, "env": env}


def _rate(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3f}"


def _result(x: float | list[float]) -> str:
    """A return or fitness (``.1f``), or a list of them, one a seed (mean ± standard
    deviation, ``.2f``)."""
    if not isinstance(x, list):
        return f"{x:.1f}"
    mean = statistics.fmean(x)
    return f"{mean:.2f}" + (f" ± {statistics.pstdev(x):.2f}" if len(x) > 1 else "")


def summary(rows: dict[str, dict], peer: str = "brax", rate: str = "env_steps_per_s",
            result: str = "eval_return") -> str:
    """One line: both sides' ``rate`` (env steps/s, or generations/s), their ratio, the
    limit and both sides' env steps/s as fractions of it, and their ``result`` (the
    return, a best fitness, or one per seed) (``peer``: the other side's name in ``rows``)."""
    o, b, lim = rows["ours"], rows[peer], rows["env_only"]["env_steps_per_s"]
    x, y = o[rate], b[rate]
    return (f"{o['env']} seed={o['seed']} ours={_rate(x)} {peer}={_rate(y)} ratio={x / y:.3f} "
            f"limit={lim:,.0f} ours_fraction={o['env_steps_per_s'] / lim:.3f} "
            f"{peer}_fraction={b['env_steps_per_s'] / lim:.3f} "
            f"{result.removeprefix('eval_')} ours={_result(o[result])} {peer}={_result(b[result])}")


def table(paths: list[str], peer: str = "brax", title: str = "Brax", family: str = "brax",
          envs: int | str = NUM_ENVS, rate: str = "env_steps_per_s",
          rate_label: str = "env steps/s", result: str = "eval_return",
          result_label: str = "return", seed_key: str = "seed", seed_label: str = "seed",
          steps_label: str = "env steps") -> str:
    """The markdown rows of ``docs/benchmarks.md`` from JSON-line files of runs (per env
    and seed: every run on both sides, the limit's last row); ``peer`` names the other
    side in the files, ``title`` in the table, ``family`` the env names' prefix, ``envs``
    the limit's batch; ``rate`` and ``result`` the keys of the rows' speed and quality
    (``*_label`` their columns' names; the fractions of the limit are always of env
    steps/s), ``seed_key`` the rows' key a table row is per (with the env; its column
    ``seed_label``) and ``steps_label`` the column of the peer's ``env_steps``."""
    runs: dict[tuple[str, int], dict[str, dict]] = {}
    limits: dict[str, dict] = {}
    for path in paths:
        for line in open(path):
            row = json.loads(line)
            if "error" in row:
                continue
            if row["side"] == "env_only":
                limits[row["env"]] = row
                continue
            runs.setdefault((row["env"], row[seed_key]), {})[row["side"]] = row
    out = [f"| env | {seed_label} | {steps_label} | ours {rate_label} | {title} | ratio | "
           f"env-only limit ({envs} envs) | ours / limit | {title} / limit | {result_label} ours | "
           f"{result_label} {title} |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (env, seed), sides in sorted(runs.items()):
        o, b, lim = sides.get("ours"), sides.get(peer), limits.get(env)
        if not (o and b and lim):
            continue
        x, y, c = o[rate], b[rate], lim["env_steps_per_s"]
        out.append(f"| {family}/{env} | {seed} | {b['env_steps']:,} | {_rate(x)} | {_rate(y)} | "
                   f"{x / y:.2f} | {c:,.0f} | {o['env_steps_per_s'] / c:.3f} | "
                   f"{b['env_steps_per_s'] / c:.3f} | {_result(o[result])} | {_result(b[result])} |")
    return "\n".join(out)


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2:]))
        return
    parser = row_parser(__doc__, "hopper", "a brax env name", 6_553_600, 1, 20, "brax")
    args = parser.parse_args()
    env, steps, seed = args.env, args.env_steps, args.seed
    run = {"env_only": lambda: limit(env, args.pythonpath, args.timeout),
           "ours": lambda: ours(env, steps, seed, args.pythonpath, args.timeout),
           "brax": lambda: brax(env, steps, seed, args.num_evals, args.pythonpath, args.timeout)}
    run_sides(run, args.sides, env, seed, args.json, parser, peer="brax")


def row_parser(doc: str, env: str | None, env_help: str, env_steps: int | None, seed: int,
               num_evals: int | None, peer: str) -> argparse.ArgumentParser:
    """The arguments of a row with one peer trainer (rows 3 to 6): the env, both sides'
    budget, the seed, the peer's evaluations (each left out where given ``None``, for
    the row to add its own), the sides to run, ``--pythonpath``, ``--timeout`` and
    ``--json``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if env is not None:
        parser.add_argument("--env", default=env, help=env_help)
    if env_steps is not None:
        parser.add_argument("--env-steps", type=int, default=env_steps, help="both sides' budget")
    parser.add_argument("--seed", type=int, default=seed)
    if num_evals is not None:
        parser.add_argument("--num-evals", type=int, default=num_evals,
                            help=f"{peer}'s evaluations (>= 3)")
    parser.add_argument("--sides", default=f"env_only,ours,{peer}")
    parser.add_argument("--pythonpath", default=None, help="added to both sides' PYTHONPATH")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a program may take")
    parser.add_argument("--json", default=None, help="append every program's JSON line here")
    return parser


def run_sides(run: dict[str, Callable[[], dict]], sides: str, env: str, seed: int,
              json_path: str | None, parser: argparse.ArgumentParser, peer: str,
              rate: str = "env_steps_per_s", result: str = "eval_return") -> None:
    """Run the named ``sides`` (comma-separated keys of ``run``) one after the other,
    print (and append to ``json_path``) each one's JSON line, a failed one's error
    included, then the summary line (:func:`summary` of ``rate`` and ``result``) when
    every side ran."""
    names = sides.split(",")
    if not set(names) <= set(run):
        parser.error(f"--sides {sides!r}: expected some of {', '.join(run)}")
    results: dict[str, dict] = {}
    for name in names:
        try:
            results[name] = run[name]()
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            results[name] = {"side": name, "env": env, "seed": seed, "error": str(error)[-600:]}
        _emit(results[name], json_path)
    failed = {k: v["error"][:200] for k, v in results.items() if "error" in v}
    if failed:
        print(" ".join(f"{k}: {v!r}" for k, v in failed.items()))
    elif set(results) == set(run):
        print(summary(results, peer=peer, rate=rate, result=result))


if __name__ == "__main__":
    main()
