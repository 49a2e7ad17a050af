"""``jaxtrainer launch``: start one multi-process JAX run on this machine.

    jaxtrainer launch --nproc-per-node 2 recipes/ppo.py trainer.strategy=multi_node

Like ``torchrun``: it starts ``N`` copies of ``SCRIPT`` with the environment
``jax.distributed`` needs (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``,
``JAX_PROCESS_ID``; read by :class:`~jaxtrainer.strategies.MultiNodeStrategy`),
prefixes every output line with ``[rank K]`` (gloo's report that every peer
connected is left out, its other lines go to stderr: :func:`gloo_destination`), forwards SIGINT/SIGTERM/SIGUSR1 to every
rank, and when one rank fails stops the others and exits non-zero, ending with
one line per rank: the rank that failed first and its last error line, then
how each other rank ended.
Each rank runs in its own process group, so its children are stopped with it;
nothing is left running when the launcher returns.

Several machines: run it once per machine with the same ``--coordinator``
(process 0's machine) and ``--nnodes M --node-rank R``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO

from jaxtrainer._arguments import CPU_COLLECTIVES_ENV
from jaxtrainer.runtime import _signals as signals

ENV_LOCAL_RANK = "JAXTRAINER_LOCAL_RANK"
ENV_LAUNCHER_PID = "JAXTRAINER_LAUNCHER_PID"
POLL_SECONDS = 0.05
SETTLE_SECONDS = 3.0  # after a rank fails: how long a killed rank may take to be reaped (a large
# JAX process exits slowly under load) before the cause is named


SECOND_SIGNAL_GRACE = 3.0
"""Seconds between forwarding a second SIGINT/SIGTERM to the ranks (each stops
at once, removing partial checkpoint writes) and SIGKILL of those still running."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxtrainer launch",
        description="Start N processes of one jax.distributed run on this machine "
                    "(use the multi_node strategy in SCRIPT).")
    p.add_argument("--nproc-per-node", type=int, required=True, metavar="N",
                   help="processes to start on this machine (one per accelerator, or "
                        "several on CPU)")
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="address of process 0's coordinator service; default 127.0.0.1 "
                        "and a free port (single machine only)")
    p.add_argument("--nnodes", type=int, default=1, metavar="M",
                   help="machines in the run (default 1); needs --coordinator when > 1")
    p.add_argument("--node-rank", type=int, default=0, metavar="R",
                   help="this machine's index, 0..M-1 (default 0; machine 0 hosts process 0)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds a rank waits for the coordinator and the other ranks, and "
                        "the heartbeat timeout after which survivors of a dead rank stop "
                        "(default 300)")
    p.add_argument("--grace", type=float, default=10.0, metavar="S",
                   help="seconds between SIGTERM and SIGKILL when stopping ranks (default 10)")
    p.add_argument("script", metavar="SCRIPT", help="Python script to run in every process")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments passed to SCRIPT")
    return p


GLOO_CONNECTED = re.compile(rb"\[Gloo\] Rank \d+ is connected to (\d+) peer ranks\. "
                            rb"Expected number of connected peer ranks is : (\d+)\s*$")
"""The line gloo's TCP transport writes to the C++ ``std::cout`` of every rank when it
connects (``gloo/transport/tcp/context.cc``, ``printConnectivityInfo``; no setting
turns it off)."""


def gloo_destination(line: bytes, out: IO[bytes], err: IO[bytes]) -> IO[bytes] | None:
    """Where a line a rank wrote to stdout goes: gloo's connection report
    (:data:`GLOO_CONNECTED`) nowhere when every peer connected, to ``err`` with any
    other ``[Gloo]`` line (a rank NOT connected); every other line to ``out``.
    So a run's stdout holds what the script prints (its last line, as a run
    without the launcher's)."""
    if not line.startswith(b"[Gloo] "):
        return out
    found = GLOO_CONNECTED.match(line)
    return None if found and found[1] == found[2] else err


def _pump(stream: IO[bytes], prefix: bytes, out: IO[bytes], lock: threading.Lock,
          last: list[str] | None = None, err: IO[bytes] | None = None) -> None:
    """Copy ``stream`` to ``out`` line by line, each line prefixed; the last
    non-blank line is kept in ``last[0]`` (the error a failing rank printed last).
    ``err``: ``stream`` is a rank's stdout, whose gloo lines go to ``err`` or
    nowhere (:func:`gloo_destination`)."""
    for line in iter(stream.readline, b""):
        to = out if err is None else gloo_destination(line, out, err)
        if to is None:
            continue
        with lock:
            to.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            to.flush()
        if last is not None and line.strip():
            last[:] = [line.decode(errors="replace").strip()]
    stream.close()


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Ranks:
    """The started processes, each the leader of its own process group."""

    def __init__(self) -> None:
        self.procs: dict[int, subprocess.Popen] = {}
        self.threads: list[threading.Thread] = []
        self.last_error: dict[int, list[str]] = {}  # rank -> [its last stderr line]

    def signal_all(self, signum: int, exclude: int | None = None) -> None:
        for rank, proc in self.procs.items():
            if rank == exclude:
                continue
            try:
                os.killpg(proc.pid, signum)  # the rank and anything it started
            except (ProcessLookupError, PermissionError):
                pass

    def running(self) -> list[int]:
        return [r for r, p in self.procs.items() if p.poll() is None]

    def stop(self, grace: float) -> None:
        """SIGTERM every group, SIGKILL whatever is left after ``grace`` seconds."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.running() and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        self.signal_all(signal.SIGKILL)  # also reaps stray children of finished ranks
        for p in self.procs.values():
            p.wait()
        for t in self.threads:
            t.join(timeout=5)


def _coordinator(nproc_per_node: int, coordinator: str | None, nnodes: int, node_rank: int,
                 timeout: float, grace: float) -> str:
    """The checked coordinator address (a free loopback port when not given).

    Raises:
      ValueError: bad sizes, a malformed coordinator, ``nnodes > 1`` without a
        coordinator, or a non-positive timeout.
    """
    if nproc_per_node < 1:
        raise ValueError(f"--nproc-per-node={nproc_per_node}: expected >= 1")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ValueError(f"--nnodes={nnodes} --node-rank={node_rank}: expected 0 <= node-rank < nnodes")
    if timeout <= 0 or grace < 0:
        raise ValueError(f"--timeout={timeout} --grace={grace}: expected timeout > 0, grace >= 0")
    if coordinator is None:
        if nnodes > 1:
            raise ValueError("--nnodes > 1 needs --coordinator HOST:PORT (an address of machine 0 "
                             "that every machine can reach)")
        coordinator = f"127.0.0.1:{free_port()}"
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--coordinator={coordinator!r}: expected HOST:PORT")
    return coordinator


def _start_rank(ranks: _Ranks, rank: int, local: int, env: dict[str, str], command: list[str],
                width: int, lock: threading.Lock) -> None:
    """Start one rank in its own process group, its output lines prefixed with
    ``[rank K]``. ``-m jaxtrainer.commands._launch`` starts jax.distributed, then runs the
    script as ``__main__`` (scripts may use JAX before building a Trainer)."""
    env = dict(env, **{ENV_LOCAL_RANK: str(local)})
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    ranks.procs[rank] = proc
    prefix = f"[rank {rank:>{width}}] ".encode()
    ranks.last_error[rank] = []
    for stream, out, last, err in ((proc.stdout, sys.stdout.buffer, None, sys.stderr.buffer),
                                   (proc.stderr, sys.stderr.buffer, ranks.last_error[rank], None)):
        t = threading.Thread(target=_pump, args=(stream, prefix, out, lock, last, err), daemon=True)
        t.start()
        ranks.threads.append(t)


KILLED_FROM_OUTSIDE = (-signal.SIGKILL,)
"""Exit codes of a rank killed by something else (the OOM killer, a scheduler):
the cause of a failure even when that rank is reaped after the others failed
on the lost connection. A rank that aborts itself (SIGABRT, e.g. a collective
timing out) is a failure like any exit code: the first one seen is blamed."""


def _first_failure(ranks: _Ranks, received: list[int]) -> tuple[int, int] | None:
    """Wait while ranks run; return ``(rank, exit code)`` of the rank to blame
    when one fails (None when all finish well or a signal arrived): a rank
    killed from outside (:data:`KILLED_FROM_OUTSIDE`), else the rank whose
    failure was seen first (the lower rank when seen in the same poll)."""
    seen: dict[int, tuple[float, int]] = {}  # rank -> (when its failure was seen, exit code)

    def poll() -> None:
        now = time.monotonic()
        for rank, proc in ranks.procs.items():
            code = proc.poll()
            if code not in (None, 0) and rank not in seen:
                seen[rank] = (now, code)

    def blame() -> tuple[int, int]:
        rank = min(seen, key=lambda r: (seen[r][1] not in KILLED_FROM_OUTSIDE, seen[r][0], r))
        return rank, seen[rank][1]

    while ranks.running():
        poll()
        if seen and not received:
            # When one rank dies the others soon fail on the lost connection, and
            # one of them may exit before the killed rank is fully reaped: give
            # the ranks a moment to settle before naming one.
            settle = time.monotonic() + SETTLE_SECONDS
            while time.monotonic() < settle and ranks.running() and \
                    not any(code in KILLED_FROM_OUTSIDE for _, code in seen.values()):
                time.sleep(POLL_SECONDS)
                poll()
            return blame()
        time.sleep(POLL_SECONDS)
    poll()  # a failure can hide in the last poll
    return blame() if seen else None


def _failure_lines(ranks: _Ranks, rank: int, code: int) -> list[str]:
    """One line per rank: the rank blamed, why (its exit and the last line it
    printed on stderr), then how every other rank ended; then that no new
    checkpoint was written and how to resume."""
    why = _signal_name(code)
    last = ranks.last_error.get(rank) or []
    lines = [f"rank {rank} failed first ({why})" + (f": {last[0][:300]}" if last else "")]
    for other, proc in ranks.procs.items():
        if other != rank:
            lines.append(f"rank {other} stopped ({_signal_name(proc.returncode)})"
                         if proc.returncode is not None else f"rank {other} still running")
    if len(ranks.procs) > 1:  # a rank told to stop may have said it would checkpoint first
        lines.append("no rank could save a checkpoint after that (saving needs every rank): a "
                     "jaxtrainer run resumes from its last complete one with trainer.ckpt_path=last")
    return lines


def launch(nproc_per_node: int, script: str, args: list[str] | None = None, *,
           coordinator: str | None = None, nnodes: int = 1, node_rank: int = 0,
           timeout: float = 300.0, grace: float = 10.0, python: str | None = None) -> int:
    """Run ``python SCRIPT ARGS`` in ``nproc_per_node`` processes; return the exit status.

    Returns 0 when every rank exits 0; otherwise the first failing rank's exit
    code (``128 + signal`` for a rank killed by a signal, at least 1), after the
    other ranks were stopped (SIGTERM, then SIGKILL after ``grace`` seconds).
    SIGINT/SIGTERM/SIGUSR1 sent to the launcher are forwarded to every rank
    (SIGUSR1: SLURM's warning before the time limit, see :mod:`jaxtrainer.runtime._slurm`); a second
    one (not the same one delivered twice at once, as ``timeout`` does:
    :data:`jaxtrainer.runtime._signals.REPEAT_SECONDS`) is forwarded too (a rank then stops at
    once, leaving its last complete checkpoint and no partial one) and the ranks still running
    :data:`SECOND_SIGNAL_GRACE` seconds later are killed (SIGKILL); a third
    kills them at once. The launcher then returns ``128 + signal``.

    Raises:
      ValueError: bad sizes, a malformed coordinator, ``nnodes > 1`` without a
        coordinator, a non-positive timeout, or a ``script`` that is not a file.
    """
    coordinator = _coordinator(nproc_per_node, coordinator, nnodes, node_rank, timeout, grace)
    if not os.path.isfile(script):
        raise ValueError(f"script {script!r}: no such file (the recipe scripts are in the "
                         "repository's recipes/ folder, not in the installed package)"
                         if not os.path.exists(script) else f"script {script!r} is not a file")
    world = nnodes * nproc_per_node
    seconds = str(max(1, int(round(timeout))))
    print(f"jaxtrainer launch: {nproc_per_node} process(es) on this machine, {world} in total; "
          f"coordinator {coordinator}", file=sys.stderr, flush=True)
    ranks, received, lock = _Ranks(), [], threading.Lock()
    requests = signals.Requests()

    def forward(signum: int, frame) -> None:
        if not requests.add(signum):  # the same request delivered twice at once (`timeout`)
            return
        received.append(signum)
        if len(received) > 2:  # a third: no more waiting
            ranks.signal_all(signal.SIGKILL)
            return
        ranks.signal_all(signum)
        if len(received) == 2:  # a second: each rank stops at once on its own (cleaning up)
            killer = threading.Timer(SECOND_SIGNAL_GRACE, ranks.signal_all, (signal.SIGKILL,))
            killer.daemon = True
            killer.start()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):  # USR1: SLURM's time limit warning
            previous[s] = signal.signal(s, forward)
    command = [python or sys.executable, "-m", "jaxtrainer.commands._launch", script, *(args or [])]
    try:
        for local in range(nproc_per_node):
            rank = node_rank * nproc_per_node + local
            env = dict(os.environ, JAX_COORDINATOR_ADDRESS=coordinator, JAX_NUM_PROCESSES=str(world),
                       JAX_PROCESS_ID=str(rank), JAXTRAINER_INIT_TIMEOUT=seconds,
                       JAXTRAINER_HEARTBEAT_TIMEOUT=seconds, PYTHONUNBUFFERED="1",
                       **{ENV_LAUNCHER_PID: str(os.getpid())})
            _start_rank(ranks, rank, local, env, command, len(str(world - 1)), lock)
        failed = _first_failure(ranks, received)
    finally:
        ranks.stop(grace)
        for s, old in previous.items():
            signal.signal(s, old)
    if received:
        print(f"jaxtrainer launch: stopped by {signal.Signals(received[0]).name}; "
              + ", ".join(f"rank {r}: {_signal_name(p.returncode)}" for r, p in ranks.procs.items()),
              file=sys.stderr, flush=True)
        return 128 + int(received[0])
    if failed is not None:
        rank, code = failed
        for line in _failure_lines(ranks, rank, code):
            print(f"jaxtrainer launch: {line}", file=sys.stderr, flush=True)
        return 128 - code if code < 0 else code
    return 0


def _die_with_launcher(launcher_pid: int) -> None:
    """Linux: have the kernel SIGKILL this rank if the launcher dies (even by
    SIGKILL, when it cannot stop its ranks itself). Best effort elsewhere."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
        signals.exit_at_once(128 + signal.SIGKILL)


def _worker(argv: list[str]) -> None:
    """Inside one rank: initialise ``jax.distributed`` from the launcher's
    environment, then run ``SCRIPT ARGS`` as ``__main__`` (as ``python SCRIPT``
    would).

    A rank that fails exits at once with its status (``signals.exit_at_once``), skipping
    ``jax.distributed``'s shutdown barrier, which would otherwise wait for the
    healthy ranks until the shutdown timeout.
    """
    import runpy
    import traceback

    from jaxtrainer._arguments import check_collectives

    try:  # before JAX is imported: it reads them at import
        check_collectives()
    except ValueError as e:
        print(f"jaxtrainer: {e}", file=sys.stderr, flush=True)
        signals.exit_at_once(2)
    from jaxtrainer.distributed._process import initialize

    if ENV_LAUNCHER_PID in os.environ:
        _die_with_launcher(int(os.environ[ENV_LAUNCHER_PID]))
    script, *args = argv
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    try:
        initialize()
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None or e.code == 0:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    if code:
        signals.exit_at_once(code)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``jaxtrainer launch``; returns the exit status."""
    ns = _parser().parse_args(argv)
    if os.environ.get(CPU_COLLECTIVES_ENV) == "mpi":
        print(f"jaxtrainer launch: {CPU_COLLECTIVES_ENV}=mpi: MPI collectives need processes "
              "that an MPI launcher starts; run mpirun -np N python SCRIPT (or mpirun -np N "
              "jaxtrainer fit ...) instead, or unset it to use gloo", file=sys.stderr)
        return 2
    try:
        return launch(ns.nproc_per_node, ns.script, ns.args, coordinator=ns.coordinator,
                      nnodes=ns.nnodes, node_rank=ns.node_rank, timeout=ns.timeout,
                      grace=ns.grace)
    except ValueError as e:
        print(f"jaxtrainer launch: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # a rank started by launch(); not the user-facing entry point
    _worker(sys.argv[1:])
