"""Timing shared by the overhead benchmarks.

* :class:`LoopClock`: wall and CPU seconds of a Trainer's loop, from
  ``on_train_start`` (programs compiled, state ready) to ``on_train_end``.
* :func:`interleaved`: runs every variant ``repeats`` times, alternating the
  order (A B, B A, ...) so a drift in machine speed hits each variant alike.
* :func:`summarise` and :func:`paired_ratio`: medians (robust to the occasional
  slow or fast run on a shared machine), best runs, and the median ratio of
  back-to-back pairs (the headline).
* :func:`use_compilation_cache`: a throwaway persistent compilation cache, so
  repeats after the first skip XLA compiles (compile times are reported from
  each variant's first run, which compiles).
* :func:`thread_cpu` and :func:`cpu_by_group`: CPU seconds of the process's
  threads between two snapshots, by group (``main``: the Python main thread,
  the host loop; ``XLA compute``: XLA:CPU's Eigen worker threads, where
  compiled programs run; ``compile``: our compile threads; ``ours``: our other
  background threads (signals, heartbeats, loggers); ``other``). Linux only
  (``/proc/self/task``); empty elsewhere.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax

import jaxtrainer as jt
from jaxtrainer import metrics as metrics_lib

GROUPS = ("main", "XLA compute", "compile", "ours", "other")


def _group(comm: str, python_name: str | None) -> str:
    if python_name == "MainThread":
        return "main"
    if python_name is not None and python_name.startswith("jaxtrainer"):
        return "compile" if python_name.startswith("jaxtrainer-compile") else "ours"
    if comm.startswith(("tf_XLAEigen", "XLAEigen")):
        return "XLA compute"
    return "other"


def thread_cpu() -> dict[int, tuple[str, float]]:
    """``{thread id: (group, CPU seconds so far)}`` of this process's threads
    (see the module docstring); ``{}`` where ``/proc`` is missing."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            try:  # nanoseconds on the CPU (schedstat), else user + system clock ticks
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    seconds = int(f.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / tick
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (_group(comm, names.get(int(tid))), seconds)
    return out


def cpu_by_group(before: dict[int, tuple[str, float]],
                 after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each group spent between two :func:`thread_cpu` snapshots
    (a thread that ended between them is not counted; one that started is)."""
    groups = dict.fromkeys(GROUPS, 0.0)
    for tid, (group, seconds) in after.items():
        groups[group] += seconds - before.get(tid, (group, 0.0))[1]
    return groups


class Run(NamedTuple):
    seconds: float        # wall-clock seconds of the timed loop
    cpu_seconds: float    # process CPU seconds (all threads) over the same span
    compile_seconds: float
    host_seconds: float = 0.0  # of ``seconds``, not spent waiting for a metrics fetch
    cpu_groups: dict | None = None  # CPU seconds by thread group (cpu_by_group)


class LoopClock(jt.Callback):
    """Wall and CPU seconds from ``on_train_start`` (after waiting for the
    background evaluation compile; over processes, from when they all reach the
    training program) to ``on_train_end`` (after the last state is ready): every
    compiled call, metric fetch and callback of the loop.

    ``host_seconds``: the part of the loop the host spent *not* blocked in
    :func:`jaxtrainer.metrics.rows_to_host` (waiting for the devices to finish a
    call): dispatch, callbacks, loggers. Without run-ahead the devices idle
    during it, so it bounds the loop's overhead directly, unaffected by how fast
    the machine happens to run the compiled program.
    """

    def needs_state(self, trainer, module, step):
        return False  # a clock: log intervals may be fused across it

    def on_train_start(self, trainer, module):
        trainer.wait_for_compilation()
        self.waited = 0.0
        fetch = self._fetch = metrics_lib.rows_to_host
        rendezvous = trainer.rendezvous

        def start_together(name):
            # over processes, the loop starts when they start the program together: one
            # process still compiling is startup, as the compile is on one process
            rendezvous(name)
            self.threads = thread_cpu()
            self.start, self.cpu = time.perf_counter(), time.process_time()

        trainer.rendezvous = start_together

        def timed_fetch(*args):
            start = time.perf_counter()
            try:
                return fetch(*args)
            finally:
                self.waited += time.perf_counter() - start

        metrics_lib.rows_to_host = timed_fetch
        self.threads = thread_cpu()
        self.start, self.cpu = time.perf_counter(), time.process_time()

    def on_train_end(self, trainer, module):
        jax.block_until_ready(trainer.peek_state())  # no copy (reading .state copies)
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = time.process_time() - self.cpu
        self.cpu_groups = cpu_by_group(self.threads, thread_cpu())
        metrics_lib.rows_to_host = self._fetch
        del trainer.rendezvous  # the method again
        self.host_seconds = self.seconds - self.waited


def interleaved(variants: dict[str, Callable[[], Run]], repeats: int) -> dict[str, list[Run]]:
    """Each variant ``repeats`` times, in alternating order."""
    runs: dict[str, list[Run]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            runs[name].append(Run(*variants[name]()))
    return runs


class Summary(NamedTuple):
    median_seconds: float
    median_cpu_seconds: float
    best_seconds: float
    compile_seconds: float  # first run's
    median_host_share: float  # median of host_seconds / seconds
    median_cpu_groups: dict  # {group: median CPU seconds}; {} without thread accounting


def summarise(runs: list[Run]) -> Summary:
    grouped = [r.cpu_groups for r in runs if r.cpu_groups]
    groups = {g: statistics.median(c[g] for c in grouped) for g in GROUPS} if grouped else {}
    return Summary(statistics.median(r.seconds for r in runs),
                   statistics.median(r.cpu_seconds for r in runs),
                   min(r.seconds for r in runs), runs[0].compile_seconds,
                   statistics.median(r.host_seconds / r.seconds for r in runs), groups)


def group_line(label: str, summary: Summary) -> str:
    """``label: main 0.06 s, XLA compute 0.82 s, ...`` (median CPU seconds by
    thread group), or an empty string without thread accounting."""
    if not summary.median_cpu_groups:
        return ""
    return f"  {label} CPU s by thread: " + ", ".join(
        f"{g} {s:.3f}" for g, s in summary.median_cpu_groups.items())


def paired_ratio(ours: list[Run], ref: list[Run]) -> float:
    """Median over repeats of (reference seconds / our seconds), each pair run
    back to back: a slow or fast phase of the machine hits both runs of a pair."""
    return statistics.median(b.seconds / a.seconds for a, b in zip(ours, ref, strict=True))


def use_compilation_cache() -> None:
    """Cache compiled programs in ``$JAX_COMPILATION_CACHE_DIR`` when set (kept between
    runs), else in a temporary directory for this process."""
    cache_dir = os.environ.get("JAX_COMPILATION_CACHE_DIR") or tempfile.mkdtemp(
        prefix="jaxtrainer-bench-")
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


class TrainingReturns(jt.Callback):
    """``train/episode_return`` of every log interval (a mean over the episodes it
    completed) as ``curve``: ``[env_steps, return]`` pairs."""

    def __init__(self) -> None:
        self.curve: list[list[float]] = []

    def needs_state(self, trainer, module, step):
        return False  # metrics only

    def on_train_steps_end(self, trainer, module, metrics):
        if "train/episode_return" in metrics:
            self.curve.append([float(metrics["env_steps"]), float(metrics["train/episode_return"])])


def record_run(path: Path | None, **fields: object) -> None:
    """Add one run's figures (``fields``, the device kind and today's date) to the JSON
    list at ``path``, replacing an earlier run of the same side and seed. Written after
    every run, so a command cut short keeps what finished, and commands that each run one
    side fill one file. ``benchmarks/published.py`` reads these files."""
    if path is None:
        return
    runs = json.loads(path.read_text()) if path.is_file() else []
    runs = [r for r in runs if (r["side"], r["seed"]) != (fields["side"], fields["seed"])]
    runs.append(dict(fields, device=jax.devices()[0].device_kind,
                     date=datetime.date.today().isoformat()))
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in runs) + "\n]\n")  # a run a line
