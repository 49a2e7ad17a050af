"""evosax's own OpenAI-ES loop on a brax task, as its reinforcement learning example runs
it (``examples/02_rl.ipynb`` of RobertTLange/evosax, section "Brax": ``BraxProblem`` of
``ant`` with an ``MLP(layer_sizes=(32, 32, 32, 32, 8), output_fn=tanh_output_fn)`` policy,
``episode_length=1000, num_rollouts=16, use_normalize_obs=True``; ``Open_ES`` with
``population_size=256``, ``optax.adam`` on ``exponential_decay(0.01, num_generations,
0.1)``, ``std_schedule=exponential_decay(0.05, num_generations, 0.2)``; 512 generations
run as ``jax.lax.scan`` of its ``step`` (``ask``, ``problem.eval``, ``tell``) over chunks
of ``log_period=32``, the mean evaluated after each chunk), called unmodified.

    python _evosax_original.py [--env ant] [--generations 512] [--seed 0] [--set NAME=VALUE ...]

``--generations`` changes the budget only (the schedules span it, as the example ties
them to ``num_generations``); ``--set name=value`` changes one more of the example's
settings (``population_size``, ``num_rollouts``, ``episode_length``, ``hidden_sizes``
as ``32,32``, ``log_period``, ``use_normalize_obs``, ``lr_init``, ``lr_decay``,
``std_init``, ``std_decay``, and ``backend``: ``BraxProblem``'s default ``spring``),
e.g. tiny sizes for a smoke test on a CPU. The last layer has the env's action size
(the example's 8 is ant's).

Printed, one JSON line: ``generations`` (``generations // log_period`` chunks of
``log_period``, as the example's loop), ``generations_per_s`` and ``env_steps_per_s``
over the chunks after the first two (the loop's ``jax.lax.scan`` compiles for the first,
and again for the second: the state ``es.init`` gives holds weakly typed numbers, the
state a chunk returns does not; the mean's evaluations between chunks excluded, as
Brax's trainers exclude theirs), ``env_steps`` (generations x population
x rollouts x ``episode_length``: ``BraxProblem`` steps every rollout to the end),
``chunk_s`` (every chunk's seconds), ``compile_s`` (the first two chunks'), ``wall_s``, ``best_fitness``
(evosax's ``best_fitness`` after the last generation, the best member's return over the
run, in the return's sign) and ``eval_return`` (the mean's fitness after the last chunk,
as the example prints it).
"""

from __future__ import annotations

import argparse
import json
import time

import _settings
import jax
import optax
from brax import envs
from evosax.algorithms import Open_ES as ES
from evosax.problems import BraxProblem as Problem
from evosax.problems.networks import MLP, tanh_output_fn

EXAMPLE = {  # examples/02_rl.ipynb, "Brax"
    "population_size": 256, "num_rollouts": 16, "episode_length": 1000,
    "hidden_sizes": (32, 32, 32, 32), "log_period": 32, "use_normalize_obs": True,
    "lr_init": 0.01, "lr_decay": 0.1, "std_init": 0.05, "std_decay": 0.2, "backend": "spring",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="ant", help="a brax env name")
    parser.add_argument("--generations", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help=f"change one of {', '.join(EXAMPLE)}")
    args = parser.parse_args()
    cfg = dict(EXAMPLE)
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in EXAMPLE or not value:
            parser.error(f"--set {item!r}: expected NAME=VALUE with NAME one of {', '.join(EXAMPLE)}")
        cfg[name] = _settings.value(value, EXAMPLE[name])
    num_generations, population_size, log_period = args.generations, cfg["population_size"], cfg["log_period"]
    if num_generations // log_period < 3:
        parser.error(f"--generations {num_generations}: give at least 3 x log_period "
                     f"({3 * log_period}) to time a chunk after the two that compile")
    start_wall = time.perf_counter()
    env_kwargs = {"backend": cfg["backend"]}
    action_size = envs.get_environment(args.env, **env_kwargs).action_size

    # From here on the example's cells, its names and order, with its settings from cfg.
    key = jax.random.key(args.seed)
    policy = MLP(layer_sizes=(*cfg["hidden_sizes"], action_size), output_fn=tanh_output_fn)
    problem = Problem(env_name=args.env, policy=policy, episode_length=cfg["episode_length"],
                      num_rollouts=cfg["num_rollouts"], use_normalize_obs=cfg["use_normalize_obs"],
                      env_kwargs=env_kwargs)
    key, subkey = jax.random.split(key)
    problem_state = problem.init(key)
    key, subkey = jax.random.split(key)
    solution = problem.sample(subkey)
    lr_schedule = optax.exponential_decay(init_value=cfg["lr_init"], transition_steps=num_generations,
                                          decay_rate=cfg["lr_decay"])
    std_schedule = optax.exponential_decay(init_value=cfg["std_init"],
                                           transition_steps=num_generations,
                                           decay_rate=cfg["std_decay"])
    es = ES(population_size=population_size, solution=solution,
            optimizer=optax.adam(learning_rate=lr_schedule), std_schedule=std_schedule)
    params = es.default_params

    def step(carry, key):
        state, params, problem_state = carry
        key_ask, key_eval, key_tell = jax.random.split(key, 3)
        population, state = es.ask(key_ask, state, params)
        fitness, problem_state, _ = problem.eval(key_eval, population, problem_state)
        state, metrics = es.tell(key_tell, population, -fitness, state, params)  # Minimize fitness
        return (state, params, problem_state), metrics

    key, subkey = jax.random.split(key)
    state = es.init(subkey, solution, params)
    chunks, curve = [], []
    for i in range(num_generations // log_period):
        start = time.perf_counter()
        key, subkey = jax.random.split(key)
        keys = jax.random.split(subkey, log_period)
        (state, params, problem_state), metrics = jax.lax.scan(
            step, (state, params, problem_state), keys)
        jax.block_until_ready((state, problem_state, metrics))
        chunks.append(time.perf_counter() - start)
        mean = es.get_mean(state)
        key, subkey = jax.random.split(key)
        fitness, problem_state, info = problem.eval(key, jax.tree.map(lambda x: x[None], mean),
                                                    problem_state)
        curve.append([(i + 1) * log_period, float(fitness.mean())])
    wall = time.perf_counter() - start_wall
    generations = len(chunks) * log_period
    run_s = sum(chunks[2:])
    per_generation = population_size * cfg["num_rollouts"] * cfg["episode_length"]
    timed = (len(chunks) - 2) * log_period
    print(json.dumps({
        "side": "evosax", "env": args.env, "seed": args.seed, "generations": generations,
        "population_size": population_size, "env_steps": generations * per_generation,
        "generations_per_s": timed / run_s, "env_steps_per_s": timed * per_generation / run_s,
        "run_s": run_s, "compile_s": chunks[0] + chunks[1], "chunk_s": chunks, "wall_s": wall,
        "best_fitness": -float(metrics["best_fitness"][-1]), "eval_return": curve[-1][1],
        "curve": curve, "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
        "device": jax.devices()[0].device_kind, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main()
