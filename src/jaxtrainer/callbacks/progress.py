"""RichProgressBar: a terminal progress bar drawn with rich, plain lines elsewhere."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from jaxtrainer._formatting import fixed
from jaxtrainer.callbacks.base import Callback
from jaxtrainer.runtime._signals import ACTIVITY

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


def duration(seconds: float) -> str:
    """``H:MM:SS`` (as rich's time columns)."""
    seconds = max(int(round(seconds)), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class RichProgressBar(Callback):
    """Show training progress: global steps (or env steps when the module has
    them) against the budget, updates per second (training steps) and env steps
    per second of the latest log interval, the latest ``metric``, elapsed time
    and the ETA.

    Where stdout is a terminal (or Jupyter) it is a rich live line fitted to
    the terminal's width at every redraw: at 80 columns the count against the
    budget, env steps per second and the ETA stay, and the label, updates per
    second, elapsed time, the bar and the metric give way first, in that order
    (:mod:`jaxtrainer.callbacks.progress_line`)::

        train ━━━━━━━━━━━━ 20,480/51,200 env steps | 612.3 updates/s | 313,498 env steps/s | elapsed 0:00:07 | ETA 0:00:10 | episode_return=182.4

    Elsewhere
    (stdout piped to a file: SLURM, ``nohup``, CI) it prints plain lines
    instead, never cut to the terminal width: one at the first log boundary,
    then one per ``plain_every_n_seconds`` and one at the end, such as::

        jaxtrainer: step 40/100 (40%) | env steps 20,480/51,200 | 612.3 updates/s | 313,498 env steps/s | elapsed 0:00:07 | ETA 0:00:10 | episode_return=182.4

    Elapsed time counts from ``on_train_start`` (compilation excluded); the
    ETA is the steps left at the mean speed since then. Intervals that reach
    the host together (several fused in one call) print one line, the last's.
    Where phase lines are on, a silence of 30 s in any phase gets a ``still
    ...`` line (:class:`~jaxtrainer.runtime._signals.Activity`).

    Only the global-zero process draws. Updated once per log interval, so it
    adds no host synchronisation of its own.

    Args:
      metric: the metric shown beside the bar (its name without ``train/``);
        ``None``: the module's :attr:`~jaxtrainer.Module.headline_metric`
        (``episode_return``, an evolution strategy's ``fitness/mean``, PBT's
        ``fitness/max``).
      refresh_per_second: redraws per second of the rich live display.
      plain: ``None`` picks by stdout (rich's terminal detection, which also
        honours ``FORCE_COLOR`` and ``TTY_COMPATIBLE``); ``True`` always prints
        plain lines, ``False`` always draws the bar.
      plain_every_n_seconds: seconds between plain lines (at log boundaries;
        ``0``: one per log interval).

    Raises:
      ValueError: a negative ``plain_every_n_seconds`` or a ``plain`` that is
        not ``None`` or a bool.
    """

    writes_run_dir = False  # it reads metrics only

    def __init__(self, metric: str | None = None, refresh_per_second: float = 4,
                 plain: bool | None = None, plain_every_n_seconds: float = 30.0) -> None:
        if plain is not None and not isinstance(plain, bool):
            raise ValueError(f"plain={plain!r}: expected None (by stdout), True or False")
        if isinstance(plain_every_n_seconds, bool) or not isinstance(plain_every_n_seconds, (int, float)) \
                or not plain_every_n_seconds >= 0:
            raise ValueError(f"plain_every_n_seconds={plain_every_n_seconds!r}: expected seconds >= 0")
        self.metric = metric
        self.refresh_per_second = refresh_per_second
        self.plain = plain
        self.plain_every_n_seconds = float(plain_every_n_seconds)
        self._progress = None
        self._task = None
        self._use_env_steps, self._members = False, 1
        self._plain_on = False
        self._last_line: str | None = None
        self._printed_step = -1
        self._latest: float | None = None
        self._shown = metric or "train/episode_return"

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._stop()  # a bar an earlier ``fit`` left open (it raised before teardown)

    def _is_plain(self) -> bool:
        if self.plain is not None:
            return self.plain
        from rich.console import Console

        console = Console(file=sys.stdout)
        return not (console.is_terminal or console.is_jupyter)

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        if not trainer.is_global_zero:
            return
        from jaxtrainer.module import counted_members

        self._shown = self.metric or module.headline_metric
        self._use_env_steps = trainer.env_steps_per_step > 0
        self._members = counted_members(module)  # a sweep counts env steps per member
        self._t0 = self._last_print = time.perf_counter()
        self._step0 = trainer.global_step
        self._plain_on, self._last_line, self._printed_step = self._is_plain(), None, -1
        self._latest = None
        if self._plain_on:
            return
        from rich.console import Console
        from rich.progress import Progress

        from jaxtrainer.callbacks.progress_line import FittedLine

        unit = ("env steps" + (" per member" if self._members > 1 else "")
                if self._use_env_steps else "steps")
        total, done = self._env_steps(trainer, trainer.max_steps), self._done(trainer)
        console = Console(file=sys.stdout)
        self._progress = Progress(FittedLine(console, unit), console=console,
                                  refresh_per_second=self.refresh_per_second, transient=False)
        self._progress.start()
        # the task starts now: its clock gives the elapsed time and the ETA
        # (``first``: the count training began at, for a resumed run's ETA)
        self._task = self._progress.add_task("train", total=total, completed=done, first=done,
                                             **self._rates({}), value="")

    def _env_steps(self, trainer: Trainer, steps: int) -> int:
        """``steps`` training steps in the count's unit (env steps per member
        for a sweep, steps without env steps)."""
        return steps * trainer.env_steps_per_step // self._members if self._use_env_steps else steps

    def _done(self, trainer: Trainer) -> int:
        return self._env_steps(trainer, trainer.global_step)

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False  # metrics only: the next interval may run meanwhile

    def _rate(self, metrics: dict[str, float]) -> str:
        ups = metrics.get("steps_per_second")
        if ups is None:
            return ""
        rate = f"{ups:,.1f} updates/s"
        if self._use_env_steps and metrics.get("env_steps_per_second") is not None:
            rate += f" | {metrics['env_steps_per_second']:,.0f} env steps/s"
        return rate

    def _rates(self, metrics: dict[str, float]) -> dict[str, str]:
        """The terminal line's rate fields: ``rate`` env steps/s (updates/s
        without env steps) and ``updates`` updates/s beside it."""
        ups, eps = metrics.get("steps_per_second"), metrics.get("env_steps_per_second")
        updates = f"{ups:,.1f} updates/s" if ups is not None else ""
        if not self._use_env_steps:
            return {"rate": updates, "updates": ""}
        return {"rate": f"{eps:,.0f} env steps/s" if eps is not None else "", "updates": updates}

    def _value(self, metrics: dict[str, float]) -> str:
        """The latest value of ``metric`` (an interval without one, e.g. no
        episode ended in it, keeps the previous value)."""
        value = metrics.get(self._shown)
        if value is not None:
            self._latest = value
        name = self._shown.removeprefix("train/")
        return f"{name}={fixed(self._latest, 1)}" if self._latest is not None else ""

    def plain_line(self, trainer: Trainer, metrics: dict[str, float]) -> str:
        """The plain progress line for ``trainer``'s current step and the
        interval's ``metrics`` (what non-terminal output prints)."""
        step, total = trainer.global_step, trainer.max_steps
        parts = [f"step {step:,}/{total:,} ({100 * step / max(total, 1):.0f}%)"]
        if self._use_env_steps:
            per = " per member" if self._members > 1 else ""
            parts.append(f"env steps{per} {self._done(trainer):,}/{self._env_steps(trainer, total):,}")
        rate = self._rate(metrics)
        if rate:
            parts.append(rate)
        elapsed = time.perf_counter() - self._t0
        done = step - self._step0
        parts.append(f"elapsed {duration(elapsed)}")
        if done > 0:
            parts.append(f"ETA {duration(elapsed / done * (total - step))}")
        value = self._value(metrics)
        if value:
            parts.append(value)
        return "jaxtrainer: " + " | ".join(parts)

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        if self._plain_on:
            self._last_line = self.plain_line(trainer, metrics)
            if trainer.more_metrics_pending and self.plain_every_n_seconds > 0:
                return  # later intervals of this host sync follow at once: the last one speaks
            now = time.perf_counter()
            if self._printed_step < 0 or now - self._last_print >= self.plain_every_n_seconds:
                self._print_plain(trainer)
                self._last_print = now
            return
        if self._progress is None:
            return
        self._progress.update(self._task, completed=self._done(trainer), **self._rates(metrics),
                              value=self._value(metrics))
        ACTIVITY.heard()

    def _print_plain(self, trainer: Trainer) -> None:
        if self._last_line is not None and self._printed_step != trainer.global_step:
            print(self._last_line, flush=True)
            self._printed_step = trainer.global_step
            ACTIVITY.heard()

    def _stop(self) -> None:
        self._plain_on, self._last_line = False, None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        if self._plain_on:
            self._print_plain(trainer)  # the last interval's line, unless just printed
        self._stop()

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        self._stop()

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._stop()
