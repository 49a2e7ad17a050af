"""PopulationTrainer overhead: generations/s against hand-written evosax loops.

Runs the same evosax algorithm (OpenAI-ES, CartPole-v1, an MLP policy with one
hidden layer of 16 units, one episode of 500 steps per member) with the same
member evaluation function three ways in one process and prints generations/s,
the ratios and compile times:

1. ``PopulationTrainer(strategy="single")`` logging every 10 generations,
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
shared machine the CPU-time ratio is the stable one. Variants alternate
(A B C, C B A, ...), ``--repeats`` runs each; ratios compare medians. A
throwaway persistent compilation cache spares the repeats' compiles.

    python benchmarks/es_overhead.py [--generations 100] [--population 64] [--repeats 11]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
from _timing import LoopClock, interleaved, paired_ratio, summarise, use_compilation_cache
from evosax.algorithms import Open_ES

from jaxtrainer.algorithms.neuro_es import NeuroES
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


def trainer_run(module: NeuroES, generations: int, seed: int) -> tuple[float, ...]:
    """(wall and CPU seconds from on_train_start to on_train_end, compile seconds,
    host seconds of the loop; see ``_timing.LoopClock``)."""
    clock = LoopClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = PopulationTrainer(module.population_size, strategy="single",
                                    max_generations=generations, log_every_n_generations=10,
                                    callbacks=[clock], seed=seed, default_root_dir=root,
                                    enable_progress_bar=False, enable_checkpointing=False,
                                    logger=True)
        trainer.fit(module)
    return clock.seconds, clock.cpu_seconds, trainer.compile_seconds["train"], clock.host_seconds


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=11,
                        help="runs per variant, interleaved; medians are reported")
    args = parser.parse_args(argv)
    use_compilation_cache()
    module = make_module(args.population)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; OpenAI-ES on CartPole-v1, "
          f"population {args.population}, {module.num_dims} parameters, {args.generations} "
          f"generations per run, {args.repeats} runs each")
    ours = "PopulationTrainer (single)"
    variants = {
        ours: lambda: trainer_run(module, args.generations, 0),
        "hand-written jit loop": lambda: hand_written(module, args.generations, 0, False),
        "hand-written jit(lax.scan)": lambda: hand_written(module, args.generations, 0, True),
    }
    runs = interleaved(variants, args.repeats)
    stats = {name: summarise(rs) for name, rs in runs.items()}
    g = args.generations
    print(f"{'variant':<30}{'generations/s':>15}{'per CPU-second':>16}{'best gen/s':>12}{'compile s':>11}")
    for name, st in stats.items():
        print(f"{name:<30}{g / st.median_seconds:>15.2f}{g / st.median_cpu_seconds:>16.2f}"
              f"{g / st.best_seconds:>12.2f}{st.compile_seconds:>11.2f}")
    hand = [n for n in variants if n != ours]
    fast = min(hand, key=lambda n: stats[n].median_seconds)
    print(f"ratio PopulationTrainer / fastest hand-written ({fast}): "
          f"medians {stats[fast].median_seconds / stats[ours].median_seconds:.3f}, "
          f"paired {paired_ratio(runs[ours], runs[fast]):.3f}, "
          f"CPU {stats[fast].median_cpu_seconds / stats[ours].median_cpu_seconds:.3f}, "
          f"best runs {min(stats[n].best_seconds for n in hand) / stats[ours].best_seconds:.3f}; "
          f"host share of the PopulationTrainer's loop {stats[ours].median_host_share:.2%}")


if __name__ == "__main__":
    main(sys.argv[1:])
