"""What XLA compiles for one update: our PPO and SAC against Brax's trainers.

Compiles, without running them, on the local backend:

* PPO, ours: the program ``Trainer(strategy="single").fit`` runs for
  ``recipes/configs/ppo_brax.yaml`` (``Strategy.compile_train`` on the state's
  shapes, the Trainer's fused loop around ``PPO.training_step``), measured for
  one update; Brax: the training epoch that ``brax.training.agents.ppo.train``
  builds and ``jax.pmap``\\ s, at the same settings (as ``benchmarks/brax_ppo.py``
  maps them: ``num_envs``, ``batch_size``, ``num_minibatches``, unroll 5, 4
  epochs per update, Brax's policy and value networks);
* SAC, ours: the same for ``recipes/configs/sac_brax.yaml`` (one update:
  ``num_envs`` env steps, then ``gradient_steps`` updates of ``batch_size``);
  Brax: the training epoch of ``brax.training.agents.sac.train`` with
  ``num_envs``, ``batch_size``, ``grad_updates_per_step = gradient_steps``,
  ``max_replay_size = buffer_size`` and the config's rates, discount, reward
  scaling and observation normalisation.

Brax's epoch is caught where its trainer first calls it: for the duration of the
call ``jax.pmap`` is wrapped so that the function Brax names ``training_epoch``
is lowered and compiled with the real arguments, then a private exception stops
the trainer before the epoch runs. Brax's env resets (and SAC's empty prefill)
run as usual; they, the evaluation and the initialisation are not measured.

Env steps per program (``action_repeat`` 1):

* ours: ``env_steps_per_step`` of the module (PPO ``num_envs * num_steps``,
  SAC ``num_envs * train_frequency``) for one update;
* Brax PPO: ``T * batch_size * num_minibatches * unroll_length``, ``T =
  num_training_steps_per_epoch = ceil(num_timesteps / (max(num_evals - 1, 1) *
  batch_size * unroll_length * num_minibatches))`` (here ``num_evals=1``, so
  ``T = num_timesteps / (batch_size * unroll_length * num_minibatches)``);
* Brax SAC: ``T * num_envs``, ``T = ceil((num_timesteps - prefill) /
  (max(num_evals - 1, 1) * num_envs))`` with ``prefill = ceil(min_replay_size /
  num_envs) * num_envs`` (0 here).

Printed per side, and as ``ours / Brax``:

* ``flops`` and ``bytes accessed`` per env step: XLA's cost analysis of the
  compiled program (``compiled.cost_analysis()``'s counting) divided by the
  program's env steps. XLA's own figure for a whole program counts the body of
  every loop once, whatever its trip count; here each loop body counts as often
  as the loop runs: every computation of the compiled HLO that holds a loop is
  analysed on its own (XLA's analysis with it as the entry), and a ``while``
  with XLA's ``known_trip_count`` n adds ``n`` times its body's cost (its
  condition ``n + 1`` times) in place of once. A loop without a known trip count
  counts once: ours, the Trainer's loop over a call's updates (one update
  here) and PPO's loop over truncated steps (at most one pass per update while
  the rollout is shorter than the time limit). A ``conditional`` counts its
  costliest branch (XLA's rule): our SAC's updates once learning has started,
  Brax's replay buffer roll once the buffer is full (every step then);
* ``fused gathers at gathered size``: ``bytes accessed`` again, with every
  gather that XLA fused with the array it gathers from (directly or through
  bitcasts) charged the bytes it gathers. XLA's analysis charges such a fusion
  the whole array, though it reads only the gathered rows: a replay buffer
  sample inside a fusion costs the whole buffer (our SAC samples each of its
  ``gradient_steps`` batches on its own, Brax's SAC all of them at once);
* memory (MiB) from ``compiled.memory_analysis()``: arguments, outputs,
  temporaries, and peak = arguments + outputs - aliased (outputs that reuse a
  donated argument's buffer) + temporaries. Not per env step: both programs
  hold the same envs and batches.

Last, one ``<algorithm> <row> ratio=<ours/Brax>`` line per row, with the bound
where one is set (PPO: flops 1.05, bytes accessed and peak memory 1.10; SAC:
1.10 each).

With ``--run`` both compiled programs also run: each ``--calls`` times after one
untimed call (ours ``T`` updates per call as Brax's epoch; SAC both first fill
their buffers to ``learning_starts``), printed as env steps/s. Meant for an
accelerator; on CPU use ``--size small``.

    python benchmarks/compiled_cost.py                 # full: brax ant, Brax's settings
    python benchmarks/compiled_cost.py --size small    # inverted_pendulum, small sizes
    python benchmarks/compiled_cost.py --size small --run
    python benchmarks/compiled_cost.py --only ppo

Brax 0.14's trainer calls a replication function JAX 0.10 no longer has; as in
``benchmarks/brax_ppo.py`` an equivalent is supplied for the duration of the call.
The per-computation analysis uses jaxlib's HLO parser and cost analysis
(``jaxlib._hlo``, ``jaxlib._jax``), which JAX does not export publicly.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jaxlib._hlo as hlo
import jaxlib._jax as xla
import numpy as np
from brax_ppo import EPOCHS_PER_UPDATE, ROOT, UNROLL, _brax_replication_shim, steps_per_update
from brax_ppo import SIZES as PPO_SIZES

import jaxtrainer as jt
from jaxtrainer.recipes import _modules as modules
from jaxtrainer.recipes import config
from jaxtrainer.trainer._connectors import checkpoint_connector

SAC_SIZES = {
    # env, num_envs, batch_size, gradient_steps per update, replay capacity,
    # learning_starts (env steps), updates per Brax epoch
    "small": dict(env="inverted_pendulum", num_envs=16, batch_size=64, gradient_steps=4,
                  buffer_size=16_384, learning_starts=256, updates_per_epoch=10),
    "full": dict(env="ant", num_envs=128, batch_size=512, gradient_steps=64,
                 buffer_size=1_048_576, learning_starts=8_192, updates_per_epoch=64),
}
BOUNDS = {"ppo": {"flops": 1.05, "bytes accessed": 1.10, "peak": 1.10},
          "sac": {"flops": 1.10, "bytes accessed": 1.10, "peak": 1.10}}
KEYS = ("flops", "bytes accessed")
MEMORY = ("arguments", "outputs", "temporaries", "peak")
MIB = 2.0 ** 20


# ---- cost of a compiled program, every loop body counted per iteration -------
_COMPUTATION = re.compile(r"^(ENTRY )?%([\w.\-]+) \(", re.M)
_WHILE = re.compile(r"\bwhile\(.*?condition=%([\w.\-]+), body=%([\w.\-]+)(.*)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_BRANCHES = re.compile(r"\bconditional\(.*?(?:branch_computations=\{([^}]*)\}|"
                       r"true_computation=%([\w.\-]+), false_computation=%([\w.\-]+))")
_CALLEES = re.compile(r"(?:calls|to_apply)=%([\w.\-]+)")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.+?) ([a-z][\w\-]*)\(([^)]*)\)")
_ARRAY = re.compile(r"\b(pred|[subf]\d+|bf16)\[([\d,]*)\]")


def _size(shape: str) -> int:
    """Bytes of an HLO shape (the arrays of a tuple summed; ``pred`` one byte)."""
    return sum(math.prod(int(d) for d in dims.split(",") if d)
               * (1 if dtype == "pred" else int(dtype.lstrip("subf")) // 8)
               for dtype, dims in _ARRAY.findall(shape.replace("bf16", "f16")))


class LoopCounted:
    """XLA's cost analysis of a compiled program's HLO with every loop body
    counted per iteration (see the module docstring). ``total()``: ``{"flops":
    ..., "bytes accessed": ...}`` of the entry computation; ``total(True)``: the
    same with every fused gather charged what it gathers; ``unknown``: loops met
    without a known trip count (counted once)."""

    def __init__(self, hlo_text: str) -> None:
        self.text = hlo_text.split("\n", 1)[1]  # the header names the entry's parameters
        heads = list(_COMPUTATION.finditer(self.text))
        ends = [h.start() for h in heads[1:]] + [len(self.text)]
        self.lines = {h.group(2): self.text[h.start():end].splitlines()
                      for h, end in zip(heads, ends, strict=True)}
        self.entry = next(h.group(2) for h in heads if h.group(1))
        self.client = jax.devices()[0].client
        self._once: dict[str, dict[str, float]] = {}
        self._counted: dict[tuple[str, bool], dict[str, float]] = {}
        self._needs: dict[str, bool] = {}
        self._unknown: set[str] = set()

    @property
    def unknown(self) -> int:
        return len(self._unknown)

    def once(self, name: str) -> dict[str, float]:
        """XLA's analysis of computation ``name`` as the entry (loop bodies once)."""
        if name not in self._once:
            text = re.sub(r"^ENTRY ", "", self.text, flags=re.M)
            text = re.sub(rf"^%{re.escape(name)} \(", f"ENTRY %{name} (", text, count=1, flags=re.M)
            costs = xla.hlo_module_cost_analysis(
                self.client, hlo.hlo_module_from_text("HloModule rerooted\n" + text))
            self._once[name] = {k: float(costs.get(k, 0.0)) for k in KEYS}
        return self._once[name]

    def gather_excess(self, fused: str) -> int:
        """Bytes XLA charges fusion ``fused`` beyond what its gathers read: a
        parameter read only by a gather (through bitcasts) is charged whole,
        though only the gathered elements are read."""
        found = {m.group(1): (m.group(2), m.group(3), re.findall(r"%([\w.\-]+)", m.group(4)))
                 for m in map(_INSTRUCTION.match, self.lines[fused][1:]) if m}
        users: dict[str, int] = {}
        for _, _, operands in found.values():
            for o in operands:
                users[o] = users.get(o, 0) + 1
        excess = 0
        for shape, op, operands in found.values():
            if op != "gather":
                continue
            source = operands[0]
            while found[source][1] == "bitcast" and users[source] == 1:
                source = found[source][2][0]
            if found[source][1] == "parameter" and users[source] == 1:
                excess += _size(found[source][0]) - _size(shape)
        return excess

    def needs_counting(self, name: str) -> bool:
        """Whether ``name`` (transitively) holds a loop, a conditional or a fused gather."""
        if name not in self._needs:
            self._needs[name] = False  # no recursion in HLO; guards a malformed text
            self._needs[name] = any(
                _WHILE.search(line) or _BRANCHES.search(line)
                or any(self.needs_counting(c) if " fusion(" not in line
                       else self.gather_excess(c) > 0
                       for c in _CALLEES.findall(line) if c in self.lines)
                for line in self.lines[name])
        return self._needs[name]

    def counted(self, name: str, gathers: bool = False) -> dict[str, float]:
        """The cost of computation ``name``, its loops counted per iteration
        (and with ``gathers``, fused gathers charged what they gather)."""
        if (name, gathers) in self._counted:
            return self._counted[name, gathers]
        total = dict(self.once(name))

        def add(cost: dict[str, float], times: float) -> None:
            for k in KEYS:
                total[k] += times * cost[k]

        for line in self.lines[name]:
            if loop := _WHILE.search(line):
                cond, body, rest = loop.groups()
                trip = _TRIP.search(rest)
                if trip is None:
                    self._unknown.add(body)
                n = int(trip.group(1)) if trip else 1
                add(self.counted(body, gathers), n)
                add(self.once(body), -1)
                add(self.counted(cond, gathers), n + 1)
                add(self.once(cond), -1)
            elif branch := _BRANCHES.search(line):
                names = ([b.strip().lstrip("%") for b in branch.group(1).split(",")]
                         if branch.group(1) else [branch.group(2), branch.group(3)])
                if any(self.needs_counting(b) for b in names):
                    for k in KEYS:  # XLA counts a conditional as its costliest branch
                        total[k] += (max(self.counted(b, gathers)[k] for b in names)
                                     - max(self.once(b)[k] for b in names))
            elif " fusion(" in line:
                if gathers:
                    total["bytes accessed"] -= sum(self.gather_excess(c)
                                                   for c in _CALLEES.findall(line))
            else:
                for callee in _CALLEES.findall(line):
                    if callee in self.lines and self.needs_counting(callee):
                        add(self.counted(callee, gathers), 1)
                        add(self.once(callee), -1)
        self._counted[name, gathers] = total
        return total

    def total(self, gathers: bool = False) -> dict[str, float]:
        return self.counted(self.entry, gathers)


class Measured(NamedTuple):
    env_steps: int              # env steps the measured program collects
    flops: float                # loops counted per iteration
    bytes_accessed: float
    bytes_gathered: float       # bytes accessed, fused gathers at what they gather
    xla_flops: float            # XLA's own figure (every loop body once)
    arguments: int              # bytes
    outputs: int
    aliased: int
    temporaries: int
    compile_seconds: float
    unknown_loops: int

    @property
    def peak(self) -> int:
        return self.arguments + self.outputs - self.aliased + self.temporaries


def measure(compiled: Any, env_steps: int, seconds: float, dump: str | None = None) -> Measured:
    """Cost and memory of a compiled program (a ``jax.stages.Compiled``); with ``dump``,
    its optimised HLO text is also written to that file."""
    text = compiled.as_text()
    if dump:
        with open(dump, "w") as f:
            f.write(text)
    counted = LoopCounted(text)
    cost = counted.total()
    mem = compiled.memory_analysis()
    return Measured(env_steps, cost["flops"], cost["bytes accessed"],
                    counted.total(gathers=True)["bytes accessed"],
                    float(compiled.cost_analysis()["flops"]), mem.argument_size_in_bytes,
                    mem.output_size_in_bytes, mem.alias_size_in_bytes, mem.temp_size_in_bytes,
                    seconds, counted.unknown)


# ---- ours ---------------------------------------------------------------------
def our_module(algorithm: str, size: dict) -> Any:
    """Our PPO or SAC from its brax recipe config, resized to ``size``."""
    if algorithm == "ppo":
        num_steps = steps_per_update(size) // size["num_envs"]
        overrides = [f"algorithm.num_steps={num_steps}",
                     f"algorithm.num_minibatches={size['num_minibatches']}"]
    else:
        overrides = [f"algorithm.{k}={size[k]}" for k in
                     ("batch_size", "gradient_steps", "buffer_size", "learning_starts")]
    cfg = config.load(ROOT / f"{algorithm}_brax.yaml", [
        f"env.name=brax/{size['env']}", f"algorithm.num_envs={size['num_envs']}", *overrides],
        defaults=ROOT / f"{algorithm}.yaml")
    return modules.build_module(algorithm, cfg)


def compile_ours(algorithm: str, size: dict, run_calls: int,
                 dump: str | None = None) -> tuple[Measured, float | None]:
    """The training program ``Trainer.fit`` runs (strategy ``single``), compiled
    from the state's shapes; with ``run_calls``, also env steps/s of that many
    calls of ``updates_per_epoch`` updates each (after one untimed call)."""
    module = our_module(algorithm, size)
    trainer = jt.Trainer(strategy="single", max_steps=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         default_root_dir="/tmp/jaxtrainer-bench-compiled-cost")
    trainer.prepare(module)
    strategy = trainer.strategy
    begin = time.perf_counter()
    program = strategy.compile_train(module, strategy.abstract_state(module),
                                     checkpoint_connector.abstract_key(strategy))
    measured = measure(program.program, module.env_steps_per_step, time.perf_counter() - begin,
                       dump)
    if not run_calls:
        return measured, None
    key = jax.random.key(0)
    state = strategy.init_state(module, key)
    steps, prefill = size["updates_per_epoch"], prefill_updates(algorithm, size)

    def call(state, first_step, n):
        lengths = np.zeros(program.max_intervals, np.int32)
        lengths[0] = n
        state, _ = program.program(state, key, np.int32(first_step), lengths)
        return jax.block_until_ready(state)

    state = call(state, 0, prefill + steps)  # untimed: fills SAC's buffer, warms up
    begin = time.perf_counter()
    for i in range(run_calls):
        state = call(state, prefill + (i + 1) * steps, steps)
    seconds = time.perf_counter() - begin
    return measured, run_calls * steps * module.env_steps_per_step / seconds


def prefill_updates(algorithm: str, size: dict) -> int:
    """Our SAC's updates before ``learning_starts`` (Brax prefills as many env steps)."""
    return math.ceil(size["learning_starts"] / size["num_envs"]) if algorithm == "sac" else 0


# ---- Brax ---------------------------------------------------------------------
class _EpochCompiled(Exception):
    """Raised inside Brax's trainer once its training epoch is compiled."""


@contextlib.contextmanager
def _catch_training_epoch(found: dict, run_calls: int):
    """For the duration of a Brax trainer call: ``jax.pmap`` of the function
    named ``training_epoch`` compiles it on its first call (its arguments are the
    real ones), stores ``found["compiled"]`` and ``found["seconds"]`` (with
    ``run_calls``, ``found["run_seconds"]`` of that many calls after an untimed
    one) and raises :class:`_EpochCompiled`. Other ``pmap``\\ s are untouched."""
    real_pmap = jax.pmap

    def pmap(fun, *args, **kwargs):
        mapped = real_pmap(fun, *args, **kwargs)
        if getattr(fun, "__name__", "") != "training_epoch":
            return mapped

        def first_call(*call_args):
            start = time.perf_counter()
            compiled = mapped.lower(*call_args).compile()
            found.update(compiled=compiled, seconds=time.perf_counter() - start)
            if run_calls:
                found["run_seconds"] = _time_calls(compiled, call_args, run_calls)
            raise _EpochCompiled

        return first_call

    jax.pmap = pmap
    try:
        with _brax_replication_shim():
            yield
    except _EpochCompiled:
        pass
    finally:
        jax.pmap = real_pmap


def _time_calls(compiled: Callable, args: tuple, calls: int) -> float:
    """Seconds of ``calls`` calls of a Brax epoch after an untimed one; each call
    takes the state the last returned (the state arguments are donated) and the
    same key (the last argument)."""
    def call(args):
        out = compiled(*args)
        jax.block_until_ready(out)
        return (*out[:-1], args[-1])

    args = call(args)
    start = time.perf_counter()
    for _ in range(calls):
        args = call(args)
    return time.perf_counter() - start


def brax_ppo_epoch(size: dict, found: dict, run_calls: int) -> int:
    """Brax's PPO training epoch at ``size`` into ``found``; returns its env steps."""
    from brax import envs
    from brax.training.agents.ppo import train as brax_ppo

    steps = size["updates_per_epoch"] * steps_per_update(size)  # T training steps
    with _catch_training_epoch(found, run_calls):
        brax_ppo.train(
            envs.get_environment(size["env"]), num_timesteps=steps, num_evals=1,
            num_envs=size["num_envs"], batch_size=size["batch_size"],
            num_minibatches=size["num_minibatches"], unroll_length=UNROLL,
            num_updates_per_batch=EPOCHS_PER_UPDATE, episode_length=1000, discounting=0.97,
            learning_rate=3e-4, entropy_cost=1e-2, reward_scaling=10,
            normalize_observations=True, num_eval_envs=1, seed=0)
    return steps


def brax_sac_epoch(size: dict, found: dict, run_calls: int) -> int:
    """Brax's SAC training epoch at ``size`` into ``found``; returns its env
    steps. Without ``run_calls`` the prefill is empty (it runs, but is not
    measured); with it, Brax prefills ``learning_starts`` env steps first."""
    from brax import envs
    from brax.training.agents.sac import train as brax_sac

    prefill = size["learning_starts"] if run_calls else 0
    prefill_steps = math.ceil(prefill / size["num_envs"]) * size["num_envs"]
    steps = size["updates_per_epoch"] * size["num_envs"]
    with _catch_training_epoch(found, run_calls):
        brax_sac.train(
            envs.get_environment(size["env"]), num_timesteps=prefill_steps + steps,
            episode_length=1000, num_envs=size["num_envs"], num_evals=1, num_eval_envs=1,
            learning_rate=6e-4, discounting=0.97, batch_size=size["batch_size"],
            normalize_observations=True, reward_scaling=10.0, tau=0.005,
            min_replay_size=prefill, max_replay_size=size["buffer_size"],
            grad_updates_per_step=size["gradient_steps"], seed=0)
    return steps


def compile_brax(algorithm: str, size: dict, run_calls: int,
                 dump: str | None = None) -> tuple[Measured, float | None]:
    found: dict = {}
    epoch = brax_ppo_epoch if algorithm == "ppo" else brax_sac_epoch
    steps = epoch(size, found, run_calls)
    if "compiled" not in found:
        raise RuntimeError(f"Brax's {algorithm} trainer never called its training epoch")
    measured = measure(found["compiled"], steps, found["seconds"], dump)
    sps = run_calls * steps / found["run_seconds"] if run_calls else None
    return measured, sps


# ---- report -------------------------------------------------------------------
def rows(m: Measured) -> dict[str, float]:
    return {"flops": m.flops / m.env_steps, "bytes accessed": m.bytes_accessed / m.env_steps,
            "bytes gathered": m.bytes_gathered / m.env_steps,
            "arguments": m.arguments / MIB, "outputs": m.outputs / MIB,
            "temporaries": m.temporaries / MIB, "peak": m.peak / MIB}


def report(algorithm: str, size_name: str, ours: Measured, brax: Measured,
           sps: tuple[float | None, float | None]) -> list[str]:
    """Prints the table of one algorithm; returns its ``ratio=`` lines."""
    print(f"\n{algorithm.upper()} ({size_name}): ours one update = {ours.env_steps:,} env steps; "
          f"Brax one training epoch = {brax.env_steps:,} env steps")
    print(f"  {'':34s} {'ours':>14s} {'Brax':>14s} {'ours/Brax':>10s}")
    units = {"flops": "flops / env step", "bytes accessed": "bytes accessed / env step",
             "bytes gathered": "  fused gathers at gathered size"}
    ratios = []
    for (name, a), b in zip(rows(ours).items(), rows(brax).values(), strict=True):
        label = units.get(name, f"{name} MiB")
        print(f"  {label:34s} {a:14,.1f} {b:14,.1f} {a / b:10.3f}")
        bound = BOUNDS[algorithm].get(name)
        verdict = (f" (bound {bound:.2f}: {'met' if a / b <= bound else 'MISSED'})"
                   if bound else "")
        row = name.replace(" ", "_") + ("_mib" if name in MEMORY else "_per_env_step")
        ratios.append(f"{algorithm} {row} ratio={a / b:.3f}{verdict}")
    for who, m in (("ours", ours), ("Brax", brax)):
        print(f"  {who}: compiled in {m.compile_seconds:.0f} s; XLA's cost_analysis() with each "
              f"loop body once: {m.xla_flops:,.0f} flops; loops without a known trip count "
              f"(counted once): {m.unknown_loops}")
    if sps[0] is not None:
        print(f"  run: ours {sps[0]:,.0f} env steps/s, Brax {sps[1]:,.0f} env steps/s, "
              f"ratio {sps[0] / sps[1]:.3f}")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("small", "full"), default="full")
    parser.add_argument("--only", choices=("ppo", "sac"), help="one algorithm only")
    parser.add_argument("--run", action="store_true",
                        help="also run both programs and print env steps/s")
    parser.add_argument("--calls", type=int, default=3, help="timed calls with --run")
    parser.add_argument("--hlo", default=None,
                        help="a folder: write each compiled program's optimised HLO text there")
    args = parser.parse_args()
    run_calls = args.calls if args.run else 0
    print(f"{args.size}: {jax.devices()[0].platform} ({jax.devices()[0].device_kind}), "
          f"jax {jax.__version__}; compile only" + (", then run" if args.run else ""))
    summary = []
    for algorithm in [args.only] if args.only else ["ppo", "sac"]:
        size = (PPO_SIZES if algorithm == "ppo" else SAC_SIZES)[args.size]
        begin = time.perf_counter()
        dumps = [f"{args.hlo}/{side}_{algorithm}.hlo.txt" if args.hlo else None
                 for side in ("ours", "brax")]
        ours, our_sps = compile_ours(algorithm, size, run_calls, dumps[0])
        brax, brax_sps = compile_brax(algorithm, size, run_calls, dumps[1])
        summary += report(algorithm, f"{args.size}, brax/{size['env']}, {size['num_envs']} envs",
                          ours, brax, (our_sps, brax_sps))
        print(f"  ({time.perf_counter() - begin:.0f} s for both sides)", flush=True)
    print()
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
