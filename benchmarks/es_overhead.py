"""PopulationTrainer overhead: generations/s against hand-written evosax loops.

Runs the same evosax algorithm (OpenAI-ES, CartPole-v1, an MLP policy with one
hidden layer of 16 units, one episode of 500 steps per member) with the same
member evaluation function three ways in one process and prints generations/s,
the ratios and compile times:

1. ``PopulationTrainer(strategy="single")``, 10 generations fused per call,
   CSV + TensorBoard loggers on, progress bar and checkpoints off; timed from
   ``on_train_start`` to ``on_train_end`` (host loop, metric fetches and
   callbacks included, compilation excluded);
2. a hand-written loop: one ``jax.jit`` generation (``ask``, ``jit(vmap)`` of the
   evaluation, ``tell``) called from Python every generation;
3. the same generation fused over all generations in one ``jax.jit(lax.scan)``.

Both hand-written loops keep what the trainer logs (mean fitness, the members'
mean episode length, evosax's best fitness), so all three do the same work.

The ratio that matters is PopulationTrainer / fastest hand-written loop. Each
variant is timed in wall-clock and in process CPU seconds (all threads): on a
shared machine the CPU-time ratio is the stable one. Variants run round-robin,
best of ``--repeats`` each.

    python benchmarks/es_overhead.py [--generations 100] [--population 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
from evosax.algorithms import Open_ES

import jaxtrainer as jt
from jaxtrainer.algorithms.es import NeuroES
from jaxtrainer.population import PopulationTrainer


def make_module(population: int) -> NeuroES:
    return NeuroES("CartPole-v1", "Open_ES", hidden_sizes=(16,), learning_rate=0.05, std=0.1,
                   population_size=population)


def hand_written(module: NeuroES, generations: int, seed: int, fused: bool) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, compile seconds) of a plain evosax loop: its own Open_ES
    instance, the module's member evaluation, nothing of jaxtrainer's loop."""
    es = Open_ES(module.population_size, module.zero_solution(),
                 optimizer=module.kwargs["optimizer"], std_schedule=module.kwargs["std_schedule"])
    params = es.default_params
    key = jax.random.key(seed)
    state = es.init(key, module.initial_mean(key), params)

    def generation(state, key):
        ask_key, eval_key, tell_key = jax.random.split(key, 3)
        population, state = es.ask(ask_key, state, params)
        keys = jax.random.split(eval_key, module.population_size)
        fitness, extras = jax.vmap(module.evaluate)(population, keys)
        state, metrics = es.tell(tell_key, population, -fitness, state, params)
        return state, (jnp.mean(fitness), jnp.mean(extras["episode_length"]),
                       -metrics["best_fitness"])

    if fused:
        def run(state, key):
            return jax.lax.scan(generation, state, jax.random.split(key, generations))

        t = time.perf_counter()
        compiled = jax.jit(run).lower(state, key).compile()
        compile_s = time.perf_counter() - t
        t, c = time.perf_counter(), time.process_time()
        state, means = compiled(state, key)
        jax.device_get(means)
        return time.perf_counter() - t, time.process_time() - c, compile_s

    t = time.perf_counter()
    step = jax.jit(generation).lower(state, key).compile()
    compile_s = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    for g in range(generations):
        state, mean = step(state, jax.random.fold_in(key, g))
    jax.device_get(mean)
    return time.perf_counter() - t, time.process_time() - c, compile_s


class _Clock(jt.Callback):
    def needs_state(self, trainer, module, step):
        return False  # a clock: the next interval may be enqueued before its hooks

    def on_train_start(self, trainer, module):
        trainer.wait_for_compilation()  # the evaluation program compiles in the background
        self.start, self.cpu = time.perf_counter(), time.process_time()

    def on_train_end(self, trainer, module):
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = time.process_time() - self.cpu


def trainer_run(module: NeuroES, generations: int, seed: int) -> tuple[float, float, float]:
    """(wall and CPU seconds from on_train_start to on_train_end, compile seconds)."""
    clock = _Clock()
    with tempfile.TemporaryDirectory() as root:
        trainer = PopulationTrainer(module.population_size, strategy="single",
                                    max_generations=generations, log_every_n_generations=10,
                                    callbacks=[clock], seed=seed, default_root_dir=root,
                                    enable_progress_bar=False, enable_checkpointing=False,
                                    logger=True)
        trainer.fit(module)
    return clock.seconds, clock.cpu_seconds, trainer.compile_seconds["train"]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant; best is kept")
    args = parser.parse_args(argv)
    module = make_module(args.population)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; OpenAI-ES on CartPole-v1, "
          f"population {args.population}, {module.num_dims} parameters, {args.generations} "
          f"generations per run, best of {args.repeats}")

    variants = {
        "PopulationTrainer (single)": lambda: trainer_run(module, args.generations, 0),
        "hand-written jit loop": lambda: hand_written(module, args.generations, 0, False),
        "hand-written jit(lax.scan)": lambda: hand_written(module, args.generations, 0, True),
    }
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    for _ in range(args.repeats):  # round-robin: load changes hit every variant alike
        for name, fn in variants.items():
            runs[name].append(fn())
    g = args.generations
    wall = {name: min(r[0] for r in rs) for name, rs in runs.items()}
    cpu = {name: min(r[1] for r in rs) for name, rs in runs.items()}
    print(f"{'variant':<30}{'generations/s':>15}{'per CPU-second':>16}{'compile s':>11}")
    for name, rs in runs.items():
        print(f"{name:<30}{g / wall[name]:>15.2f}{g / cpu[name]:>16.2f}{rs[0][2]:>11.2f}")
    ours = "PopulationTrainer (single)"
    hand = [n for n in variants if n != ours]
    fast_wall, fast_cpu = min(wall[n] for n in hand), min(cpu[n] for n in hand)
    print(f"ratio PopulationTrainer / fastest hand-written (wall): {fast_wall / wall[ours]:.3f}")
    print(f"ratio PopulationTrainer / fastest hand-written (CPU):  {fast_cpu / cpu[ours]:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
