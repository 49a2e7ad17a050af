"""One run over two processes against the same run in one process with two devices.

PPO on CartPole-v1 (4 envs x 128 steps, 4 epochs x 4 minibatches: the ``ppo``
recipe's settings), the same global sizes, seed and number of updates on both
sides:

* **1 process x 2 devices**: ``Trainer(strategy="shard_map", devices=2)`` in one
  Python process with two CPU devices (``--xla_force_host_platform_device_count=2``);
  the gradient all-reduces stay inside the process.
* **2 processes x 1 device**: the same script started by ``jaxtrainer launch
  --nproc-per-node 2`` with ``strategy="multi_node"``: every all-reduce crosses
  processes through gloo over loopback TCP, as it crosses machines on a cluster.
* **2 processes x 1 device, MPI**: the same, started by ``mpirun -np 2`` with
  ``JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi``: the all-reduces go through Open MPI
  (shared memory between processes of one machine). Run when ``MPITRAMPOLINE_LIB``
  names a ``libmpiwrapper.so`` (MPIwrapper built against the ``mpirun`` on PATH);
  otherwise the benchmark says it left this side out.

Each side runs in fresh processes, alternating (A B, B A, ...) with a shared
throwaway compilation cache; the loop is timed from ``on_train_start`` (programs
compiled; over processes, from when they start the program together: a process
still compiling is startup) to ``on_train_end`` (``_timing.LoopClock``), on
process 0. Printed: the
env steps/s of each side (medians), the ratio (two processes / one; also the
median of back-to-back pairs), each side's host share (the part of the loop
not spent waiting for the devices), and the latency of one all-reduce on each
side with the time the run's 20 all-reduces an update account for (one per
minibatch for the gradient, one per epoch for the advantage moments): between
processes that latency, not the loop, sets the speed of this small workload.

    python benchmarks/multiprocess.py [--updates 200] [--repeats 5]
    MPITRAMPOLINE_LIB=/path/libmpiwrapper.so python benchmarks/multiprocess.py  # + MPI
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
UPDATES, REPEATS = 200, 5
ENV_STEPS_PER_UPDATE = 4 * 128


def worker(layout: str, updates: int) -> None:
    """One side's run (in this process, or in each process of a launch); process 0
    prints one JSON line: loop seconds, host seconds, CPU seconds."""
    if layout == "1x2":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_force_host_platform_device_count=2").strip()
    import jax

    sys.path.insert(0, str(HERE.parent))
    from _timing import LoopClock, use_compilation_cache

    import jaxtrainer as jt
    from jaxtrainer.algorithms import PPO, PPOConfig

    strategy, devices = ("shard_map", 2) if layout == "1x2" else ("multi_node", "auto")
    use_compilation_cache()  # then the one shared by every run of the benchmark:
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXTRAINER_BENCH_CACHE"])
    module = PPO(PPOConfig(env="CartPole-v1", total_updates=updates))
    latency = collective_latency(jax)
    clock = LoopClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = jt.Trainer(strategy=strategy, devices=devices, max_steps=updates, log_every_n_steps=10,
                             seed=0, default_root_dir=root, callbacks=[clock],
                             enable_progress_bar=False, enable_checkpointing=False,
                             logger=False)
        trainer.fit(module)
    if jax.process_index() == 0:
        print("RESULT " + json.dumps({"seconds": clock.seconds, "host": clock.host_seconds,
                                      "cpu": clock.cpu_seconds, "latency": latency}), flush=True)


def collective_latency(jax, sizes=(1, 9160), calls=100) -> dict:
    """Seconds per all-reduce over every device of the run (a scalar, and PPO's
    CartPole gradient bucket: 9,160 floats), ``calls`` in one compiled loop."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((jax.device_count(),), ("d",))
    out = {}
    for size in sizes:
        def loop(x):
            def body(_, x):
                return jax.lax.pcast(jax.lax.psum(x, "d") * 0.5, "d", to="varying")
            return jax.lax.fori_loop(0, calls, body, x)

        run = jax.jit(jax.shard_map(loop, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
        x = jax.make_array_from_process_local_data(
            NamedSharding(mesh, P("d")), jnp.ones((jax.local_device_count(), size), jnp.float32))
        x = run(x).block_until_ready()  # compile, connect
        start = time.perf_counter()
        run(x).block_until_ready()
        out[size] = (time.perf_counter() - start) / calls
    return out


LAYOUTS = {"1x2": "1 process x 2 devices", "2x1": "2 processes x 1 device (gloo)",
           "2x1-mpi": "2 processes x 1 device (MPI)"}


def side(layout: str, updates: int, cache: str) -> dict:
    """Run one side in fresh processes; its process 0's RESULT."""
    env = {**os.environ, "JAXTRAINER_BENCH_CACHE": cache}
    script = [str(HERE), "--worker", layout, "--updates", str(updates)]
    rank = [sys.executable, "-m", "jaxtrainer.commands._launch", *script]  # initialises first
    if layout == "1x2":
        cmd = [sys.executable, *script]
    elif layout == "2x1":
        cmd = [sys.executable, "-m", "jaxtrainer", "launch", "--nproc-per-node", "2", *script]
    else:
        env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "mpi"
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", *rank]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError(f"{layout} run failed (status {out.returncode}):\n"
                       f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=UPDATES)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--worker", choices=list(LAYOUTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.updates)
        return
    layouts = list(LAYOUTS)
    if not (os.environ.get("MPITRAMPOLINE_LIB") and shutil.which("mpirun")):
        layouts.remove("2x1-mpi")
        print("2 processes with MPI left out: needs mpirun on PATH and MPITRAMPOLINE_LIB "
              "(a libmpiwrapper.so built against it)", flush=True)
    env_steps = args.updates * ENV_STEPS_PER_UPDATE
    runs: dict[str, list[dict]] = {k: [] for k in layouts}
    with tempfile.TemporaryDirectory(prefix="jaxtrainer-bench-") as cache:
        for layout in layouts:
            side(layout, 5, cache)  # fill the compilation cache
        for r in range(args.repeats):
            for layout in (layouts if r % 2 == 0 else layouts[::-1]):
                runs[layout].append(side(layout, args.updates, cache))
                print(f"repeat {r} {layout}: {env_steps / runs[layout][-1]['seconds']:,.0f} "
                      "env steps/s", flush=True)
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    share = {k: statistics.median(r["host"] / r["seconds"] for r in v) for k, v in runs.items()}
    print(f"\nPPO CartPole-v1, {args.updates} updates ({env_steps:,} env steps), "
          f"{args.repeats} repeats, {os.cpu_count()} CPU cores")
    print(f"{'':<34}{'env steps/s':>12}{'host share':>12}")
    for k in layouts:
        print(f"{LAYOUTS[k]:<34}{env_steps / med[k]:>12,.0f}{share[k]:>12.2%}")
    for k in layouts[1:]:
        paired = statistics.median(a["seconds"] / b["seconds"]
                                   for a, b in zip(runs["1x2"], runs[k], strict=True))
        print(f"ratio ({LAYOUTS[k]} / 1 process): {med['1x2'] / med[k]:.3f} (paired {paired:.3f})")
    per_update = 4 * 4 + 4  # a gradient all-reduce a minibatch, advantage moments an epoch
    for k in layouts:
        lat = {size: statistics.median(r["latency"][str(size)] for r in runs[k])
               for size in ("1", "9160")}
        floor = per_update * lat["9160"] * args.updates
        print(f"all-reduce, {LAYOUTS[k]}: {lat['1'] * 1e6:,.0f} us (1 float), "
              f"{lat['9160'] * 1e6:,.0f} us (9,160 floats); {per_update} an update: "
              f"{floor:.2f} s of the run's {med[k]:.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
