"""Row 5 of the accelerator table: OpenAI-ES on a brax env against evosax's own loop.

    python benchmarks/accelerator/openes.py [--env ant] [--generations 512] [--log-period 32] \\
        [--seed 0] [--sides env_only,ours,evosax] [--episode-loop while|scan] \\
        [--pythonpath DIR] [--json FILE]

Three programs one after the other on the same chip, each in its own process:

* the limit: the env alone with random actions on the 4,096 envs a generation steps
  together (256 members x 16 rollouts; ``env_limit.py --env brax/<env> --backend
  spring``: brax's training wrapper, 1000-step episodes, one jitted scan);
* ours: ``jaxtrainer fit openes env.name=brax/<env>`` with the example's settings as
  overrides (``EXAMPLE_OVERRIDES``: population 256, 16 episodes a member, 1000-step
  episodes of brax's ``spring`` pipeline, a tanh 32x32x32x32 policy, Adam 0.01 on the
  mean decayed to 0.001 and std 0.05 decayed to 0.01 over the run, observations normalised
  by running statistics, centered ranks, a log interval of 32 generations, 16 evaluation
  episodes), ``trainer.max_generations`` the budget, one evaluation at the end and
  ``callbacks.throughput=true``: generations/s and env steps/s of the training loop
  (compilation excluded, the CSV and TensorBoard loggers included);
* evosax: its reinforcement learning example's loop (``_evosax_original.py``:
  ``BraxProblem`` and ``Open_ES`` with its settings, ``jax.lax.scan`` of ``ask``,
  ``eval``, ``tell`` over chunks of 32 generations), the same generations, timed over
  the chunks after the two that compile.

``--log-period`` changes the example's chunk of generations (and ours' log interval
with it): the generations must be a multiple of it, at least three chunks.

A generation is at most ``population x rollouts x 1000`` env steps: evosax's
``BraxProblem`` steps every rollout for 1000 steps, ours stops once every episode of the
generation has ended (both count that many env steps a generation in env steps/s, so
generations/s is the comparison). Ours has the example's running observation
statistics (``algorithm.normalize_observations``; counted over each member's episodes
until they end, where evosax counts every step of its rollouts, and clipped at 10
standard deviations) and its decays of the learning rate (0.01 to 0.001) and std (0.05 to
0.01) over the run (``algorithm.learning_rate_decay``, ``std_decay``). ``--episode-loop
scan`` runs ours' episodes as evosax's rollouts run (every step of the time limit in a
``lax.scan``) instead of a loop that stops once every episode has ended. Best fitness: the best member's return over the run, both sides evosax's
``best_fitness`` (ours logs it as ``es/best_fitness``); ``eval_return`` is the mean's
return at the end (ours: 16 greedy episodes; evosax: its example's evaluation of the
mean, 16 rollouts).

Both sides use the same packages (``requirements/ours.txt``; ``--pythonpath`` is added
to ``PYTHONPATH``). Printed: one JSON line per program, then a summary line; ``--json``
appends the lines to FILE; ``openes.py --table FILE ...`` prints the rows of
``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import pathlib
import sys

from sac import fit_row, row_parser, run_sides, table
from seeds import _run

HERE = pathlib.Path(__file__).resolve().parent
POPULATION, ROLLOUTS, EPISODE, LOG_PERIOD = 256, 16, 1000, 32  # evosax's example
EXAMPLE_OVERRIDES = (
    f"trainer.population_size={POPULATION}", f"algorithm.num_episodes={ROLLOUTS}",
    f"env.episode_length={EPISODE}", "env.backend=spring", "algorithm.hidden_sizes=[32,32,32,32]",
    "algorithm.activation=tanh", "algorithm.learning_rate=0.01", "algorithm.optimizer=adam",
    "algorithm.std=0.05", "algorithm.fitness_shaping=centered_rank",
    f"trainer.log_every_n_generations={LOG_PERIOD}", f"algorithm.eval_episodes={ROLLOUTS}",
    "algorithm.normalize_observations=true", "algorithm.learning_rate_decay=0.1",
    "algorithm.std_decay=0.2",
)
"""``openes.yaml`` set to the settings of evosax's example (the decays span
``trainer.max_generations``, as the example's schedules span its ``num_generations``)."""
LOOPS = ("while", "scan")
"""Ours' ``algorithm.episode_loop`` choices (``--episode-loop`` picks one; its JSON line
names it)."""
TABLE = {"peer": "evosax", "title": "evosax", "family": "brax", "envs": POPULATION * ROLLOUTS,
         "rate": "generations_per_s", "rate_label": "generations/s", "result": "best_fitness",
         "result_label": "best fitness"}


def ours(env: str, generations: int, seed: int, extra: str | None, timeout: float,
         overrides: tuple[str, ...] = ()) -> dict:
    """``jaxtrainer fit openes`` on ``brax/<env>`` at evosax's example's settings for
    ``generations`` (``overrides``: more ``key=value`` arguments, after those)."""
    row = fit_row("openes", "openes.yaml", f"brax/{env}", generations, seed, extra, timeout,
                  (*EXAMPLE_OVERRIDES, *overrides), read={"best_fitness": "es/best_fitness"},
                  budget="max_generations", eval_every="eval_every_n_generations")
    per_generation = row["env_steps"] / generations  # population x episodes x episode length
    return {**row, "generations": generations,
            "generations_per_s": row["env_steps_per_s"] / per_generation}


def evosax(env: str, generations: int, seed: int, extra: str | None, timeout: float,
           settings: tuple[str, ...] = ()) -> dict:
    """evosax's example loop on ``env`` for ``generations`` (``settings``: ``name=value``
    changes of the example's, for a smoke test)."""
    out = _run([sys.executable, str(HERE / "_evosax_original.py"), "--env", env,
                "--generations", str(generations), "--seed", str(seed),
                *(x for kv in settings for x in ("--set", kv))], extra, timeout)
    return json.loads(out.strip().splitlines()[-1])


def limit(env: str, extra: str | None, timeout: float, batch: int = POPULATION * ROLLOUTS) -> dict:
    """``brax/<env>`` (spring) alone on ``batch`` envs."""
    out = _run([sys.executable, str(HERE / "env_limit.py"), "--env", f"brax/{env}",
                "--backend", "spring", "--episode-length", str(EPISODE), "--batch", str(batch)],
               extra, timeout)
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return {**line, "env": env}


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2:], **TABLE))
        return
    parser = row_parser(__doc__, "ant", "a brax env name", None, 0, None, "evosax")
    parser.add_argument("--generations", type=int, default=512,
                        help="both sides' budget: a multiple of --log-period, 3 of them at least")
    parser.add_argument("--log-period", type=int, default=LOG_PERIOD,
                        help="generations in one of evosax's chunks, and in ours' log interval")
    parser.add_argument("--episode-loop", default="while",
                        help=f"ours' algorithm.episode_loop: one of {', '.join(LOOPS)}")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="one more of ours' config overrides, after the example's "
                             "(e.g. a tiny population for a smoke run)")
    args = parser.parse_args()
    if args.episode_loop not in LOOPS:
        parser.error(f"--episode-loop {args.episode_loop!r}: expected one of {', '.join(LOOPS)}")
    gens, period = args.generations, args.log_period
    if period < 1 or gens % period or gens < 3 * period:
        parser.error(f"--generations {gens} --log-period {period}: expected a positive period "
                     "and a multiple of it of at least 3 periods (evosax's first two chunks "
                     "compile)")
    env, seed = args.env, args.seed
    log = (f"trainer.log_every_n_generations={period}",
           f"algorithm.episode_loop={args.episode_loop}", *args.override)
    run = {"env_only": lambda: limit(env, args.pythonpath, args.timeout),
           "ours": lambda: {**ours(env, gens, seed, args.pythonpath, args.timeout, log),
                            "episode_loop": args.episode_loop},
           "evosax": lambda: evosax(env, gens, seed, args.pythonpath, args.timeout,
                                    (f"log_period={period}",))}
    run_sides(run, args.sides, env, seed, args.json, parser, peer="evosax",
              rate="generations_per_s", result="best_fitness")


if __name__ == "__main__":
    main()
