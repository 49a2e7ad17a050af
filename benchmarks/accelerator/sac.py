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
            extra: str | None, timeout: float, overrides: tuple[str, ...] = ()) -> dict:
    """``jaxtrainer fit RECIPE --config CONFIG env.name=ENV_NAME`` at ``env_steps``, one
    evaluation at the end: env steps/s of the training loop (``callbacks.throughput``),
    its seconds and compile seconds, and the final evaluation return."""
    with tempfile.TemporaryDirectory() as root:
        out = _run([sys.executable, "-m", "jaxtrainer", "fit", recipe, "--config", config,
                    f"env.name={env_name}", f"trainer.max_env_steps={env_steps}",
                    f"trainer.seed={seed}", "trainer.eval_every_n_steps=null",
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
    steps = max(int(float(r["env_steps"])) for r in rows if r.get("env_steps"))
    return {"side": "ours", "env": env_name.split("/", 1)[-1], "seed": seed, "env_steps": steps,
            "env_steps_per_s": float(match[2].replace(",", "")), "run_s": float(match[3]),
            "compile_s": float(match[4]), "eval_return": float(evals[-1]["eval/episode_return"])}


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


def summary(rows: dict[str, dict], peer: str = "brax") -> str:
    """One line: both sides' env steps/s, their ratio, the limit and both fractions of
    it, and the returns (``peer``: the other side's name in ``rows``)."""
    o, b, lim = rows["ours"], rows[peer], rows["env_only"]["env_steps_per_s"]
    x, y = o["env_steps_per_s"], b["env_steps_per_s"]
    return (f"{o['env']} seed={o['seed']} ours={x:,.0f} {peer}={y:,.0f} ratio={x / y:.3f} "
            f"limit={lim:,.0f} ours_fraction={x / lim:.3f} {peer}_fraction={y / lim:.3f} "
            f"return ours={o['eval_return']:.1f} {peer}={b['eval_return']:.1f}")


def table(paths: list[str], peer: str = "brax", title: str = "Brax", family: str = "brax",
          envs: int = NUM_ENVS) -> str:
    """The markdown rows of ``docs/benchmarks.md`` from JSON-line files of runs (per env
    and budget: every seed run on both sides, the limit's last row); ``peer`` names the
    other side in the files, ``title`` in the table, ``family`` the env names' prefix,
    ``envs`` the limit's batch."""
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
            runs.setdefault((row["env"], row["seed"]), {})[row["side"]] = row
    out = [f"| env | seed | env steps | ours env steps/s | {title} | ratio | env-only limit "
           f"({envs} envs) | ours / limit | {title} / limit | return ours | return {title} |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (env, seed), sides in sorted(runs.items()):
        o, b, lim = sides.get("ours"), sides.get(peer), limits.get(env)
        if not (o and b and lim):
            continue
        x, y, c = o["env_steps_per_s"], b["env_steps_per_s"], lim["env_steps_per_s"]
        out.append(f"| {family}/{env} | {seed} | {b['env_steps']:,} | {x:,.0f} | {y:,.0f} | {x / y:.2f} "
                   f"| {c:,.0f} | {x / c:.3f} | {y / c:.3f} | {o['eval_return']:.1f} | "
                   f"{b['eval_return']:.1f} |")
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


def row_parser(doc: str, env: str, env_help: str, env_steps: int, seed: int, num_evals: int,
               peer: str) -> argparse.ArgumentParser:
    """The arguments of a row with one peer trainer (rows 3 and 4): the env, both sides'
    budget, the seed, the peer's evaluations, the sides to run, ``--pythonpath``,
    ``--timeout`` and ``--json``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--env", default=env, help=env_help)
    parser.add_argument("--env-steps", type=int, default=env_steps, help="both sides' budget")
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--num-evals", type=int, default=num_evals,
                        help=f"{peer}'s evaluations (>= 3)")
    parser.add_argument("--sides", default=f"env_only,ours,{peer}")
    parser.add_argument("--pythonpath", default=None, help="added to both sides' PYTHONPATH")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a program may take")
    parser.add_argument("--json", default=None, help="append every program's JSON line here")
    return parser


def run_sides(run: dict[str, Callable[[], dict]], sides: str, env: str, seed: int,
              json_path: str | None, parser: argparse.ArgumentParser, peer: str) -> None:
    """Run the named ``sides`` (comma-separated keys of ``run``) one after the other,
    print (and append to ``json_path``) each one's JSON line, a failed one's error
    included, then the summary line when every side ran."""
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
        print(summary(results, peer=peer))


if __name__ == "__main__":
    main()
