"""What an :class:`~jaxtrainer.population.NSGA2` run leaves: its population by front.

``<run>/front.csv`` holds one row per member of the population with finite
objectives: ``generation``, ``member``, ``rank`` (its front, 0 the
non-dominated), ``crowding`` (its crowding distance, ``inf`` at a front's
ends) and ``objective_0 .. objective_<M-1>`` (maximised, as the task returns
them). ``<run>/front.png`` draws it: the first two objectives, the first front
in colour with the boundary of the region it dominates, the other members grey. Both are rewritten at
every evaluation and at the end of ``fit``; the figure also goes to every
logger that shows images (TensorBoard's Images tab, wandb) as ``moo/front``.
``jaxtrainer plot <run>`` draws the same figure from ``front.csv``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxtrainer.loggers.base import Logger
from jaxtrainer.population._report import RunReport
from jaxtrainer.population.nsga2 import NSGA2
from jaxtrainer.rundir import run_layout

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.population.nsga2 import NSGA2State
    from jaxtrainer.trainer import Trainer

TAG = "moo/front"
"""The loggers' tag of the front's figure."""


def front_rows(state: NSGA2State, generation: int) -> list[dict[str, Any]]:
    """The rows of ``front.csv`` (module docstring) for ``state``, host side,
    by front then by the first objective (largest first)."""
    host = jax.device_get(
        {"objectives": state.objectives, "ranks": state.ranks, "crowding": state.crowding}
    )
    objectives = np.asarray(host["objectives"], np.float64)
    rows = []
    for i in np.lexsort((-objectives[:, 0], np.asarray(host["ranks"]))):
        if not np.all(np.isfinite(objectives[i])):
            continue  # an empty slot before generation 0 is told, or a failed member
        rows.append(
            {
                "generation": generation,
                "member": int(i),
                "rank": int(host["ranks"][i]),
                "crowding": float(host["crowding"][i]),
                **{f"objective_{j}": float(v) for j, v in enumerate(objectives[i])},
            }
        )
    return rows


def read_front(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``front.csv`` with numbers as numbers.

    Raises:
      FileNotFoundError: no such file.
      ValueError: it lacks ``rank`` or two ``objective_<j>`` columns.
    """
    import csv

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "rank" not in rows[0] or "objective_1" not in rows[0]:
        raise ValueError(
            f"{path}: expected a front.csv with rank and objective_0, objective_1, ... columns"
        )
    return [{k: float(v) if k != "member" else int(v) for k, v in r.items()} for r in rows]


def draw_front(rows: list[dict[str, Any]], output: str, title: str | None = None) -> None:
    """Write a figure of ``rows`` (:func:`front_rows`) at ``output`` (a PNG, or
    any format matplotlib writes by suffix): ``objective_1`` against
    ``objective_0``, the first front in colour with the boundary of the region
    it dominates, every other member grey.

    Raises:
      ValueError: ``rows`` is empty.
    """
    if not rows:
        raise ValueError("draw_front: no member with finite objectives to draw")
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    points = np.array([[r["objective_0"], r["objective_1"]] for r in rows])
    first = np.array([r["rank"] == 0 for r in rows])
    fig, ax = plt.subplots(figsize=(5, 4), dpi=100)
    if np.any(~first):
        ax.scatter(*points[~first].T, s=10, c="0.7", label="later fronts")
    front = points[first][np.argsort(points[first][:, 0])]
    ax.step(*front.T, where="pre", lw=0.6, c="C0", alpha=0.6)  # the region it dominates
    ax.plot(*front.T, "o", ms=3, c="C0", label=f"first front ({len(front)})")
    ax.set_xlabel("objective 0 (maximised)")
    ax.set_ylabel("objective 1 (maximised)")
    more = len([k for k in rows[0] if k.startswith("objective_")]) > 2
    generation = rows[0].get("generation")
    ax.set_title(
        title
        or (f"generation {generation:.0f}" if generation is not None else "population")
        + (" (first two objectives)" if more else "")
    )
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output)
    plt.close(fig)


class FrontReport(RunReport):
    """Write ``front.csv`` and ``front.png`` of an :class:`~jaxtrainer.population.NSGA2`
    run at every evaluation and at the end of ``fit``, and hand the figure to the
    loggers (module docstring); global-zero process only. The recipes add one
    to every ``nsga2`` run.

    Attributes:
      rows: the rows last written.
    """

    order = -10  # on_fit_end: the figure reaches the loggers (0) before they close

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    reports, does = NSGA2, "writes an NSGA2 run's fronts"

    def on_evaluation_end(
        self, trainer: Trainer, module: Module, metrics: dict[str, float]
    ) -> None:
        if not trainer.state_ahead:
            self._write(trainer)

    def on_fit_end(self, trainer: Trainer, module: Module) -> None:
        self._write(trainer)

    def _write(self, trainer: Trainer) -> None:
        from jaxtrainer.rundir.storage import write_csv

        state = trainer.peek_state()
        if state is None or not trainer.is_global_zero:
            return
        self.rows = front_rows(state, trainer.global_step)
        if not self.rows or trainer.log_dir is None:
            return
        write_csv(os.path.join(trainer.log_dir, run_layout.FRONT_FILE), self.rows)
        figure = os.path.join(trainer.log_dir, run_layout.FRONT_FIGURE)
        draw_front(self.rows, figure)
        for cb in trainer.callbacks:
            if isinstance(cb, Logger):
                cb.image(TAG, figure, trainer.global_step)


__all__ = ["FrontReport", "draw_front", "front_rows", "read_front"]
