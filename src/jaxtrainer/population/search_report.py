"""What a :class:`~jaxtrainer.population.Search` leaves: ``search.csv`` and the best trials.

``<run>/search.csv`` holds one row per trial and rung it reached: ``trial``,
its hyperparameters, ``rung`` (0, 1, ... or ``final``), ``step`` (updates of
its member slot at the rung), ``env_steps`` (the same in env steps per
member), ``fitness`` (the ranked metric averaged since
the previous rung), ``status`` (``continued``, ``stopped`` or, on the final
row, ``running`` while its round goes on, then ``complete`` for a trial that
trained the whole round, ``partial`` for one started in a slot stopped at a
rung: its ``step`` and ``env_steps`` are then the updates it trained itself,
the rest of the round) and ``eval`` (on the final row: the last evaluation of the
members that ran it, taken while they ran: the mean over its seeds; with
several seeds also ``eval_seeds`` and ``eval_iqm`` with its 95%
stratified-bootstrap interval, ``eval_iqm_ci_low``/``eval_iqm_ci_high``). The same rows are rewritten at every evaluation and at
the end of ``fit``, so a stopped run keeps the history up to its last one.
"""

from __future__ import annotations

import csv
import math
import os
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxtrainer.population._report import RunReport
from jaxtrainer.population.search import Search
from jaxtrainer.rundir import run_layout

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.population.search import Search, SearchState
    from jaxtrainer.trainer import Trainer

SEARCH_FILE = run_layout.SEARCH_FILE
_BEST_SHOWN = 5


def trial_evals(state: SearchState, module: Search, evaluation: dict[str, float],
                metric: str = "eval/episode_return") -> dict[int, list[float]]:
    """``{trial: [value per seed]}``: ``evaluation``'s ``member/<i>/<metric>``
    of the members running each trial in ``state`` (host side)."""
    trials = np.asarray(jax.device_get(state.trial))[:module.population_size]
    out: dict[int, list[float]] = {}
    for i, t in enumerate(trials):
        if f"member/{i}/{metric}" in evaluation:
            out.setdefault(int(t), []).append(float(evaluation[f"member/{i}/{metric}"]))
    return out


def _eval_columns(values: list[float] | None, seeds: int) -> dict[str, Any]:
    """A final row's ``eval`` (the mean over seeds) and, with several seeds,
    ``eval_seeds`` and the IQM with its 95% stratified-bootstrap interval
    (rliable, :func:`~jaxtrainer.population.summary.config_statistics`)."""
    from jaxtrainer.population.summary import config_statistics

    out: dict[str, Any] = {"eval": float(np.mean(values)) if values else ""}
    if seeds > 1:
        stats = config_statistics(values) if values else {}
        out["eval_seeds"] = ";".join(f"{v:g}" for v in values or [])
        for name in ("iqm", "iqm_ci_low", "iqm_ci_high"):
            out[f"eval_{name}"] = stats.get(name, "")
    return out


def _current_fitness(host: dict[str, Any], members: list[int]) -> float:
    """The mean of the finite current fitness of ``members`` (``-inf`` without one)."""
    values = [v for v in (host["fitness"][i] for i in members) if np.isfinite(v)]
    return float(np.mean(values)) if values else -math.inf


def search_rows(state: SearchState, module: Search, global_step: int,
                evals: dict[int, list[float]] | None = None) -> list[dict[str, Any]]:
    """Every started trial's rows (module docstring), host side, after
    ``global_step`` updates; ``evals``: ``{trial: [evaluation per seed]}``
    written on the trials' final rows (:func:`trial_evals`)."""
    host = jax.device_get({"table": state.table, "history": state.history,
                           "stopped": state.stopped, "next": state.next_trial, "trial": state.trial,
                           "final": state.final,
                           "total": state.window_total, "count": state.window_count,
                           "fitness": state.fitness})
    # the current fitness (Search.current_fitness), on the host: nothing compiles
    host["fitness"] = np.where(host["count"] > 0,
                               host["total"] / np.maximum(host["count"], 1.0), host["fitness"])
    size, per_step = module.population_size, int(module.module.env_steps_per_step)
    running: dict[int, list[int]] = {}
    for i, t in enumerate(np.asarray(host["trial"])[:size]):
        running.setdefault(int(t), []).append(i)
    length = module.round_steps or max(global_step, 1)
    in_round = global_step - min((global_step - 1) // length, module.rounds - 1) * length
    rows, blank = [], _eval_columns(None, module.seeds)
    for t in range(int(host["next"])):
        hp = {name: float(host["table"][name][t]) for name in module.spaces}
        stop = int(host["stopped"][t])
        for r, value in enumerate(np.asarray(host["history"][t])[:len(module.rungs)]):
            if np.isnan(value) and r != stop:
                continue
            rows.append({"trial": t, **hp, "rung": r, "step": module.rungs[r],
                         "env_steps": module.rungs[r] * per_step, "fitness": float(value),
                         "status": "stopped" if r == stop else "continued", **blank})
        start = module.trial_start(t)
        if stop < 0 and t in running:  # a trial of the last round: its current fitness
            status = "running" if in_round < length else "complete" if start == 0 else "partial"
            rows.append({"trial": t, **hp, "rung": "final", "step": in_round - start,
                         "env_steps": (in_round - start) * per_step,
                         "fitness": _current_fitness(host, running[t]), "status": status,
                         **_eval_columns((evals or {}).get(t), module.seeds)})
        elif not np.isnan(host["final"][t]):  # a trial of an earlier round
            rows.append({"trial": t, **hp, "rung": "final", "step": length - start,
                         "env_steps": (length - start) * per_step, "fitness": float(host["final"][t]),
                         "status": "complete" if start == 0 else "partial",
                         **_eval_columns((evals or {}).get(t), module.seeds)})
    return rows


class SearchReport(RunReport):
    """Write ``search.csv`` of a :class:`~jaxtrainer.population.Search` at every
    evaluation and at the end of ``fit``, and print the best trials
    (:func:`_best_table`) when ``fit`` ends (global-zero process).

    Args:
      metric: the evaluation metric written as ``eval`` (``member/<i>/<metric>``).
      print_table: print the best trials at the end of ``fit``.

    Attributes:
      rows: the rows last written.

    Raises:
      TypeError: in ``setup``, when the module trained is not a ``Search``.
    """

    order = 95  # after the recipes' final evaluation (90), before ModelCheckpoint (100)

    def __init__(self, metric: str = "eval/episode_return", print_table: bool = True) -> None:
        self.metric, self.print_table = metric, print_table
        self.rows: list[dict[str, Any]] = []
        self._evals: dict[int, list[float]] = {}

    reports, does = Search, "reports a jaxtrainer.population.Search run"

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        super().setup(trainer, module, stage)
        self.rows, self._evals = [], {}
        if stage == "fit" and trainer.ckpt_path is not None:  # a resume: the evaluations so far
            self._evals = _read_evals(os.path.join(trainer.log_dir, SEARCH_FILE))

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        if trainer.state_ahead:
            return
        state = trainer.peek_state()
        if state is not None:
            self._evals.update(trial_evals(state, module, metrics, self.metric))
            self._write(trainer, module)

    def on_fit_end(self, trainer: Trainer, module: Module) -> None:
        self._write(trainer, module)
        if self.print_table and trainer.is_global_zero and self.rows:
            print(_best_table(self.rows, list(module.spaces)), flush=True)

    def _write(self, trainer: Trainer, module: Any) -> None:
        from jaxtrainer.rundir.storage import write_csv

        state = trainer.peek_state()
        if state is None or not trainer.is_global_zero:
            return
        self.rows = search_rows(state, module, trainer.global_step, self._evals)
        if self.rows:
            write_csv(os.path.join(trainer.log_dir, SEARCH_FILE), self.rows)


def _read_evals(path: str | os.PathLike) -> dict[int, list[float]]:
    """``{trial: [evaluation per seed]}`` of the final rows of a ``search.csv``
    (``eval_seeds`` where written, else ``eval``; empty without a file)."""
    try:
        with open(path, newline="") as f:
            return {int(r["trial"]): ([float(v) for v in r["eval_seeds"].split(";")]
                                      if r.get("eval_seeds") else [float(r["eval"])])
                    for r in csv.DictReader(f) if r.get("rung") == "final" and r.get("eval")}
    except (OSError, ValueError, KeyError):
        return {}


def _best_table(rows: list[dict[str, Any]], names: list[str], shown: int = _BEST_SHOWN) -> str:
    """The best ``shown`` trials of ``rows`` that were not stopped, as an
    aligned text table (trial, hyperparameters, env steps it trained, fitness,
    eval, and with several seeds the IQM over seeds and its 95% interval),
    ranked as the search ranks them: by fitness (NaN last; ties by evaluation).
    The first row is the trial the recipes' last line and ``jaxtrainer eval
    --member best`` take, when it still runs at the end."""
    final = [r for r in rows if r["rung"] == "final"]

    def down(v: Any) -> float:
        return -v if isinstance(v, float) and np.isfinite(v) else np.inf

    final.sort(key=lambda r: (down(r["fitness"]), down(r["eval"])))
    started = len({r["trial"] for r in rows})
    counts = {status: sum(r["status"] == status for r in final)
              for status in ("complete", "partial", "running")}
    stopped = sum(r["status"] == "stopped" for r in rows)
    iqm = any(isinstance(r.get("eval_iqm"), float) for r in final)
    head = ["trial", *names, "env steps", "fitness", "eval", *(["IQM [95% CI]"] if iqm else [])]
    body = []
    for r in final[:shown]:
        line = [str(r["trial"]), *(f"{r[n]:.4g}" for n in names), f"{r['env_steps']:,}",
                f"{r['fitness']:.2f}", f"{r['eval']:.2f}" if isinstance(r["eval"], float) else "-"]
        if iqm:
            line.append(f"{r['eval_iqm']:.2f} [{r['eval_iqm_ci_low']:.2f}, "
                        f"{r['eval_iqm_ci_high']:.2f}]" if isinstance(r.get("eval_iqm"), float)
                        else "-")
        body.append(line)
    widths = [max(len(c) for c in col) for col in zip(head, *body, strict=False)]
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    lines = [f"search: {started} trials started, {stopped} stopped at a rung, {summary or '0 complete'}"
             f"; the best by fitness:"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body]]
    return "\n".join(lines)
