"""Where a traced run's device time goes: the XLA ops of a Perfetto trace, by total time.

    jaxtrainer fit sac --config sac_brax.yaml ... callbacks.profiler.steps=[200,400]
    python benchmarks/accelerator/trace_ops.py RUN/tensorboard/plugins/profile/*/*.trace.json.gz

Reads the trace ``jax.profiler`` writes (``ProfilerCallback``'s ``<host>.trace.json.gz``,
or ``perfetto_trace.json.gz``): every complete event on a device's ``XLA Ops`` line
(``/device:TPU:0``, ``/device:GPU:0``, ...) counted by its name (the HLO op: ``fusion.12``,
``copy.3``, ``dot.7``, ...), and grouped by the op's kind (its name without the number).
Prints the device's busy time, the top ``--top`` ops and the kinds, each with its share,
calls and mean duration; ``--json FILE`` writes the same as JSON. A trace without device
op events (a CPU run: XLA's CPU client traces no ops) says so and exits 1.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys


def device_ops(path: str) -> dict[str, list[float]]:
    """``{op name: [durations in µs]}`` of the device ops in the trace at ``path``."""
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    processes, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    ops: dict[str, list[float]] = collections.defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        if not processes.get(e.get("pid"), "").startswith("/device:"):
            continue
        if threads.get((e.get("pid"), e.get("tid"))) != "XLA Ops":
            continue
        ops[e["name"]].append(float(e["dur"]))
    return dict(ops)


def kind(op: str) -> str:
    """The op's kind: its name without XLA's numbering (``fusion.12`` -> ``fusion``)."""
    return re.sub(r"(\.\d+)+$", "", op)


def report(ops: dict[str, list[float]], top: int) -> dict:
    """Busy time, the ``top`` ops and every kind, each with time, share, calls, mean."""
    busy = sum(sum(d) for d in ops.values())
    kinds: dict[str, list[float]] = collections.defaultdict(list)
    for name, durations in ops.items():
        kinds[kind(name)] += durations

    def rows(table: dict[str, list[float]], n: int | None) -> list[dict]:
        ranked = sorted(table.items(), key=lambda kv: -sum(kv[1]))[:n]
        return [{"name": k, "us": sum(d), "share": sum(d) / busy, "calls": len(d),
                 "mean_us": sum(d) / len(d)} for k, d in ranked]

    return {"busy_us": busy, "ops": rows(ops, top), "kinds": rows(kinds, None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a trace.json(.gz) written by jax.profiler")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--json", default=None, help="write the report here as JSON")
    args = parser.parse_args()
    ops = device_ops(args.trace)
    if not ops:
        print(f"{args.trace}: no device op events (a CPU run traces none)", file=sys.stderr)
        raise SystemExit(1)
    result = report(ops, args.top)
    print(f"device busy {result['busy_us'] / 1e3:,.1f} ms")
    for title in ("ops", "kinds"):
        print(f"{'time ms':>10} {'share':>6} {'calls':>7} {'mean us':>9}  {title}")
        for r in result[title]:
            print(f"{r['us'] / 1e3:10.2f} {r['share']:6.1%} {r['calls']:7d} {r['mean_us']:9.1f}  "
                  f"{r['name']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
