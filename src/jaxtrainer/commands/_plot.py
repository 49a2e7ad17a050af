"""``jaxtrainer plot``: learning curves from runs' ``metrics.csv``.

    jaxtrainer plot runs/ppo                                 # every run under a root: runs/ppo/curves.png
    jaxtrainer plot runs/ppo/version_0 runs/ppo/version_1 -o curves.png
    jaxtrainer plot runs/ppo/version_* -o loss.png --metric train/loss --x step

Each argument is a run directory (one holding ``metrics.csv``) or, as
``tensorboard --logdir`` takes, a root: every directory below it holding a
``metrics.csv`` is a run (``version_<n>`` in number order). Each run is one
line, labelled with its path relative to the root. Runs are grouped by recipe,
environment, kind and settings beyond the seed (:func:`group_runs`,
:mod:`jaxtrainer.rundir._run_kind`: a CartPole run, an Acrobot run, a sweep and
a CartPole run of another budget are four groups); per group the
figure shows the mean and a band from the minimum to the maximum (the spread
over its runs), after interpolating its runs onto the x values of its
shortest. Without ``--metric`` each run draws the headline metric of its
kind, the one its progress line shows, so every RL run of a figure draws
``train/episode_return`` (however often it was evaluated), its last
evaluation, the value its recipe's last line printed, as a star; an evolution
strategy's ``fitness/mean``, a PBT population's ``fitness/max``.
``--metric eval/episode_return`` draws the evaluations. A sweep's ``env_steps`` are drawn per
member (its environment steps over its member count) wherever it is drawn.

A single run of a sweep (:class:`~jaxtrainer.population.Sweep`, a run directory
holding ``sweep_members.csv``) is drawn by :func:`plot_sweep`: one line per
configuration, the interquartile mean over its seeds' ``member/<i>/<metric>``
with a 95% stratified-bootstrap confidence band, labelled by its
hyperparameters. A single run of a search (holding ``search.csv``) without
``--metric`` is drawn by :func:`jaxtrainer.commands._search_plot.plot_search`: each
trial's result against each hyperparameter. A single run of a multi-objective
search (holding ``front.csv``, :class:`~jaxtrainer.population.FrontReport`)
without ``--metric`` is drawn as its last population's Pareto front
(:func:`jaxtrainer.population.front_report.draw_front`).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import sys
import textwrap
from typing import Any

import numpy as np

from jaxtrainer._arguments import did_you_mean, expand_path
from jaxtrainer._formatting import fixed
from jaxtrainer.rundir import _run_kind as run_kind
from jaxtrainer.rundir import run_layout
from jaxtrainer.rundir._run_kind import RunKind
from jaxtrainer.rundir.storage import StorageError


def read_curve(run_dir: str | os.PathLike, metric: str, x: str = "env_steps") -> tuple[np.ndarray, np.ndarray]:
    """``(x_values, metric_values)`` from ``run_dir/metrics.csv`` (rows where
    both are set and finite), sorted by x; a repeated x keeps the last row.

    Raises:
      FileNotFoundError: no ``metrics.csv`` in ``run_dir``.
      KeyError: the file has no column ``metric`` or ``x``, listing the columns.
    """
    path = os.path.join(os.fspath(run_dir), run_layout.METRICS_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no metrics.csv (is {run_dir} a run directory?)")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        for name in (metric, x):
            if name not in columns:
                raise KeyError(f"{path} has no column {name!r}{did_you_mean(name, columns) or ';'} "
                               f"columns: {', '.join(columns)}")
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


SKIPPED_DIRS = (run_layout.CHECKPOINTS_DIR, run_layout.TENSORBOARD_DIR, run_layout.WANDB_DIR)
"""Directories of a run that hold no runs: not searched under a root."""


def _natural(name: str) -> list[Any]:
    """Sort key putting ``version_2`` before ``version_10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def find_runs(paths: list[str]) -> list[tuple[str, str]]:
    """``(run_dir, label)`` for every run that ``paths`` name: a path holding
    ``metrics.csv`` is one run (labelled by its name, or its last two path parts
    where names repeat); any other directory is a root, searched below for
    directories holding ``metrics.csv`` (not inside a run's ``checkpoints``,
    ``tensorboard`` or ``wandb``), each labelled by its path relative to the
    root (prefixed by the root's name when several paths are given), in
    natural order (``version_2`` before ``version_10``). A path with no
    ``metrics.csv`` in it or below it (a run stopped before its first log
    holds only ``config.yaml``) is skipped, as a root skips such directories,
    with one line on stderr naming it, where another path holds runs.

    Raises:
      FileNotFoundError: a path that does not exist, or no path with a
        ``metrics.csv`` in it or below it (naming the first).
    """
    found: list[tuple[str, str, bool]] = []  # run dir, relative label (or ""), under a root
    empty: list[str] = []  # paths with no metrics.csv in or below them
    for path in paths:
        if os.path.exists(os.path.join(path, run_layout.METRICS_FILE)):
            found.append((path, "", False))
            continue
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path}: no such run directory or root")
        runs = []
        for directory, subdirs, files in os.walk(path):
            subdirs[:] = sorted((d for d in subdirs if d not in SKIPPED_DIRS), key=_natural)
            if run_layout.METRICS_FILE in files:
                runs.append(directory)
                subdirs[:] = []  # a run holds no runs
        if not runs:
            empty.append(path)
            continue
        prefix = os.path.basename(os.path.normpath(path)) if len(paths) > 1 else ""
        found += [(r, os.path.join(prefix, os.path.relpath(r, path)) if prefix
                   else os.path.relpath(r, path), True) for r in runs]
    if empty and not found:
        raise FileNotFoundError(f"{empty[0]}: no metrics.csv in it or below it (is it a run "
                                "directory or a root of runs?)")
    for path in empty:
        print(f"jaxtrainer plot: skipped {path}: no metrics.csv in it or below it (a run "
              "stopped before its first log)", file=sys.stderr, flush=True)
    names = {d: os.path.basename(os.path.normpath(d)) for d, _, under in found if not under}
    repeated = len(set(names.values())) < len(names)
    labels = []
    for d, label, under in found:
        if not under:  # version_0 of several roots: add the parent
            label = os.path.join(*os.path.normpath(d).split(os.sep)[-2:]) if repeated else names[d]
        labels.append((d, label))
    return labels


SWEEP_BAND_REPS = 1000
"""Bootstrap resamples of a sweep plot's confidence band (at every x value at once)."""


def figure_format(output: str | os.PathLike) -> str:
    """The format a figure is written in at ``output``: its suffix's, where
    matplotlib writes that format (``png``, ``pdf``, ``svg``, ...:
    ``FigureCanvasAgg.get_supported_filetypes()``).

    Raises:
      ValueError: a suffix matplotlib does not write, or none (naming the path
        and the suffixes it writes).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    types = FigureCanvasAgg.get_supported_filetypes()
    suffix = os.path.splitext(os.fspath(output))[1]
    if suffix[1:].lower() not in types:
        raise ValueError(f"-o {os.fspath(output)}: a figure is written in the format its file "
                         f"name ends in: {', '.join(f'.{t}' for t in types)}; not "
                         f"{suffix or 'a name without suffix'!r} (e.g. -o curves.png)")
    return suffix[1:].lower()


def check_output(output: str | os.PathLike) -> str:
    """Check a figure can be written at ``output`` (:func:`figure_format`, and
    :func:`jaxtrainer.rundir.storage.check_writable`; missing folders are
    made when it is written); returns its format.

    Raises:
      ValueError: a suffix of no figure format.
      StorageError: a directory, or a folder that takes no new file.
    """
    from jaxtrainer.rundir.storage import check_writable

    if os.path.isdir(output):
        raise ValueError(f"-o {os.fspath(output)}: it is a directory; expected a file name such "
                         f"as {os.path.join(os.fspath(output), 'curves.png')}")
    kind = figure_format(output)
    check_writable(output, "the figure", make_dirs=True)
    return kind


LEGEND_FONT = 8
"""Font size (points) of a figure's legend."""


def _wrapped(text: str, inches: float, points: float) -> str:
    """``text`` broken at spaces into lines of at most ``inches`` at a font of
    ``points`` (a character taken as 0.6 of the size, wider than DejaVu Sans's mean)."""
    return textwrap.fill(text, width=max(20, int(inches * 72 / (0.6 * points))),
                         break_long_words=False, break_on_hyphens=False)


def _save(fig: Any, ax: Any, output: str) -> None:
    """Grid, legend and layout, then the figure at ``output`` in the format of
    its suffix (:func:`figure_format`; its folder made). The legend goes below
    the axes, each label wrapped to the figure's width, the figure made taller
    by its lines; the y label is wrapped to the axes' height: nothing is drawn
    past the canvas (``fig`` has the constrained layout)."""
    ax.grid(alpha=0.3)
    label = ax.yaxis.label
    ax.set_ylabel(_wrapped(label.get_text(), 0.6 * fig.get_figheight(), label.get_fontsize()))
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        labels = [_wrapped(t, 0.92 * fig.get_figwidth(), LEGEND_FONT) for t in labels]
        lines = sum(t.count("\n") + 1 for t in labels)
        fig.set_figheight(fig.get_figheight() + lines * 1.6 * LEGEND_FONT / 72)
        fig.legend(handles, labels, loc="outside lower center", fontsize=LEGEND_FONT)
    save_figure(fig, output)


def save_figure(fig: Any, output: str) -> None:
    """Lay out ``fig`` and write it at ``output`` in the format of its suffix
    (:func:`figure_format`), its folder made; the figure is closed."""
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, format=figure_format(output))
    plt.close(fig)


def plot_sweep(run_dir: str, output: str, metric: str = "train/episode_return",
               x: str = "env_steps", title: str | None = None,
               reps: int = SWEEP_BAND_REPS) -> dict[str, Any]:
    """Write a figure of one sweep run at ``output`` (in the format of its
    suffix, :func:`figure_format`): per configuration (``sweep_members.csv``),
    the interquartile mean over its seeds of ``member/<i>/<metric>`` against
    ``x`` with a 95% stratified-bootstrap confidence band (rliable's
    ``get_interval_estimates``, percentile method; the IQM at each x value is
    ``scipy.stats.trim_mean(values, 0.25)``, rliable's ``aggregate_iqm``),
    labelled ``name=value ... (n seeds)``. ``x="env_steps"`` is drawn per member
    (the run's ``env_steps`` over its member count).

    Returns:
      ``{"x": float64[T], "configs": labels, "iqm", "mean", "low", "high":
      float64[K, T]}`` for the ``K`` configurations on the x values of the
      shortest member curve, and ``"runs"``: the labels.

    Raises:
      FileNotFoundError: ``run_dir`` holds no ``sweep_members.csv`` or ``metrics.csv``.
      ValueError: ``output``'s suffix is no figure format, or no member logged
        ``member/<i>/<metric>``.
    """
    figure_format(output)  # before reading the run
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import trim_mean

    from jaxtrainer.population.summary import interval_estimates, read_members

    members = read_members(run_dir)
    if members is None:
        raise FileNotFoundError(f"{run_dir}: no sweep_members.csv (is it a sweep run?)")
    names = [k for k in members[0] if k not in ("member", "config", "seed")]
    curves: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for m in members:
        try:
            xs, vs = read_curve(run_dir, f"member/{m['member']}/{metric}", x)
        except KeyError:
            continue
        if len(xs):
            curves.setdefault(m["config"], []).append((xs / len(members) if x == "env_steps" else xs, vs))
    if not curves:
        raise ValueError(f"no member of the sweep in {run_dir} logged member/<i>/{metric}")
    end = min(c[0][-1] for group in curves.values() for c in group)
    grid = np.unique(np.concatenate([c[0][c[0] <= end] for g in curves.values() for c in g]))
    labels, rows = [], {"iqm": [], "mean": [], "low": [], "high": []}
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120, layout="constrained")
    for config in sorted(curves):
        ys = np.stack([np.interp(grid, xs, vs) for xs, vs in curves[config]])  # [seeds, T]
        _, band = interval_estimates(ys[:, None, :], lambda s: trim_mean(
            s.reshape(-1, s.shape[-1]), 0.25, axis=0), reps=reps)
        iqm = trim_mean(ys, 0.25, axis=0)
        first = next(m for m in members if m["config"] == config)
        label = " ".join(f"{n}={first[n]:g}" for n in names) or metric
        labels.append(f"{label} ({len(ys)} seeds)")
        line, = ax.plot(grid, iqm, lw=2, label=labels[-1], marker="o" if len(grid) == 1 else None)
        ax.fill_between(grid, band[0], band[1], color=line.get_color(), alpha=0.25)
        if len(grid) == 1:  # one evaluation per member: the IQM and its interval as a point
            ax.errorbar(grid, iqm, yerr=[np.maximum(iqm - band[0], 0), np.maximum(band[1] - iqm, 0)],
                        color=line.get_color(),
                        capsize=4)
        for key, value in zip(rows, (iqm, ys.mean(0), band[0], band[1]), strict=True):
            rows[key].append(value)
    ax.set_xlabel("env steps per member" if x == "env_steps" else x)
    ax.set_ylabel(f"{metric} (IQM over seeds, 95% CI)")
    ax.set_title(title or f"{metric}: sweep of {len(members)} members")
    _save(fig, ax, output)
    return {"x": grid, "configs": labels, "runs": labels,
            **{k: np.stack(v) for k, v in rows.items()}}


def group_runs(runs: list[tuple[str, str]]) -> list[tuple[RunKind, list[tuple[str, str]]]]:
    """``runs`` (``(run_dir, label)``, :func:`find_runs`) grouped by recipe,
    environment and kind (:func:`jaxtrainer.rundir._run_kind.of_run`) and by
    their settings beyond the seed (:func:`jaxtrainer.rundir._run_kind.settings`:
    runs of other budgets or hyperparameters are never one mean; a run that
    records no settings joins the first group of its kind): ``[(identity,
    [(run_dir, label), ...]), ...]``, groups in the order of their first run;
    where one identity has several groups, each identity's ``settings`` name
    what differs between them."""
    groups: dict[tuple[RunKind, frozenset | None], list[tuple[str, str]]] = {}
    for run_dir, label in runs:
        kind, found = run_kind.of_run(run_dir), run_kind.settings(run_dir)
        key = (kind, None if found is None else frozenset(found.items()))
        if found is None:  # nothing says it differs: with the first of its kind
            key = next((k for k in groups if k[0] == kind), key)
        groups.setdefault(key, []).append((run_dir, label))
    out = []
    for (kind, found), members in groups.items():
        others = [dict(f) for k, f in groups if k == kind and f is not None]
        if len(others) > 1 and found is not None:
            mine = dict(found)
            differs = sorted(n for n in set().union(*others) if len({o.get(n) for o in others}) > 1)
            kind = kind._replace(settings=tuple((n, mine.get(n, "-")) for n in differs))
        out.append((kind, members))
    return out


def x_label(x: str, sweeps: bool) -> str:
    """The x axis's label: ``x``, or for ``env_steps`` with sweeps among the runs
    ``"env steps per member"`` (a sweep's environment steps over its members)."""
    if x != "env_steps":
        return x
    return "env steps per member (sweeps, searches)" if sweeps else "env_steps"


def _group_curves(kind: RunKind, runs: list[tuple[str, str]], metric: str,
                  x: str) -> dict[str, Any] | None:
    """One group's curves (a sweep's env steps per member) and their mean, min
    and max on the x values where every run has data (from the latest first
    value to the earliest last one: no run is extended past its own points;
    runs that share no such step: up to the shortest run); None when none
    logged ``metric``. A run with one value (stopped at its first log) is
    drawn but left out of the mean when other runs have a line
    (``"left_out"``): it would cut every curve to its one step."""
    scale = kind.members if x == "env_steps" and kind.kind != run_kind.SINGLE else 1
    curves = [(label, xs / scale, vs) for label, (xs, vs) in
              ((label, read_curve(d, metric, x)) for d, label in runs) if len(xs)]
    if not curves:
        return None
    averaged = [c for c in curves if len(c[1]) > 1] or curves
    start, end = max(c[1][0] for c in averaged), min(c[1][-1] for c in averaged)
    grid = np.unique(np.concatenate([c[1][(c[1] >= start) & (c[1] <= end)] for c in averaged]))
    if not len(grid):  # no step where every run has points: up to the shortest run, as before
        grid = np.unique(np.concatenate([c[1][c[1] <= end] for c in averaged]))
    ys = np.stack([np.interp(grid, xs, vs) for _, xs, vs in averaged])  # [runs, len(grid)]
    final = _final_evaluations(runs, x, scale) if metric == TRAIN_RETURN else []
    return {"label": kind.label(), "kind": kind, "metric": metric, "curves": curves,
            "final": final, "runs": [c[0] for c in curves],
            "left_out": [c[0] for c in curves if not any(c is a for a in averaged)],
            "x": grid, "mean": ys.mean(0), "low": ys.min(0), "high": ys.max(0)}


RUNS_IN_LEGEND = 6
"""Up to this many runs in a figure, each run's thin line has a legend entry;
above it only the groups' means and bands do (the legend stays readable)."""


def _draw_groups(groups: list[dict[str, Any]], output: str, metric: str, xlabel: str,
                 title: str | None) -> list[str]:
    """Draw ``groups`` (:func:`_group_curves`) into ``output``; returns the
    legend's labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120, layout="constrained")
    name_runs = sum(len(g["curves"]) for g in groups) <= RUNS_IN_LEGEND
    for i, g in enumerate(groups):
        color = f"C{i % 10}" if len(groups) > 1 else "black"
        for name, xs, vs in g["curves"]:
            ax.plot(xs, vs, lw=0.8, alpha=0.6, label=name if name_runs else "_nolegend_",
                    marker="o" if len(xs) == 1 else None,  # one point: a dot, not nothing
                    **({"color": color} if len(groups) > 1 else {}))
        head = f"{g['label']}: " if len(groups) > 1 else ""
        averaged = len(g["runs"]) - len(g["left_out"])
        ax.plot(g["x"], g["mean"], lw=2.2, color=color, label=f"{head}mean of {averaged} run(s)",
                marker="o" if len(g["x"]) == 1 else None)
        if averaged > 1:
            ax.fill_between(g["x"], g["low"], g["high"], color=color if len(groups) > 1 else "gray",
                            alpha=0.2, label=f"{head}min-max over runs")
        if g["final"]:
            ax.scatter([f[1] for f in g["final"]], [f[2] for f in g["final"]], marker="*", s=120,
                       color=color if len(groups) > 1 else "C3", zorder=3,
                       label=f"{head}{EVAL_RETURN} at the end ({_final_eval(g)})")
    ax.set_xlabel(xlabel)
    finals = any(g["final"] for g in groups)
    ax.set_ylabel(f"{metric} (line), {EVAL_RETURN} (star)" if finals else metric)
    ax.set_title(title or metric)
    labels = ax.get_legend_handles_labels()[1]
    _save(fig, ax, output)
    return labels


def _one_value_each(groups: list[dict[str, Any]], metric: str, x: str) -> str:
    """Why a figure of ``groups`` would show no line: every run has one value."""
    where = ", ".join(f"{name} at {x}={xs[0]:g}" for g in groups for name, xs, _ in g["curves"])
    hint = (" (a run that evaluated only at its end: set trainer.eval_every_n_steps to "
            "evaluate during training)" if metric.startswith("eval/") else "")
    return (f"nothing to plot: {metric!r} has one value in each run ({where}){hint}; "
            "no figure written")


def _columns(run_dir: str) -> list[str]:
    with open(os.path.join(run_dir, run_layout.METRICS_FILE), newline="") as f:
        return next(csv.reader(f), [])


EVAL_RETURN = "eval/episode_return"
"""What a recipe's last line prints (``eval/episode_return=<v> run_dir=<dir>``):
drawn as a star at each RL run's last evaluation."""

TRAIN_RETURN = "train/episode_return"


def _headline(run_dir: str) -> str:
    """The run's headline metric, the one its progress line shows:
    :func:`jaxtrainer.rundir._run_kind.headline_metric` of its ``metrics.csv``
    columns (an RL run's ``train/episode_return``, whatever its evaluations,
    whose last evaluation :func:`plot_runs` draws as a star; an evolution
    strategy's fitness, a population's best, another module's loss).

    Raises:
      ValueError: it logs no episode return, fitness or loss (naming its columns).
    """
    columns = _columns(run_dir)
    found = run_kind.headline_metric(columns)
    if found is None:
        raise ValueError(f"{os.path.join(run_dir, run_layout.METRICS_FILE)} has no episode "
                         f"return, fitness or loss column to draw by default; columns: "
                         f"{', '.join(columns)}; name one with --metric")
    return found


def _final_evaluations(runs: list[tuple[str, str]], x: str,
                       scale: float) -> list[tuple[str, float, float]]:
    """``(label, x, eval/episode_return)`` of the last evaluation of each run in
    ``runs`` that was evaluated (the value its recipe's last line printed), x
    divided by ``scale``."""
    out = []
    for run_dir, label in runs:
        try:
            xs, vs = read_curve(run_dir, EVAL_RETURN, x)
        except KeyError:
            continue
        if len(xs):
            out.append((label, float(xs[-1]) / scale, float(vs[-1])))
    return out


def default_x(run_dirs: list[str]) -> str:
    """``env_steps``, or ``step`` where no run counts environment steps (a
    module that uses no environment logs ``env_steps`` 0 throughout)."""
    for run_dir in run_dirs:
        with open(os.path.join(run_dir, run_layout.METRICS_FILE), newline="") as f:
            for row in csv.DictReader(f):
                try:
                    if float(row.get("env_steps") or 0.0) != 0.0:
                        return "env_steps"
                except ValueError:
                    continue
    return "step"


def plot_runs(run_dirs: list[str], output: str, metric: str | None = None,
              x: str | None = None, title: str | None = None) -> dict[str, Any]:
    """Write a figure of ``metric`` against ``x`` at ``output``, in the format
    of its suffix (:func:`figure_format`). Without ``metric``, each run draws
    the headline metric of its kind, the one its progress line shows
    (:func:`_headline`: every RL agent its ``train/episode_return``, however
    often it was evaluated, with its last evaluation, the value its recipe's
    last line printed, as a star (``"final"``); an evolution strategy's
    ``fitness/mean``, a PBT population's or search's best, ``fitness/max``,
    another module's loss). Without ``x``, ``env_steps``, or ``step`` where no
    run counts environment steps (:func:`default_x`).
    Runs are grouped by recipe, environment, kind and settings beyond the seed
    (:func:`group_runs`); per group, every run thin
    (labelled as :func:`find_runs` names it) and the mean over its runs thick
    with a min-max band, one colour a group; above :data:`RUNS_IN_LEGEND` runs
    the thin lines have no legend entry. A sweep's ``env_steps`` are drawn
    per member (the run's environment steps over its members), as
    :func:`plot_sweep` draws them. ``run_dirs`` are run directories or roots of
    runs (see :func:`find_runs`); one sweep run alone is drawn by :func:`plot_sweep`.

    Returns:
      ``{"groups": [{"label", "metric", "runs", "left_out", "final", "x", "mean", "low",
      "high"}, ...]}`` (``final``: ``[(label, x, eval/episode_return)]``, each evaluated
      run's last evaluation, where ``train/episode_return`` is drawn)
      (the arrays float64, on the x values of the group's shortest run; ``x`` in env
      steps per member for sweeps; ``left_out``: runs of one value drawn but not
      averaged, when others have a line), ``"runs"``: every run drawn (runs that never
      logged ``metric`` are left out), ``"x_label"``, ``"x_column"`` (the column drawn
      on x), ``"legend"`` (its
      labels), ``"metric"`` (the metrics drawn, `` / `` between them); with one group, also its
      ``"x"``, ``"mean"``, ``"low"`` and ``"high"``.

    Raises:
      FileNotFoundError: a path is neither a run nor a root of runs.
      ValueError: ``output``'s suffix is no figure format (before any run is
        read), a run without ``metric`` logs no headline metric, no run has a
        value of ``metric``, or each has one value only (nothing to draw a line
        through); no file is written.
    """
    run_dirs, output = [expand_path(d) for d in run_dirs], expand_path(output)
    figure_format(output)
    if len(run_dirs) == 1 and os.path.exists(os.path.join(run_dirs[0], run_layout.SWEEP_MEMBERS_FILE)):
        x = x or "env_steps"
        out = plot_sweep(run_dirs[0], output, metric or _headline(run_dirs[0]), x, title)
        return {**out, "metric": metric or _headline(run_dirs[0]), "x_column": x}  # a line a configuration
    runs = find_runs(list(run_dirs))
    x = x or default_x([d for d, _ in runs])
    found = group_runs(runs)
    groups = [g for g in (_group_curves(kind, runs, metric or _headline(runs[0][0]), x)
                          for kind, runs in found) if g]
    if not groups:
        wanted = metric or " / ".join(dict.fromkeys(_headline(runs[0][0]) for _, runs in found))
        raise ValueError(f"no run in {run_dirs} logged {wanted!r}")
    drawn = " / ".join(dict.fromkeys(g["metric"] for g in groups))
    if all(len(xs) < 2 for g in groups for _, xs, _ in g["curves"]):
        raise ValueError(_one_value_each(groups, drawn, x))
    xlabel = x_label(x, any(g["kind"].kind != run_kind.SINGLE for g in groups))
    legend = _draw_groups(groups, output, drawn, xlabel, title)
    out: dict[str, Any] = {"groups": [{**{k: g[k] for k in ("label", "metric", "runs", "left_out",
                                                             "final", "x", "mean", "low", "high")},
                                       "members": g["kind"].members} for g in groups],
                           "runs": [r for g in groups for r in g["runs"]], "x_label": xlabel,
                           "legend": legend, "metric": drawn, "x_column": x}
    if len(groups) == 1:
        out.update({k: groups[0][k] for k in ("x", "mean", "low", "high")})
    return out


def default_output(run_dirs: list[str]) -> str:
    """``curves.png`` in the folder the paths share (the run directory or root
    when one is given), so that plots of different runs never overwrite one
    file of the current directory.

    Raises:
      FileNotFoundError: the paths share no existing folder (name ``-o``).
    """
    base = os.path.commonpath([os.path.abspath(expand_path(d)) for d in run_dirs])
    if not os.path.isdir(base):
        raise FileNotFoundError(f"{base} is not a folder to write curves.png into: name the "
                                "figure with -o FILE")
    return os.path.join(base, "curves.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jaxtrainer plot",
                                     description="Learning curves (mean and spread over runs) from metrics.csv.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories (version_N) or roots: every run below a root")
    parser.add_argument("-o", "--output", default=None,
                        help="figure to write, in the format its name ends in (.png, .pdf, "
                             ".svg, ...; default: curves.png in the run directory or root "
                             "given, or in the folder the given paths share)")
    parser.add_argument("--metric", default=None,
                        help="column to plot (default: the headline metric its progress line "
                             "shows, one for every run of a kind: train/episode_return of an "
                             "RL run, however often it was evaluated, its last evaluation as a "
                             "star; fitness/mean of an evolution strategy, fitness/max of PBT, "
                             "another module's loss; a search run without --metric: each "
                             "trial's result against its hyperparameters; --metric "
                             "eval/episode_return draws the evaluations)")
    parser.add_argument("--x", default=None, help="x-axis column (env_steps or step; default: "
                                                  "env_steps, or step where no run counts "
                                                  "environment steps)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    try:
        for path in map(expand_path, args.run_dirs):  # a path that is not there, said first
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path}: no such run directory or root")
        args.output = expand_path(args.output) if args.output else default_output(args.run_dirs)
        check_output(args.output)  # before any run is read
        if args.metric is None and len(args.run_dirs) == 1 and os.path.exists(
                os.path.join(expand_path(args.run_dirs[0]), run_layout.SEARCH_FILE)):
            from jaxtrainer.commands import _search_plot as search_plot

            found = search_plot.plot_search(expand_path(args.run_dirs[0]), args.output, args.title)
            print(search_plot.report(found, args.output))
            return 0
        front = os.path.join(expand_path(args.run_dirs[0]), run_layout.FRONT_FILE)
        if args.metric is None and len(args.run_dirs) == 1 and os.path.exists(front):
            from jaxtrainer.population.front_report import draw_front, read_front

            rows = read_front(front)
            draw_front(rows, args.output, args.title)
            print(f"wrote {args.output}: the population of {front} (generation "
                  f"{rows[0]['generation']:.0f}), {sum(r['rank'] == 0 for r in rows)} members "
                  "in the first front")
            return 0
        out = plot_runs(args.run_dirs, args.output, args.metric, args.x, args.title)
    except (FileNotFoundError, KeyError, ValueError, StorageError) as e:
        print(f"jaxtrainer plot: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    print(report(out, args.output, out["metric"], out["x_column"]))
    return 0


def _final_eval(group: dict[str, Any]) -> str:
    """The group's final evaluations as its recipes' last lines print them:
    ``74.44``, or ``74.44 (mean of 2 runs)``."""
    values = [f[2] for f in group["final"]]
    mean = fixed(float(np.mean(values)))
    return mean if len(values) == 1 else f"{mean} (mean of {len(values)} runs)"


def _final(group: dict[str, Any], x: str) -> str:
    where = "env steps per member" if x == "env_steps" and group.get("members", 1) > 1 else x
    left = group.get("left_out")
    return (f"final mean {group['mean'][-1]:.4g} at {where}={group['x'][-1]:.0f}"
            + (f" (left out of the mean, one value each: {', '.join(left)})" if left else "")
            + (f"; {EVAL_RETURN} at the end {_final_eval(group)}" if group.get("final") else ""))


def report(out: dict[str, Any], output: str, metric: str, x: str) -> str:
    """What ``jaxtrainer plot`` prints about the figure :func:`plot_runs` drew
    (``out``): one line, or with several groups a line per group."""
    if "configs" in out:  # a sweep: one line per configuration
        return (f"wrote {output}: {metric}, IQM over seeds with 95% CIs, of "
                f"{len(out['configs'])} configuration(s) ({', '.join(out['configs'])}), "
                f"against {'env steps per member' if x == 'env_steps' else x}")
    groups = out["groups"]
    if len(groups) == 1:
        g = groups[0]
        return (f"wrote {output}: {metric} over {len(g['runs'])} run(s) ({', '.join(g['runs'])}) "
                f"of {g['label']}, {_final(g, x)}")
    lines = [f"wrote {output}: {metric} of {len(groups)} groups, each its own mean (runs of "
             "another recipe, environment or kind are not averaged together):"]
    lines += [f"  {g['label']}: {len(g['runs'])} run(s) ({', '.join(g['runs'])}), "
              f"{'' if g.get('metric', metric) == metric else g['metric'] + ' '}{_final(g, x)}"
              for g in groups]
    return "\n".join(lines)
