"""``jaxtrainer plot RUN`` of a search: each trial's result against each hyperparameter.

A run holding ``search.csv`` (:class:`~jaxtrainer.population.Search`) is drawn
as one panel per searched hyperparameter (a log axis where the values span
more than a factor of 20 and crowd its low end, as a ``loguniform`` space's do): every trial is a point at its value, its height the trial's result:
its final evaluation where it has one (``eval``), else its final fitness;
trials stopped at a rung are hollow points at their last rung's fitness, so
the figure shows where in each range the search found good trials and what
it stopped early.
"""

from __future__ import annotations

import csv
import math
import os
from typing import Any

import numpy as np

from jaxtrainer.commands._plot import figure_format, save_figure
from jaxtrainer.population.search_report import SEARCH_FILE

FIXED = ("trial", "rung", "step", "env_steps", "fitness", "status", "eval")
"""The columns of ``search.csv`` that are not hyperparameters."""


def read_trials(run_dir: str | os.PathLike) -> tuple[list[str], list[dict[str, Any]]]:
    """``(hyperparameter names, one dict per trial)`` from ``search.csv``: each
    trial's values, ``result`` (final eval, else final fitness, else its
    stopping rung's fitness) and ``stopped`` (bool).

    Raises:
      FileNotFoundError: no ``search.csv`` in ``run_dir``.
    """
    path = os.path.join(os.fspath(run_dir), SEARCH_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir}: no {SEARCH_FILE} (is it a search run?)")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    names = [c for c in (rows[0] if rows else {}) if c not in FIXED]
    trials: dict[int, dict[str, Any]] = {}
    for r in rows:
        t = trials.setdefault(int(r["trial"]), {n: float(r[n]) for n in names})
        if r["status"] == "stopped":
            t.update(result=float(r["fitness"]), stopped=True)
        elif r["rung"] == "final":
            t.update(result=float(r["eval"] or r["fitness"]), fitness=float(r["fitness"]),
                     stopped=False)
    return names, [dict(t, trial=k) for k, t in sorted(trials.items()) if "result" in t]


def _log_axis(values: np.ndarray) -> bool:
    """A log axis for positive values spanning more than a factor of 20 that
    crowd the low end of a linear axis (their median below its first quarter),
    as draws of a ``loguniform`` space do; ``uniform(0, 0.05)`` stays linear."""
    low, high = float(values.min()), float(values.max())
    if not (low > 0 and high / low > 20):
        return False
    return bool((np.median(values) - low) / (high - low) < 0.25)


def plot_search(run_dir: str, output: str, title: str | None = None) -> dict[str, Any]:
    """Write a figure of a search run (module docstring) at ``output``, in the
    format of its suffix (:func:`jaxtrainer.commands._plot.figure_format`).

    Returns:
      ``{"trials": the trials drawn (:func:`read_trials`), "names": the
      hyperparameters, "best": the trial not stopped with the best final
      fitness (ties: result), as the best-trials table ranks them}``.

    Raises:
      FileNotFoundError: no ``search.csv``.
      ValueError: ``output``'s suffix is no figure format, or no trial
        finished or stopped yet.
    """
    figure_format(output)  # before reading the run
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, trials = read_trials(run_dir)
    if not trials:
        raise ValueError(f"{run_dir}: {SEARCH_FILE} holds no finished or stopped trial yet")
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(4.2 * max(len(names), 1), 3.8),
                             dpi=120, squeeze=False)
    result = np.array([t["result"] for t in trials], np.float64)
    stopped = np.array([t["stopped"] for t in trials])
    finite = np.isfinite(result)
    for ax, name in zip(axes[0], names, strict=False):
        x = np.array([t[name] for t in trials], np.float64)
        done, cut = finite & ~stopped, finite & stopped
        ax.scatter(x[done], result[done], s=22, color="C0", label="complete")
        ax.scatter(x[cut], result[cut], s=22, facecolors="none", edgecolors="C3",
                   label="stopped at a rung")
        if _log_axis(x):
            ax.set_xscale("log")
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("final evaluation (else fitness)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title or f"search: {len(trials)} trials")
    save_figure(fig, output)
    kept = [t for t in trials if not t["stopped"] and math.isfinite(t["fitness"])]
    # ranked as the search and its best-trials table rank them: fitness, then result
    best = max(kept, key=lambda t: (t["fitness"], t["result"])) if kept else None
    return {"trials": trials, "names": names, "best": best}


def report(out: dict[str, Any], output: str) -> str:
    """What ``jaxtrainer plot`` prints about a search's figure."""
    best = out["best"]
    where = (f"; the best trial by fitness: {best['trial']} ("
             + ", ".join(f"{n}={best[n]:.4g}" for n in out["names"])
             + f"), fitness {best['fitness']:.2f}, result {best['result']:.2f}" if best else "")
    stopped = sum(t["stopped"] for t in out["trials"])
    return (f"wrote {output}: {len(out['trials'])} trials of a search ({stopped} stopped at a "
            f"rung) against {', '.join(out['names'])}{where}")
