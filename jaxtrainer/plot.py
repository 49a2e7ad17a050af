"""``jaxtrainer plot``: learning curves from runs' ``metrics.csv``.

    jaxtrainer plot runs/ppo/version_0 runs/ppo/version_1 -o curves.png
    jaxtrainer plot runs/ppo/version_* -o loss.png --metric train/loss --x step

Each run is one line of ``RUN_DIR/metrics.csv`` values; with several runs the
figure shows their mean and a band from the minimum to the maximum (the spread
over runs), after interpolating every run onto the x values of the shortest.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys

import numpy as np


def read_curve(run_dir: str | os.PathLike, metric: str, x: str = "env_steps") -> tuple[np.ndarray, np.ndarray]:
    """``(x_values, metric_values)`` from ``run_dir/metrics.csv`` (rows where
    both are set and finite), sorted by x; a repeated x keeps the last row.

    Raises:
      FileNotFoundError: no ``metrics.csv`` in ``run_dir``.
      KeyError: the file has no column ``metric`` or ``x``, listing the columns.
    """
    path = os.path.join(os.fspath(run_dir), "metrics.csv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no metrics.csv (is {run_dir} a run directory?)")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        for name in (metric, x):
            if name not in columns:
                raise KeyError(f"{path} has no column {name!r}; columns: {', '.join(columns)}")
        points: dict[float, float] = {}
        for row in reader:
            try:
                xv, yv = float(row[x]), float(row[metric])
            except (TypeError, ValueError):
                continue
            if math.isfinite(xv) and math.isfinite(yv):
                points[xv] = yv
    xs = np.array(sorted(points), dtype=np.float64)
    return xs, np.array([points[v] for v in xs], dtype=np.float64)


def plot_runs(run_dirs: list[str], output: str, metric: str = "train/episode_return",
              x: str = "env_steps", title: str | None = None) -> dict[str, np.ndarray]:
    """Write a PNG of ``metric`` against ``x``: every run thin, the mean over
    runs thick with a min-max band. Returns ``{"x", "mean", "low", "high"}``.

    Raises:
      ValueError: no run has a value of ``metric``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [(d, *read_curve(d, metric, x)) for d in run_dirs]
    curves = [c for c in curves if len(c[1])]
    if not curves:
        raise ValueError(f"no run in {run_dirs} logged {metric!r}")
    end = min(c[1][-1] for c in curves)
    grid = np.unique(np.concatenate([c[1][c[1] <= end] for c in curves]))
    ys = np.stack([np.interp(grid, xs, vs) for _, xs, vs in curves])
    mean, low, high = ys.mean(0), ys.min(0), ys.max(0)

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    names = [os.path.basename(os.path.normpath(d)) for d, _, _ in curves]
    if len(set(names)) < len(names):  # version_0 of several roots: add the parent
        names = [os.path.join(*os.path.normpath(d).split(os.sep)[-2:]) for d, _, _ in curves]
    for (_, xs, vs), name in zip(curves, names, strict=True):
        ax.plot(xs, vs, lw=0.8, alpha=0.6, label=name)
    ax.plot(grid, mean, lw=2.2, color="black", label=f"mean of {len(curves)} run(s)")
    if len(curves) > 1:
        ax.fill_between(grid, low, high, color="gray", alpha=0.3, label="min-max over runs")
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, format="png")
    plt.close(fig)
    return {"x": grid, "mean": mean, "low": low, "high": high}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jaxtrainer plot",
                                     description="Learning curves (mean and spread over runs) from metrics.csv.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (version_N)")
    parser.add_argument("-o", "--output", default="curves.png", help="PNG file to write")
    parser.add_argument("--metric", default="train/episode_return", help="column to plot")
    parser.add_argument("--x", default="env_steps", help="x-axis column (env_steps or step)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    try:
        out = plot_runs(args.run_dirs, args.output, args.metric, args.x, args.title)
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"jaxtrainer plot: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {args.metric} over {len(args.run_dirs)} run(s), "
          f"final mean {out['mean'][-1]:.4g} at {args.x}={out['x'][-1]:.0f}")
    return 0
