"""Where a traced run's device time goes: the XLA ops of a Perfetto trace, by total time.

    jaxtrainer fit sac --config sac_brax.yaml ... callbacks.profiler.steps=[200,400]
    python benchmarks/accelerator/trace_ops.py RUN/tensorboard/plugins/profile/*/*.trace.json.gz

Reads the trace ``jax.profiler`` writes (``ProfilerCallback``'s ``<host>.trace.json.gz``,
or ``perfetto_trace.json.gz``): every complete event on a device's ``XLA Ops`` line
(``/device:TPU:0``, ``/device:GPU:0``, ...) counted by its name (the HLO op: ``fusion.12``,
``copy.3``, ``dot.7``, ...), and grouped by the op's kind (its name without the number).
Prints the device's busy time (the sum over ops, which counts a loop's or a
conditional's body twice: once in the loop's own event; and the time any op runs), the
top ``--top`` ops and the kinds, each with its share, calls and mean duration, and for
each top op where it comes from (the first of its events' ``tf_op``, ``name_scope``,
``source`` or ``long_name`` arguments the trace holds); ``--json FILE`` writes the same
as JSON, each top op with its first event's arguments. A trace without device
op events (a CPU run: XLA's CPU client traces no ops) says so and exits 1.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys


def device_ops(path: str, details: dict | None = None,
               spans: list | None = None) -> dict[str, list[float]]:
    """``{op name: [durations in µs]}`` of the device ops in the trace at ``path``;
    ``details`` (if given) gets ``{op name: its first event's args}``, ``spans`` every
    op's ``(start, end)`` in µs."""
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
        if details is not None and e["name"] not in details:
            details[e["name"]] = dict(e.get("args", {}))
        if spans is not None:
            spans.append((float(e.get("ts", 0.0)), float(e.get("ts", 0.0)) + float(e["dur"])))
    return dict(ops)


WHERE = ("tf_op", "name_scope", "source", "long_name")
"""The event arguments that say where an op comes from, in the order looked at."""


def where(args: dict) -> str:
    """Where an op comes from, from its event's ``args`` (``""`` if none says)."""
    return next((str(args[k]) for k in WHERE if args.get(k)), "")


def covered(spans: list[tuple[float, float]]) -> float:
    """µs during which at least one of ``spans`` runs (nested ops counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def kind(op: str) -> str:
    """The op's kind: its name without XLA's numbering (``fusion.12`` -> ``fusion``)."""
    return re.sub(r"(\.\d+)+$", "", op)


def report(ops: dict[str, list[float]], top: int, details: dict | None = None,
           spans: list | None = None) -> dict:
    """Busy time, the ``top`` ops and every kind, each with time, share, calls, mean
    (the ops with their ``details``' arguments and :func:`where`; ``running_us``: the
    time :func:`covered` by ``spans``, if given)."""
    busy = sum(sum(d) for d in ops.values())
    kinds: dict[str, list[float]] = collections.defaultdict(list)
    for name, durations in ops.items():
        kinds[kind(name)] += durations

    def rows(table: dict[str, list[float]], n: int | None) -> list[dict]:
        ranked = sorted(table.items(), key=lambda kv: -sum(kv[1]))[:n]
        return [{"name": k, "us": sum(d), "share": sum(d) / busy, "calls": len(d),
                 "mean_us": sum(d) / len(d)} for k, d in ranked]

    top_ops = rows(ops, top)
    if details is not None:
        for r in top_ops:
            r["args"] = details.get(r["name"], {})
            r["where"] = where(r["args"])
    result = {"busy_us": busy, "ops": top_ops, "kinds": rows(kinds, None)}
    if spans is not None:
        result["running_us"] = covered(spans)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a trace.json(.gz) written by jax.profiler")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--json", default=None, help="write the report here as JSON")
    args = parser.parse_args()
    details, spans = {}, []
    ops = device_ops(args.trace, details, spans)
    if not ops:
        print(f"{args.trace}: no device op events (a CPU run traces none)", file=sys.stderr)
        raise SystemExit(1)
    result = report(ops, args.top, details, spans)
    print(f"device busy {result['busy_us'] / 1e3:,.1f} ms summed over ops, "
          f"{result['running_us'] / 1e3:,.1f} ms with an op running")
    for title in ("ops", "kinds"):
        print(f"{'time ms':>10} {'share':>6} {'calls':>7} {'mean us':>9}  {title}")
        for r in result[title]:
            print(f"{r['us'] / 1e3:10.2f} {r['share']:6.1%} {r['calls']:7d} {r['mean_us']:9.1f}  "
                  f"{r['name']}" + (f"  {r['where'][:100]}" if r.get("where") else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
