"""Our recipes against published results, at the published budget.

    python benchmarks/published.py                       # every row, 5 seeds
    python benchmarks/published.py --rows sac-pendulum --seeds 5 --jobs 2
    python benchmarks/published.py --rows crossq-pendulum --add-seeds 3,4   # to seeds 0-2

For each row of ``benchmarks/published.yaml`` (recipe, env, budget in env steps,
the published figure with its spread and source) this runs ``--seeds`` seeds,
each one process of exactly what a user types::

    jaxtrainer fit <recipe> env.name=<env> trainer.max_env_steps=<budget> trainer.seed=<s>

(so the recipe's preset for that env applies; only the run directory, the
progress bar, checkpoints and TensorBoard are set besides), ``--jobs`` at a time.
Per row it reports the final greedy evaluation of every seed (the command's last
line), their mean and IQM with 95% stratified-bootstrap confidence intervals
(rliable, :func:`jaxtrainer.population.summary.config_statistics`), the training
return over the last 10% of the budget (CleanRL's statistic: the mean of the
logged ``train/episode_return`` rows at or after 90% of the env steps), the
wall seconds per seed (the whole process, compilation included where the
compilation cache does not hold the programs yet: :data:`REPRODUCING`), and whether
the row is at or above
the published figure (the rule is in ``published.yaml``).

Results accumulate in ``docs/baselines/results.json`` (a row run again replaces
its entry); ``docs/baselines.md`` and one learning-curve figure per row
(``docs/baselines/<row>.png``: each seed's training return against env steps,
their mean, the published figure and the pass line) are written from it after
every row. Exits 1 when a row run now is below its published figure.

The page also holds the rows of ``published.yaml``'s ``side_by_side`` list: our
trainer against the other project's own trainer, run by another benchmark
(``benchmarks/marl_ippo.py``, ``benchmarks/brax_ppo.py``) at the same settings and
budget on one machine, whose ``--json`` output is ``docs/baselines/<id>.json``.
Such a row passes by the same rule, their mean and standard deviation over seeds
standing for the published ones.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from _recipe_seeds import ROOT, run_command

TABLE = Path(__file__).with_name("published.yaml")
DOCS = ROOT / "docs"


def threshold(published: dict[str, Any]) -> float:
    """The lowest mean that is at the published figure: its mean minus its
    standard deviation over seeds, else minus 10% of its magnitude."""
    mean, std = float(published["mean"]), published.get("std")
    if published.get("over") == "seeds" and std is not None:
        return mean - float(std)
    return mean - 0.1 * abs(mean)


def side_by_side(row: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``side_by_side`` row's figures from its runs (each: side, seed, final_return,
    env_steps_per_s, device, date): both sides' means and seeds, the pass line from
    theirs, and the median of our speed over theirs per seed run on both sides."""
    ours = {r["seed"]: r for r in runs if r["side"] == "ours"}
    theirs = {r["seed"]: r for r in runs if r["side"] == row["their_side"]}
    if not ours or not theirs:
        raise ValueError(f"{row['id']}: the runs need side 'ours' and side "
                         f"{row['their_side']!r}; found {sorted({r['side'] for r in runs})}")
    their_finals = [r["final_return"] for r in theirs.values()]
    mean = statistics.fmean(their_finals)
    std = statistics.stdev(their_finals) if len(their_finals) > 1 else None
    floor = threshold({"mean": mean, "std": std, "over": "seeds" if std is not None else None})
    finals = [r["final_return"] for r in ours.values()]
    both = sorted(set(ours) & set(theirs))
    return {"id": row["id"], "finals": finals, "mean": statistics.fmean(finals),
            "their_finals": their_finals, "their_mean": mean, "their_std": std,
            "threshold": floor, "passed": statistics.fmean(finals) >= floor,
            "speed_ratio": statistics.median(
                ours[s]["env_steps_per_s"] / theirs[s]["env_steps_per_s"] for s in both),
            "devices": sorted({r["device"] for r in runs}),
            "dates": sorted({r["date"] for r in runs})}


def side_by_side_lines(rows: list[dict[str, Any]], docs: Path) -> list[str]:
    """The page's section for the ``side_by_side`` rows whose runs file exists."""
    lines = ["## Measured against the other project's code, run side by side", "",
             "The other project's own trainer, run on the same machine at the same settings "
             "and budget (no published table gives these at this budget); each row's command "
             "writes its runs to `docs/baselines/<row>.json`. Passes as above, with their mean "
             "and standard deviation over seeds (minus 10% of their mean's magnitude with one "
             "seed). *Speed* is the median over seeds of our env steps/s over theirs.", "",
             "| row | budget (env steps) | theirs | pass line | theirs: mean (seeds) "
             "| ours: mean (seeds) | speed | measured | ours vs pass line |",
             "|---|--:|---|--:|---|---|--:|---|---|"]
    notes = []
    for row in rows:
        path = docs / "baselines" / f"{row['id']}.json"
        if not path.is_file():
            notes.append(f"{row['id']}: not measured yet (`{row['command']}`).")
            continue
        runs = json.loads(path.read_text())
        e = side_by_side(row, runs)
        drawn = side_by_side_figure(row, runs, e, docs / "baselines" / f"{row['id']}.png")
        d = int(row.get("digits", 2))  # decimals of the row's figures
        spread = f" ± {e['their_std']:.{d}f}" if e["their_std"] is not None else ""
        unit = f" {row['budget_unit']}" if row.get("budget_unit") else ""
        lines.append(
            f"| {row['algorithm']} {row['env']} | {row['budget']:,}{unit} | [{row['theirs']}]({row['url']}) "
            f"| {e['threshold']:.{d}f} | {e['their_mean']:.{d}f}{spread} ({len(e['their_finals'])}) "
            f"| {e['mean']:.{d}f} ({len(e['finals'])}) | {e['speed_ratio']:.3f} "
            f"| {', '.join(e['dates'])}, {', '.join(e['devices'])} "
            f"| {'at or above' if e['passed'] else '**below**'} |")
        notes.append(f"{row['id']}: {row['statistic']}; seeds ours "
                     f"{', '.join(f'{x:.{d}f}' for x in e['finals'])}, theirs "
                     f"{', '.join(f'{x:.{d}f}' for x in e['their_finals'])} (medians "
                     f"{statistics.median(e['finals']):.{d}f} and "
                     f"{statistics.median(e['their_finals']):.{d}f}). `{row['command']}`"
                     + (f"; {row['note']}" if row.get("note") else "") + "."
                     + (f" Curves ({row['curves']}):\n\n  ![{row['id']}](baselines/{row['id']}.png)"
                        if drawn else " These runs recorded no curves."))
    return lines + [""] + [f"- {n}" for n in notes] + [""]


def run_seed(row: dict[str, Any], seed: int, root: Path) -> dict[str, Any]:
    """One seed of ``row``: ``{"seed", "final", "seconds", "curve": [[env_steps, return], ...]}``.

    Raises:
      RuntimeError: the command failed or printed no ``eval/episode_return=`` line.
    """
    command = [sys.executable, "-m", "jaxtrainer.commands._cli", "fit", row["recipe"],
               f"env.name={row['env']}", f"trainer.max_env_steps={row['budget']}",
               f"trainer.seed={seed}", f"trainer.default_root_dir={root / row['id'] / f'seed{seed}'}",
               "trainer.enable_progress_bar=false", "trainer.enable_checkpointing=false",
               "logger.tensorboard=false", *row.get("overrides", [])]
    final, run_dir, stdout, seconds = run_command(command, f"{row['id']} seed {seed}")
    preset = next((ln.split("preset ", 1)[1] for ln in stdout.splitlines()
                   if ln.startswith("jaxtrainer: preset ")), None)
    return {"seed": seed, "final": final, "seconds": round(seconds, 1),
            "curve": curve(Path(run_dir)) if run_dir else [], "preset": preset}


def curve(run_dir: Path) -> list[list[float]]:
    """``[[env_steps, train/episode_return], ...]`` of a run's ``metrics.csv`` (rows that have both)."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return []
    out = []
    with path.open() as f:
        for record in csv.DictReader(f):
            steps, ret = record.get("env_steps"), record.get("train/episode_return")
            if steps and ret and math.isfinite(float(ret)):
                out.append([float(steps), float(ret)])
    return out


def last_tenth(points: list[list[float]], budget: int) -> float:
    """The mean training return of the rows at or after 90% of ``budget`` (NaN if none)."""
    tail = [r for s, r in points if s >= 0.9 * budget]
    return sum(tail) / len(tail) if tail else math.nan


def summarise(row: dict[str, Any], seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """The row's entry of ``results.json``."""
    from jaxtrainer.population.summary import config_statistics

    finals = [s["final"] for s in seeds]
    stats = config_statistics(finals)
    tails = [last_tenth(s["curve"], row["budget"]) for s in seeds]
    tails = [t for t in tails if math.isfinite(t)]
    floor = threshold(row["published"])
    passed = stats["mean"] >= floor and min(finals) >= row.get("min_seed", -math.inf)
    return {**{k: row[k] for k in ("id", "recipe", "env", "budget", "published", "source", "url")},
            "min_seed": row.get("min_seed"), "threshold": floor, "finals": finals, **stats,
            "last_tenth_train": sum(tails) / len(tails) if tails else math.nan,
            "seconds_per_seed": _median_seconds(seeds),
            "passed": bool(passed), "preset": seeds[0].get("preset"),
            "date": datetime.date.today().isoformat(), "machine": machine(),
            "seed_list": [s["seed"] for s in seeds], "seconds": [s["seconds"] for s in seeds],
            "curves": [s["curve"] for s in seeds]}


def _median_seconds(seeds: list[dict[str, Any]]) -> float | None:
    """The (upper) median wall seconds of the seeds whose seconds are known."""
    known = sorted(s["seconds"] for s in seeds if s["seconds"] is not None)
    return known[len(known) // 2] if known else None


def earlier_seeds(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The seeds of a ``results.json`` entry as ``run_seed`` returns them (entries written
    before seeds and seconds were stored: seeds 0.. in order, seconds unknown, ``None``:
    such an entry kept only their median)."""
    n = len(entry["finals"])
    seeds = entry.get("seed_list", list(range(n)))
    seconds = entry.get("seconds", [None] * n)
    return [{"seed": seed, "final": final, "seconds": sec, "curve": c,
             "preset": entry.get("preset")}
            for seed, final, sec, c in zip(seeds, entry["finals"], seconds, entry["curves"],
                                           strict=True)]


def check_new_seeds(row: dict[str, Any], entry: dict[str, Any], seeds: list[int]) -> None:
    """Raises ValueError naming the seeds of ``seeds`` that ``entry`` already has."""
    have = [s["seed"] for s in earlier_seeds(entry)]
    again = sorted(set(have) & set(seeds))
    if again:
        raise ValueError(f"{row['id']}: seeds {again} are already in results.json; "
                         f"it has seeds {have}")


def add_seeds(row: dict[str, Any], entry: dict[str, Any],
              new: list[dict[str, Any]]) -> dict[str, Any]:
    """``entry`` (the row's earlier result) with the seeds ``new`` added; the row's text
    says when and where the earlier seeds ran.

    Raises:
      ValueError: a seed of ``new`` is already in ``entry``.
    """
    check_new_seeds(row, entry, [s["seed"] for s in new])
    old = earlier_seeds(entry)
    merged = summarise(row, sorted(old + new, key=lambda s: s["seed"]))
    unknown = all(s["seconds"] is None for s in old) and entry.get("seconds_per_seed")
    merged["earlier"] = (f"seeds {', '.join(str(s['seed']) for s in old)} on {entry['date']} "
                         f"({entry['machine']}"
                         + (f"; median {entry['seconds_per_seed']:.0f} s per seed" if unknown else "")
                         + ")" + (f"; {entry['earlier']}" if entry.get("earlier") else ""))
    return merged


def machine() -> str:
    import jax

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip() or "?"
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, cwd=ROOT).stdout.strip()
    commit += " with uncommitted changes" if changed else ""
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
            f"jax {jax.__version__} ({jax.default_backend()}), jaxtrainer {commit}")


def _plot_seeds(ax, curves: list[list[list[float]]], color: str, label: str) -> None:
    """Each seed's curve (``[env steps, return]`` pairs) faint, their mean bold."""
    curves = [c for c in curves if c]
    for i, points in enumerate(curves):
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color, alpha=0.3, lw=1,
                label=f"{label}, each seed" if i == 0 and len(curves) > 1 else
                (label if i == 0 else None))
    common = min((len(c) for c in curves), default=0)
    if common and len(curves) > 1:  # the seeds log at the same env steps
        ax.plot([p[0] for p in curves[0][:common]],
                [sum(c[j][1] for c in curves) / len(curves) for j in range(common)],
                color=color, lw=2, label=f"{label}, mean over seeds")


def _save(fig, ax, title: str, path: Path, labels: tuple[str, str] = ("env steps",
                                                                   "episode return")) -> None:
    import matplotlib.pyplot as plt

    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(5.5, 3.4), dpi=100)


def figure(entry: dict[str, Any], path: Path) -> None:
    """Each seed's training return against env steps, their mean, the published figure."""
    fig, ax = _axes()
    _plot_seeds(ax, entry["curves"], "tab:blue", "ours (training return)")
    published = entry["published"]["mean"]
    ax.axhline(published, color="black", ls="--", lw=1, label=f"published {published:g}")
    ax.axhline(entry["threshold"], color="tab:red", ls=":", lw=1,
               label=f"pass line {entry['threshold']:g}")
    _save(fig, ax, f"{entry['recipe']} {entry['env']}: final greedy mean {entry['mean']:.1f}", path)


def side_by_side_figure(row: dict[str, Any], runs: list[dict[str, Any]], entry: dict[str, Any],
                        path: Path) -> bool:
    """Both trainers' curves of a ``side_by_side`` row (the runs' ``curve`` lists) and the
    pass line of ``entry`` (:func:`side_by_side` of the runs), each side named by the row's
    ``curve_labels`` where it has them (when the sides' curves measure different things);
    False, and nothing written, when no run has a curve."""
    if not any(r.get("curve") for r in runs):
        return False
    labels = {"ours": "ours", row["their_side"]: row["their_side"], **row.get("curve_labels", {})}
    fig, ax = _axes()
    _plot_seeds(ax, [r.get("curve") for r in runs if r["side"] == "ours"], "tab:blue",
                labels["ours"])
    _plot_seeds(ax, [r.get("curve") for r in runs if r["side"] == row["their_side"]],
                "tab:orange", labels[row["their_side"]])
    ax.axhline(entry["threshold"], color="tab:red", ls=":", lw=1,
               label=f"pass line {entry['threshold']:.2f}")
    d = int(row.get("digits", 2))
    _save(fig, ax, f"{row['algorithm'].split(' ')[0]} {row['env']}: ours {entry['mean']:.{d}f}, "
          f"{row['their_side']} {entry['their_mean']:.{d}f}", path,
          tuple(row.get("axes", ("env steps", "episode return"))))
    return True


REPRODUCING = (
    "What reproduces: on the machine, jax version and commit a row names, its command gives "
    "each seed's final return bit for bit, and so the row's mean, IQM, intervals (a bootstrap "
    "of fixed seed), last 10% and min seed; the seed is an input of the compiled programs, and a "
    "program loaded from the compilation cache computes what a fresh compile does. At another "
    "commit, machine or XLA version, floating-point sums may run in another order and RL "
    "amplifies such differences: each seed's return can differ, and the mean over seeds is "
    "expected within the row's 95% interval, not on its figures. *s/seed* is a wall time, "
    "never reproduced exactly: the upper median over the row's seeds of the seconds of the "
    "whole `jaxtrainer fit` process (Python start-up, imports, preparing the programs, training "
    "and the final evaluation), `--jobs` (2) seeds at once on the machine named, with the "
    "recipes' compilation cache on (`~/.cache/jaxtrainer/jax`): the first seeds compile, the "
    "later ones load the compiled programs from the cache, so the median leaves compilation "
    "out. A first run on a machine compiles (its `compiled in ... s` lines say for how long) "
    "and takes longer."
)
"""The page's paragraph on which figures reproduce bit for bit and what *s/seed* times."""


def page(results: dict[str, dict[str, Any]], order: list[str], rows: list[dict[str, Any]],
         docs: Path) -> str:
    """``docs/baselines.md`` from the accumulated results, rows in table order, then the
    ``side_by_side`` rows (``rows``) from their runs files under ``docs``."""
    lines = [
        "# Baselines",
        "",
        "Every row: `jaxtrainer fit <recipe> env.name=<env> trainer.max_env_steps=<budget> "
        "trainer.seed=<s>` for each seed, as a user types it (the recipe's preset for the env "
        "applies), against a published figure at the same budget. *Final* is the greedy "
        "evaluation the command prints last; mean and IQM with 95% stratified-bootstrap "
        "confidence intervals (rliable). *Last 10%* is the training return over the last 10% "
        "of the budget (CleanRL's statistic). A row passes when the mean final return is at "
        "least the published mean minus its standard deviation over seeds (minus 10% of its "
        "magnitude where the source gives none over seeds). Seeds differ from the published "
        "ones: the claim is about the mean and its interval.",
        "",
        "Written by `python benchmarks/published.py` from the results of its runs, which "
        "accumulate row by row (rows and sources: `benchmarks/published.yaml`; presets: "
        "`src/jaxtrainer/recipes/presets/`); each row names its date, machine and commit.",
        "",
        REPRODUCING,
        "",
        f"Measured {_dates(results)}; {_seed_counts(results, order)}.",
        "",
        "| row | budget (env steps) | published | pass line | ours: final mean [95% CI] | IQM [95% CI] "
        "| last 10% | min seed | seeds | s/seed | mean vs pass line |",
        "|---|--:|---|--:|---|---|--:|--:|--:|--:|---|",
    ]
    for rid in order:
        e = results.get(rid)
        if e is None:
            continue
        p = e["published"]
        spread = f" ± {p['std']:g} ({p['over']})" if p.get("std") is not None else ""
        lines.append(
            f"| {e['recipe']} {e['env']} | {e['budget']:,} | [{p['mean']:g}{spread}]({e['url']}) "
            f"| {e['threshold']:.1f} | {e['mean']:.1f} [{e['mean_ci_low']:.1f}, {e['mean_ci_high']:.1f}] "
            f"| {e['iqm']:.1f} [{e['iqm_ci_low']:.1f}, {e['iqm_ci_high']:.1f}] "
            f"| {e['last_tenth_train']:.1f} | {min(e['finals']):.1f} | {len(e['finals'])} "
            f"| {e['seconds_per_seed']:.0f} | {'at or above' if e['passed'] else '**below**'} |")
    missing = [rid for rid in order if rid not in results]
    if missing:
        lines += ["", f"Not measured yet: {', '.join(missing)}."]
    lines += [""] + side_by_side_lines(rows, docs) + ["## Rows", ""]
    for rid in order:
        e = results.get(rid)
        if e is None:
            continue
        lines += [f"### {e['recipe']} {e['env']}", "",
                  f"Published: {e['source']} ({e['url']}). Measured {e['date']} on {e['machine']}"
                  + (f"; earlier {e['earlier']}." if e.get("earlier") else "."),
                  f"Final greedy returns by seed: {', '.join(f'{x:.1f}' for x in e['finals'])}.",
                  f"Preset: {e['preset'] or 'none (the recipe YAML as shipped)'}.", "",
                  f"![{e['id']}](baselines/{e['id']}.png)", ""]
    return "\n".join(lines).rstrip() + "\n"


def _seed_counts(results: dict[str, dict[str, Any]], order: list[str]) -> str:
    """"seeds 0-4 per row" and the rows with fewer, in table order."""
    most = max(len(e["finals"]) for e in results.values())
    fewer = [f"{results[r]['recipe']} {results[r]['env']} {len(results[r]['finals'])}"
             for r in order if r in results and len(results[r]["finals"]) < most]
    return f"seeds 0-{most - 1} per row" + (f" (fewer: {', '.join(fewer)})" if fewer else "")


def _dates(results: dict[str, dict[str, Any]]) -> str:
    dates = sorted({e["date"] for e in results.values()})
    return dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="*", help="row ids (default: all)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per row")
    parser.add_argument("--add-seeds", default=None,
                        help="comma-separated seeds to add to each row's earlier result "
                             "instead (e.g. 3,4 to a row run with 3 seeds)")
    parser.add_argument("--jobs", type=int, default=2, help="seeds run at once")
    parser.add_argument("--root", default=str(ROOT / "runs" / "published"))
    parser.add_argument("--docs", default=str(DOCS), help="where baselines.md and baselines/ go")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite baselines.md and the figures from results.json")
    args = parser.parse_args(argv)
    table = yaml.safe_load(TABLE.read_text())
    rows, beside = table["rows"], table.get("side_by_side", [])
    order = [r["id"] for r in rows]
    unknown = sorted(set(args.rows or []) - set(order))
    if unknown:
        parser.error(f"unknown rows {unknown}; the rows are {', '.join(order)}")
    docs = Path(args.docs)
    store = docs / "baselines" / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {}
    if args.render:
        for rid, entry in results.items():
            figure(entry, docs / "baselines" / f"{rid}.png")
        (docs / "baselines.md").write_text(page(results, order, beside, docs))
        return 0
    below = []
    for row in rows:
        if args.rows and row["id"] not in args.rows:
            continue
        wanted = ([int(x) for x in args.add_seeds.split(",")] if args.add_seeds
                  else list(range(args.seeds)))
        if args.add_seeds:
            if row["id"] not in results:
                parser.error(f"--add-seeds: {row['id']} has no earlier result to add to")
            try:
                check_new_seeds(row, results[row["id"]], wanted)
            except ValueError as exc:
                parser.error(f"--add-seeds: {exc}")
        with ThreadPoolExecutor(args.jobs) as pool:
            seeds = list(pool.map(run_seed, [row] * len(wanted), wanted,
                                  [Path(args.root)] * len(wanted)))
        entry = (add_seeds(row, results[row["id"]], seeds) if args.add_seeds
                 else summarise(row, seeds))
        results[row["id"]] = entry
        figure(entry, docs / "baselines" / f"{row['id']}.png")
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(results, indent=1))
        (docs / "baselines.md").write_text(page(results, order, beside, docs))
        mark = "at or above" if entry["passed"] else "BELOW"
        print(f"{row['id']:<16} published {row['published']['mean']:>8g} pass line "
              f"{entry['threshold']:8.1f} | ours mean {entry['mean']:8.1f} "
              f"[{entry['mean_ci_low']:.1f}, {entry['mean_ci_high']:.1f}] IQM {entry['iqm']:8.1f} "
              f"min {min(entry['finals']):8.1f} last10% {entry['last_tenth_train']:8.1f} "
              f"{entry['seconds_per_seed']:5.0f} s/seed  {mark}", flush=True)
        if not entry["passed"]:
            below.append(row["id"])
    print(f"{len(below)} row(s) below the published figure" + (f": {', '.join(below)}" if below else ""))
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
