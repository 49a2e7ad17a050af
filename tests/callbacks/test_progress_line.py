"""RichProgressBar on a terminal: the line fits the terminal's width, keeping the
count against the budget, env steps per second and the ETA at 80 columns."""

import io
import re

import pytest
from rich.console import Console
from rich.progress import Progress

import jaxtrainer as jt
from jaxtrainer.callbacks.progress_line import BAR, FittedLine, _fit_fields
from tests._support import toys

FIELDS = dict(rate="313,498 env steps/s", updates="612.3 updates/s", value="episode_return=182.4")


def _render(width: int, total: int = 51_200, completed: int = 20_480) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    progress = Progress(FittedLine(console, "env steps"), console=console, auto_refresh=False)
    progress.add_task("train", total=total, completed=completed, first=0, **FIELDS)
    console.print(progress.get_renderable())
    return console.file.getvalue().rstrip("\n")


def test_fit_fields_keeps_by_rank_and_gives_the_bar_what_is_left():
    fields = [(3, "label"), (2, BAR), (1, "0123456789")]
    assert _fit_fields(fields, 100) == (["label", BAR, "0123456789"], 40)  # the bar at most 40
    assert _fit_fields(fields, 30) == (["label", BAR, "0123456789"], 13)  # 10 + 30 - (5+1+10+1+10)
    assert _fit_fields(fields, 26) == ([BAR, "0123456789"], 15)  # the label gives way first
    assert _fit_fields(fields, 5) == (["0123456789"], 0)  # rank 1 stays, even too wide
    assert _fit_fields([(1, "a"), (2, ""), (3, "b")], 80) == (["a", "b"], 0)  # empty: skipped


def test_at_80_columns_count_rate_and_eta_survive():
    line = _render(80)
    assert len(line) <= 80, line
    assert "20,480/51,200 env steps" in line
    assert "313,498 env steps/s" in line
    assert re.search(r"ETA \d:\d\d:\d\d", line), line
    assert "updates/s" not in line and "elapsed" not in line  # these go first


@pytest.mark.parametrize("width", [120, 200])
def test_wider_terminals_show_more_and_cut_nothing(width):
    line = _render(width)
    assert len(line) <= width
    assert "20,480/51,200 env steps" in line and "episode_return=182.4" in line
    assert "elapsed" in line and "━" in line
    assert not line.endswith("…")
    if width == 200:
        assert line.startswith("train ") and "612.3 updates/s" in line


@pytest.mark.timeout(120)
def test_a_trainer_draws_the_fitted_line_at_80_columns(run_dir, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    bar = jt.RichProgressBar(plain=False)
    t = toys.trainer(run_dir, max_steps=6, log_every_n_steps=2, callbacks=[bar, jt.CSVLogger()])
    t.fit(toys.EnvCounter())  # 12 env steps per training step
    last = [ln for ln in capsys.readouterr().out.splitlines() if "/72 env steps" in ln][-1]
    assert "72/72 env steps" in last and re.search(r"[\d,]+ env steps/s", last), last
    assert re.search(r"ETA \d:\d\d:\d\d", last) and len(last.strip()) <= 80, last


@pytest.mark.timeout(120)
def test_a_fresh_run_on_a_terminal_counts_elapsed_time_and_the_eta(run_dir):
    """The bar's task starts when training does (a fresh run showed elapsed
    0:00:00 and ETA 0:00:00 throughout): its clock runs and its first count is 0."""
    seen = []

    class Look(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            task = bar._progress.tasks[0]
            seen.append((task.started, task.fields["first"], task.elapsed > 0))

    bar = jt.RichProgressBar(plain=False)
    toys.trainer(run_dir, max_steps=4, log_every_n_steps=2,
                 callbacks=[bar, Look()]).fit(toys.EnvCounter())
    assert seen == [(True, 0, True), (True, 0, True)]
