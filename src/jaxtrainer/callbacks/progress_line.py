"""The terminal line of :class:`~jaxtrainer.callbacks.RichProgressBar`: fields
kept by rank to fit the terminal's width.

At 80 columns the count against the budget, env steps per second and the ETA
stay; the label, updates per second, elapsed time, the bar and the metric go
first, in that order.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, RenderableType
from rich.progress import ProgressColumn, Task
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from jaxtrainer.callbacks.progress import duration

BAR = "\0bar"
"""The field :func:`_fit_fields` sizes as the bar."""

_BAR_WIDTH = (10, 40)
"""Least and most columns of the drawn bar."""

_SEPARATOR = " | "
"""Between two text fields (the bar is set off by one space)."""

RANKS = {"count": 1, "rate": 2, "eta": 3, "value": 4, "bar": 5, "elapsed": 6,
         "updates": 7, "label": 8}
"""Which fields stay longest when the line is too wide (1 stays longest)."""


def cells(texts: Sequence[str]) -> list[str]:
    """``texts`` as the cells of the drawn line: runs of text fields joined by
    :data:`_SEPARATOR`, and :data:`BAR` alone (cells are one space apart)."""
    out: list[str] = []
    run: list[str] = []
    for text in texts:
        if text == BAR:
            out += [_SEPARATOR.join(run), BAR] if run else [BAR]
            run = []
        else:
            run.append(text)
    return out + [_SEPARATOR.join(run)] if run else out


def _length(items: Sequence[tuple[int, str]]) -> int:
    drawn = cells([t for _, t in items])
    return sum(_BAR_WIDTH[0] if c == BAR else len(c) for c in drawn) + len(drawn) - 1


def _fit_fields(fields: Sequence[tuple[int, str]], width: int) -> tuple[list[str], int]:
    """The fields of a progress line that fit in ``width`` columns.

    Args:
      fields: ``(rank, text)`` in display order. Taken by rank (1 first),
        each field that still fits is kept (the rank-1 field whatever the
        width); empty texts are skipped; :data:`BAR` stands for the bar.
      width: columns available.

    Returns:
      ``(kept texts in display order, columns of the bar)``: the bar gets the
      columns left over, within :data:`_BAR_WIDTH` (0 when it was dropped).
    """
    given = [(i, rank, text) for i, (rank, text) in enumerate(fields) if text]
    chosen: set[int] = set()
    for i, _, _ in sorted(given, key=lambda item: item[1]):  # rank 1 first; each if it fits
        trial = [(r, t) for j, r, t in given if j in chosen or j == i]
        if not chosen or _length(trial) <= width:
            chosen.add(i)
    kept = [(r, t) for j, r, t in given if j in chosen]
    texts = [t for _, t in kept]
    bar = 0
    if BAR in texts:
        bar = min(_BAR_WIDTH[1], _BAR_WIDTH[0] + max(width - _length(kept), 0))
    return texts, bar


def _line_fields(task: Task, unit: str) -> list[tuple[int, str]]:
    """``(rank, text)`` of every field of ``task``'s line, in display order.

    ``task.fields`` holds ``rate`` (env steps/s or, without env steps,
    updates/s), ``updates`` (updates/s beside env steps/s; may be empty),
    ``value`` (the metric) and ``first`` (``completed`` when training began:
    the ETA is the rest at the mean speed since then).
    """
    total = int(task.total or 0)
    done, elapsed = int(task.completed), task.elapsed or 0.0
    since = done - int(task.fields.get("first", 0))
    eta = f"ETA {duration(elapsed / since * (total - done))}" if since > 0 else "ETA -:--:--"
    return [(RANKS["label"], "train"), (RANKS["bar"], BAR),
            (RANKS["count"], f"{done:,}/{total:,} {unit}"),
            (RANKS["updates"], task.fields.get("updates", "")),
            (RANKS["rate"], task.fields.get("rate", "")),
            (RANKS["elapsed"], f"elapsed {duration(elapsed)}"),
            (RANKS["eta"], eta), (RANKS["value"], task.fields.get("value", ""))]


class FittedLine(ProgressColumn):
    """One column drawing the whole line, fitted to ``console``'s width at
    every refresh (a terminal resized mid-run redraws to its new width).

    Args:
      console: the console the progress display draws on.
      unit: what the count counts (``"env steps"`` or ``"steps"``).
    """

    def __init__(self, console: Console, unit: str) -> None:
        super().__init__()
        self.console, self.unit = console, unit

    def render(self, task: Task) -> RenderableType:
        texts, bar_width = _fit_fields(_line_fields(task, self.unit), self.console.width - 1)
        grid = Table.grid(padding=(0, 1))
        grid.add_row(*(ProgressBar(total=task.total, completed=task.completed, width=bar_width)
                       if cell == BAR else Text(cell, no_wrap=True, overflow="ellipsis")
                       for cell in cells(texts)))
        return grid
