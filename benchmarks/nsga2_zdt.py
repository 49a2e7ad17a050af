"""Our NSGA-II (``jaxtrainer fit nsga2``) against pymoo's on ZDT1-3, side by side.

Both sides run Deb et al. 2002's NSGA-II settings on ZDT1, ZDT2 and ZDT3 (30
variables in [0, 1]): population 100, 250 generations (25,000 evaluations, the
random initial population counted as the first generation, as pymoo's
``("n_gen", 250)`` counts it), SBX crossover with probability 0.9 and
distribution index 20, polynomial mutation with probability 1/30 per variable
and index 20, one pair of runs per seed, alternating (ours, theirs, theirs, ours, ...):

* ours: the ``nsga2`` recipe's module and trainer settings
  (``recipes/configs/nsga2.yaml`` with ``env.name=<task>``), one device,
  ``PopulationTrainer(strategy="single")`` with every generation's metrics
  logged, loggers, checkpoints and the progress bar off; timed from
  ``on_train_start`` (programs compiled) to ``on_train_end``. XLA's CPU
  optimisation level is lowered as the recipe lowers it
  (:func:`jaxtrainer.commands.fit.fast_cpu_compile`), so the final population is
  bit for bit what ``jaxtrainer fit nsga2 env.name=<task> trainer.seed=<s>``
  ends with (how often it logs does not change the run; the optimisation level
  does).
* theirs: ``pymoo.algorithms.moo.nsga2.NSGA2`` (pymoo 0.6.1.5, installed beside,
  e.g. ``pip install pymoo==0.6.1.5``) with ``SBX(prob=0.9, eta=20)``,
  ``PM(prob=1.0, eta=20)`` (every child mutated with its default per-variable
  probability 1/n; pymoo's default ``prob=0.9`` would leave a tenth untouched),
  ``eliminate_duplicates=False`` (the paper's algorithm keeps duplicates; pymoo's
  default removes them), on pymoo's ``ZDT1()``..``ZDT3()`` (30 variables),
  ``seed=<s>``; timed around ``minimize``.

The statistic, both sides: the hypervolume of the final population's minimised
``(f1, f2)`` from the reference point ``(1, 1)`` (the point jMetal's normalised
hypervolume of ZDT1 and ZDT2 uses; points beyond it add nothing), exact (a sort
and a sweep, float64, one function for both sides). The true fronts' values
from ``(1, 1)``: 2/3 (ZDT1), 1/3 (ZDT2), 1.0444 (ZDT3); a population of 100
points stays just below. Curves: every generation's hypervolume against
evaluations. Speed: evaluations per second of each side's loop.

    python benchmarks/nsga2_zdt.py --seeds 0,1,2,3,4 --json-dir docs/baselines

writes ``docs/baselines/nsga2-<task>.json`` (``benchmarks/published.py`` reads
them for the baselines page) and prints every run, the medians and last a line
``ratio=<ours/theirs>`` per task.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from jaxtrainer.commands.fit import fast_cpu_compile  # imports no JAX

fast_cpu_compile()  # as `jaxtrainer fit nsga2` does on CPU, before JAX starts: the same bits
sys.path.insert(0, str(Path(__file__).parent))
from _timing import LoopClock, record_run, use_compilation_cache  # noqa: E402

import jaxtrainer as jt  # noqa: E402
from jaxtrainer.population import PopulationTrainer  # noqa: E402
from jaxtrainer.recipes import _catalog as catalog  # noqa: E402
from jaxtrainer.recipes import config  # noqa: E402
from jaxtrainer.recipes._modules import build_module  # noqa: E402

POPULATION, GENERATIONS = 100, 250
REFERENCE = (1.0, 1.0)  # minimised (f1, f2)


def hypervolume(f: np.ndarray, reference: tuple[float, float] = REFERENCE) -> float:
    """Exact 2-D hypervolume of minimised points ``f: [N, 2]`` from ``reference``."""
    f = np.asarray(f, np.float64)
    f = f[np.all(np.isfinite(f), axis=1) & (f[:, 0] < reference[0]) & (f[:, 1] < reference[1])]
    total, best = 0.0, reference[1]
    for x, y in f[np.lexsort((f[:, 1], f[:, 0]))]:
        if y < best:
            total += (reference[0] - x) * (best - y)
            best = y
    return total


class Curve(jt.Callback):
    """Every logged generation's ``moo/hypervolume`` as ``[evaluations, value]``."""

    writes_run_dir = False

    def __init__(self) -> None:
        self.points: list[list[float]] = []

    def needs_state(self, trainer, module, step):
        return False

    def on_generation_end(self, trainer, module, metrics):
        self.points.append([metrics["generation"] * POPULATION, metrics["moo/hypervolume"]])


def run_ours(task: str, seed: int) -> tuple[float, float, list[list[float]]]:
    """(evaluations/s after compilation, final hypervolume, curve)."""
    cfg = config.load(catalog.config_file("nsga2"), [f"env.name={task}"])
    module = build_module("nsga2", cfg)
    assert module.reference_point == (-1.0, -1.0)  # (1, 1) minimised
    clock, curve = LoopClock(), Curve()
    trainer = PopulationTrainer(
        cfg.trainer.population_size, strategy="single", devices=1,
        max_generations=cfg.trainer.max_generations, log_every_n_generations=1, seed=seed,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        compile_evaluation_ahead=False, callbacks=[clock, curve],
        default_root_dir="/tmp/jaxtrainer-bench-nsga2")
    assert (trainer.population_size, trainer.max_generations) == (POPULATION, GENERATIONS)
    trainer.fit(module)
    final = hypervolume(-np.asarray(trainer.state.objectives))
    assert abs(final - curve.points[-1][1]) < 1e-5  # the logged float32 value agrees
    return POPULATION * GENERATIONS / clock.seconds, final, curve.points


def run_theirs(task: str, seed: int) -> tuple[float, float, list[list[float]]]:
    """(evaluations/s, final hypervolume, curve) of pymoo's NSGA-II."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.callback import Callback
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.optimize import minimize
    from pymoo.problems import get_problem

    class PymooCurve(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.points: list[list[float]] = []

        def notify(self, algorithm):
            self.points.append([float(algorithm.evaluator.n_eval),
                                hypervolume(algorithm.pop.get("F"))])

    problem = get_problem(task, n_var=30)
    algorithm = NSGA2(pop_size=POPULATION, crossover=SBX(prob=0.9, eta=20),
                      mutation=PM(prob=1.0, eta=20), eliminate_duplicates=False)
    curve = PymooCurve()
    start = time.perf_counter()
    result = minimize(problem, algorithm, ("n_gen", GENERATIONS), seed=seed, callback=curve,
                      verbose=False)
    seconds = time.perf_counter() - start
    assert result.algorithm.evaluator.n_eval == POPULATION * GENERATIONS
    final = hypervolume(result.pop.get("F"))
    return POPULATION * GENERATIONS / seconds, final, curve.points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="zdt1,zdt2,zdt3")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated; one pair per seed")
    parser.add_argument("--sides", default="ours,theirs")
    parser.add_argument("--json-dir", type=Path, default=None,
                        help="add every run to <dir>/nsga2-<task>.json")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    sides = args.sides.split(",")
    use_compilation_cache()
    runs = {"ours": run_ours, "theirs": run_theirs}
    for task in args.tasks.split(","):
        speeds: dict[str, list[float]] = {s: [] for s in sides}
        finals: dict[str, list[float]] = {s: [] for s in sides}
        for i, seed in enumerate(seeds):
            order = sides if i % 2 == 0 else sides[::-1]
            for side in order:
                start = time.perf_counter()
                speed, final, curve = runs[side](task, seed)
                speeds[side].append(speed)
                finals[side].append(final)
                print(f"{task} seed {seed} {side:6s}: hypervolume {final:.5f}  "
                      f"{speed:9,.0f} evaluations/s  ({time.perf_counter() - start:.1f} s "
                      "with compile)", flush=True)
                record_run(args.json_dir / f"nsga2-{task}.json" if args.json_dir else None,
                           side=side, seed=seed, env=task.upper(),
                           env_steps=POPULATION * GENERATIONS, env_steps_per_s=speed,
                           final_return=final, wall_s=time.perf_counter() - start,
                           curve=curve)
        line = ", ".join(f"{s} median {statistics.median(finals[s]):.5f} "
                         f"({statistics.median(speeds[s]):,.0f} evaluations/s)" for s in sides)
        print(f"{task}: {line}")
        if len(sides) == 2:
            pairs = [a / b for a, b in zip(speeds[sides[0]], speeds[sides[1]], strict=True)]
            print(f"{task} ratio={statistics.median(pairs):.3f}")


if __name__ == "__main__":
    main()
