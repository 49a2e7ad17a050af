"""What a :class:`~jaxtrainer.population.Search` leaves: ``search.csv`` and the best trials.

``<run>/search.csv`` holds one row per trial and rung it reached: ``trial``,
its hyperparameters, ``rung`` (0, 1, ... or ``final``), ``step`` (updates of
its member slot at the rung), ``env_steps`` (the same in env steps per
member), ``fitness`` (the ranked metric averaged since
the previous rung), ``status`` (``continued``, ``stopped`` or, on the final
row, ``complete``) and ``eval`` (on the final row: the last evaluation of the
member running it). The same rows are rewritten at every evaluation and at
the end of ``fit``, so a stopped run keeps the history up to its last one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxtrainer.callbacks.base import Callback

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.population.search import Search, SearchState
    from jaxtrainer.trainer import Trainer

SEARCH_FILE = "search.csv"
BEST_SHOWN = 5


def search_rows(state: SearchState, module: Search, global_step: int,
                evaluation: dict[str, float] | None = None,
                metric: str = "eval/episode_return") -> list[dict[str, Any]]:
    """Every started trial's rows (module docstring), host side, after
    ``global_step`` updates; ``evaluation``: the last evaluation's metrics
    (``member/<i>/<metric>`` per member)."""
    host = jax.device_get({"table": state.table, "history": state.history,
                           "stopped": state.stopped, "next": state.next_trial, "trial": state.trial,
                           "final": state.final,
                           "total": state.window_total, "count": state.window_count,
                           "fitness": state.fitness})
    # the current fitness (Search.current_fitness), on the host: nothing compiles
    host["fitness"] = np.where(host["count"] > 0,
                               host["total"] / np.maximum(host["count"], 1.0), host["fitness"])
    size, per_step = module.population_size, int(module.module.env_steps_per_step)
    running = {int(t): i for i, t in enumerate(np.asarray(host["trial"])[:size])}
    length = module.round_steps or max(global_step, 1)
    in_round = global_step - min((global_step - 1) // length, module.rounds - 1) * length
    rows = []
    for t in range(int(host["next"])):
        hp = {name: float(host["table"][name][t]) for name in module.spaces}
        stop = int(host["stopped"][t])
        for r, value in enumerate(np.asarray(host["history"][t])[:len(module.rungs)]):
            if np.isnan(value) and r != stop:
                continue
            rows.append({"trial": t, **hp, "rung": r, "step": module.rungs[r],
                         "env_steps": module.rungs[r] * per_step,
                         "fitness": float(value), "status": "stopped" if r == stop else "continued",
                         "eval": ""})
        if stop < 0 and t in running:  # a trial of the last round: its current fitness
            i = running[t]
            value = (evaluation or {}).get(f"member/{i}/{metric}", "")
            rows.append({"trial": t, **hp, "rung": "final", "step": in_round,
                         "env_steps": in_round * per_step, "fitness": float(host["fitness"][i]),
                         "status": "complete", "eval": value})
        elif not np.isnan(host["final"][t]):  # a trial of an earlier round
            rows.append({"trial": t, **hp, "rung": "final", "step": length,
                         "env_steps": length * per_step, "fitness": float(host["final"][t]),
                         "status": "complete", "eval": ""})
    return rows


class SearchReport(Callback):
    """Write ``search.csv`` of a :class:`~jaxtrainer.population.Search` at every
    evaluation and at the end of ``fit``, and print the best trials (by the
    final fitness, with their evaluation) when ``fit`` ends (global-zero process).

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
        self._evaluation: dict[str, float] | None = None

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        from jaxtrainer.population.search import Search

        if not isinstance(module, Search):
            raise TypeError(f"SearchReport reports a jaxtrainer.population.Search, got "
                            f"{type(module).__name__}")
        self.rows, self._evaluation = [], None

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._evaluation = dict(metrics)
        if not trainer.state_ahead:
            self._write(trainer, module)

    def on_fit_end(self, trainer: Trainer, module: Module) -> None:
        self._write(trainer, module)
        if self.print_table and trainer.is_global_zero and self.rows:
            print(best_table(self.rows, list(module.spaces)), flush=True)

    def _write(self, trainer: Trainer, module: Any) -> None:
        from jaxtrainer.population.summary import write_csv

        state = trainer.peek_state()
        if state is None or not trainer.is_global_zero:
            return
        self.rows = search_rows(state, module, trainer.global_step, self._evaluation, self.metric)
        if self.rows:
            write_csv(os.path.join(trainer.log_dir, SEARCH_FILE), self.rows)


def best_table(rows: list[dict[str, Any]], names: list[str], shown: int = BEST_SHOWN) -> str:
    """The best ``shown`` complete trials of ``rows`` (by final fitness, NaN
    last) as an aligned text table: trial, hyperparameters, fitness, eval."""
    final = [r for r in rows if r["rung"] == "final"]
    final.sort(key=lambda r: -r["fitness"] if np.isfinite(r["fitness"]) else np.inf)
    started = len({r["trial"] for r in rows})
    head = ["trial", *names, "fitness", "eval"]
    body = [[str(r["trial"]), *(f"{r[n]:.4g}" for n in names), f"{r['fitness']:.2f}",
             f"{r['eval']:.2f}" if isinstance(r["eval"], float) else "-"] for r in final[:shown]]
    widths = [max(len(c) for c in col) for col in zip(head, *body, strict=False)]
    lines = [f"search: {started} trials started, {len(final)} complete; the best by final fitness:"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body]]
    return "\n".join(lines)
