"""Row 7 of the accelerator table: EvoRL's own PPO and OpenES workflows against ours.

    python benchmarks/accelerator/evorl.py --algo ppo|openes [--env ant] [--budget N] \\
        [--seed 42] [--sides env_only,ours,evorl] [--evorl-configs DIR] \\
        [--evorl-set KEY=VALUE ...] [--override KEY=VALUE ...] \\
        [--pythonpath DIR] [--evorl-pythonpath DIR] [--timeout S] [--json FILE]
    python benchmarks/accelerator/evorl.py --table ppo|openes FILE ...

Three programs one after the other on the same chip, each in its own process:

* the limit: the env alone with random actions on the batch a step of the trainers runs
  (``env_limit.py --env brax/<env>``: brax's training wrapper, 1000-step episodes, one
  jitted scan; PPO 4,096 envs, OpenES 128 members x 16 episodes = 2,048);
* ours: ``jaxtrainer fit ppo --config ppo_brax.yaml`` or ``jaxtrainer fit openes`` on
  ``env.name=brax/<env>`` with EvoRL's settings as overrides (``PPO_OVERRIDES``,
  ``OPENES_OVERRIDES``; the tables below), one evaluation at the end and
  ``callbacks.throughput=true``: env steps/s of the training loop, compilation excluded,
  the CSV and TensorBoard loggers included;
* EvoRL: its workflow at its own hydra configs (``_evorl_original.py``: EvoRL's
  ``scripts/train.py`` path, ``agent=exp/ppo/brax/<env>`` or
  ``agent=exp/ec/openes/brax-default`` with ``env=brax/<env>``), the same budget, its
  recorders off; timed over its iterations after the first, which compiles, its
  evaluations excluded.

``--budget``: PPO env steps (EvoRL's ``total_timesteps``, default its 50,000,000: 153
iterations of 4,096 envs x 80 steps, EvoRL's ``ceil``; ours gets the same 153 x 327,680),
OpenES generations (EvoRL's ``num_iters``, default its 2,000). ``--evorl-set`` adds hydra
overrides to EvoRL's side (``eval_interval=...``, tiny sizes for a smoke run), ``--override``
``key=value`` overrides to ours'.

PPO (EvoRL ``configs/agent/ppo.yaml`` under ``exp/ppo/brax/ant.yaml``) -> ours
(``ppo_brax.yaml`` and ``PPO_OVERRIDES``):

=============================================  =========================================
EvoRL                                          ours
=============================================  =========================================
num_envs 4096, rollout_length 80               algorithm.num_envs=4096, num_steps=80
minibatch_size 10240 (32 a rollout)            algorithm.num_minibatches=32
reuse_rollout_epochs 4                         algorithm.update_epochs=4
gae_horizon 0 (GAE over the whole rollout)     algorithm.unroll_length=null
discount 0.97, gae_lambda 0.95                 algorithm.gamma=0.97, gae_lambda=0.95
clip_epsilon 0.2                               algorithm.clip_eps=0.2
loss weights 1.0, critic 0.5 x mean (V-R)^2    algorithm.vf_coef=1.0 (ours: 0.5 x mean)
entropy weight -0.01 (one-sample estimate)     algorithm.ent_coef=0.01 (policy brax: too)
Adam 3e-4, constant; grad clip norm 10         algorithm.lr=3e-4, anneal_lr=false,
                                               max_grad_norm=10
actor and critic 256 x 256, relu               hidden_sizes=[256,256], critic_hidden_sizes
                                               =[256,256], activation=relu
tanh Gaussian, scale softplus + 0.001          algorithm.policy=brax (the same)
normalize_obs true, normalize_gae false        normalize_observations=true,
                                               normalize_advantages=false
no reward scaling, no value clipping           reward_scaling=1.0, clip_value_loss=false
eval 128 episodes every 5 iterations           eval_episodes=128, at the end only
max_episode_steps 1000 (env/brax/ant.yaml)     env.episode_length=1000
seed 42                                        trainer.seed=42
=============================================  =========================================

Not expressible in ours: EvoRL's envpool-style autoreset (the step after an episode's
end is a reset step, counted as an env step and masked out of the losses; ours resets in
the same step), and its networks' initialisation (flax's defaults; ours' ``brax`` policy
takes Brax's lecun_uniform).

OpenES (EvoRL ``configs/agent/ec/openes.yaml`` under ``exp/ec/openes/brax-default.yaml``)
-> ours (``openes.yaml`` and ``OPENES_OVERRIDES``):

=============================================  =========================================
EvoRL                                          ours
=============================================  =========================================
pop_size 128, mirror_sampling                  trainer.population_size=128 (evosax's
                                               Open_ES samples mirrored pairs too)
episodes_for_fitness 16 (16 envs), explore     algorithm.num_episodes=16 (the greedy
false, discount 1.0                            policy; the undiscounted mean return)
actor 16 x 16, relu, tanh output, bias         hidden_sizes=[16,16], activation=relu
                                               (tanh output)
Adam, lr 0.01 fixed (decay 1.0)                optimizer=adam, learning_rate=0.01,
                                               learning_rate_decay=1.0
noise std 0.02 fixed (decay 1.0)               algorithm.std=0.02, std_decay=1.0
centered ranks in [-0.5, 0.5]                  fitness_shaping=centered_rank
the episode a fixed 1000-step scan             algorithm.episode_loop=scan,
                                               env.episode_length=1000
normalize_obs (see below)                      normalize_observations=true
eval 128 episodes every 10 iterations          eval_episodes=128, at the end only
num_iters 2000, seed 42                        trainer.max_generations, trainer.seed=42
=============================================  =========================================

Not expressible in ours: EvoRL's ``weight_decay`` 0.005 (added to the gradient,
``g + 0.005 x mean``, before Adam; ours' ``algorithm.weight_decay`` is evosax's L2
penalty on the fitness, another thing: left at 0), and its observation statistics (from
``random_timesteps`` 10,000 steps of random actions at the start, then fixed; ours'
running statistics follow the members' episodes every generation).

Counts: PPO's env steps on both sides are envs x steps a rollout (EvoRL's
``sampled_timesteps``). OpenES: both sides step every member's episodes for the whole
1000-step scan, so the row's ``env_steps_per_s`` is generations/s x 128 x 16 x 1000 on
both sides (EvoRL's own count, the episodes' steps until they end, is its
``evorl_env_steps_per_s``) and generations/s is the comparison. Returns: PPO, the
policy's mean return over 128 greedy episodes at the end (both); OpenES, the best
member's fitness over the run (``best_fitness``: EvoRL's ``best_objective``, ours'
``es/best_fitness``) and the mean's evaluation return.

Installs: EvoRL beside ours' packages (``requirements/evorl.txt``: its release and the
Hydra it composes its configs with, which takes an older OmegaConf, into a folder of its
own before ours on EvoRL's side only: ``--evorl-pythonpath``). EvoRL runs under
``python -O``: its running statistics assert ``isinstance(x, chex.Array)``, which a
traced array fails with jax 0.10 (``chex.Array`` is a ``typing.Union``), and ``-O`` skips
asserts without touching its code; and ``-P`` keeps this folder off its path (this
script's name would hide EvoRL's package). Printed: one JSON line per program, then a summary
line; ``--json`` appends the lines to FILE; ``--table ALGO FILE ...`` prints the rows of
``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys

from sac import fit_row, row_parser, run_sides, table
from seeds import _run

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEED, EPISODE = 42, 1000  # EvoRL's config.yaml seed; env/brax/<env>.yaml max_episode_steps
PPO_ENVS, PPO_STEPS, PPO_BUDGET = 4096, 80, 50_000_000  # exp/ppo/brax/ant.yaml
POPULATION, EPISODES, GENERATIONS = 128, 16, 2000  # exp/ec/openes/brax-default.yaml
PPO_OVERRIDES = (
    f"algorithm.num_envs={PPO_ENVS}",
    f"algorithm.num_steps={PPO_STEPS}",
    "algorithm.num_minibatches=32",
    "algorithm.update_epochs=4",
    "algorithm.unroll_length=null",
    "algorithm.gamma=0.97",
    "algorithm.gae_lambda=0.95",
    "algorithm.clip_eps=0.2",
    "algorithm.vf_coef=1.0",
    "algorithm.ent_coef=0.01",
    "algorithm.lr=3e-4",
    "algorithm.anneal_lr=false",
    "algorithm.max_grad_norm=10",
    "algorithm.hidden_sizes=[256,256]",
    "algorithm.critic_hidden_sizes=[256,256]",
    "algorithm.activation=relu",
    "algorithm.policy=brax",
    "algorithm.normalize_observations=true",
    "algorithm.normalize_advantages=false",
    "algorithm.reward_scaling=1.0",
    "algorithm.clip_value_loss=false",
    "algorithm.eval_episodes=128",
    f"env.episode_length={EPISODE}",
    "trainer.log_every_n_steps=5",
)
"""``ppo_brax.yaml`` set to EvoRL's PPO settings for brax (the docstring's table)."""
OPENES_OVERRIDES = (
    f"trainer.population_size={POPULATION}",
    f"algorithm.num_episodes={EPISODES}",
    "algorithm.hidden_sizes=[16,16]",
    "algorithm.activation=relu",
    "algorithm.optimizer=adam",
    "algorithm.learning_rate=0.01",
    "algorithm.learning_rate_decay=1.0",
    "algorithm.std=0.02",
    "algorithm.std_decay=1.0",
    "algorithm.fitness_shaping=centered_rank",
    "algorithm.weight_decay=0.0",
    "algorithm.episode_loop=scan",
    "algorithm.normalize_observations=true",
    "algorithm.eval_episodes=128",
    f"env.episode_length={EPISODE}",
    "trainer.log_every_n_generations=10",
)
"""``openes.yaml`` set to EvoRL's OpenES settings for brax (the docstring's table)."""
ALGOS = {
    "ppo": {"budget": PPO_BUDGET, "envs": PPO_ENVS},
    "openes": {"budget": GENERATIONS, "envs": POPULATION * EPISODES},
}
TABLES = {
    "ppo": {"peer": "evorl", "title": "EvoRL", "family": "brax", "envs": PPO_ENVS},
    "openes": {
        "peer": "evorl",
        "title": "EvoRL",
        "family": "brax",
        "envs": POPULATION * EPISODES,
        "rate": "generations_per_s",
        "rate_label": "generations/s",
        "result": "best_fitness",
        "result_label": "best fitness",
    },
}


def ppo_iterations(env_steps: int, num_envs: int = PPO_ENVS, num_steps: int = PPO_STEPS) -> int:
    """EvoRL's PPO iterations for ``total_timesteps=env_steps``: ``ceil`` of the budget over
    one rollout (its ``learn``)."""
    return math.ceil(env_steps / (num_envs * num_steps))


def ours(
    algo: str,
    env: str,
    budget: int,
    seed: int,
    extra: str | None,
    timeout: float,
    overrides: tuple[str, ...] = (),
) -> dict:
    """Ours at EvoRL's settings: PPO for EvoRL's iterations of ``budget`` env steps, or
    OpenES for ``budget`` generations (``overrides``: more ``key=value`` arguments, after
    EvoRL's, e.g. tiny sizes for a smoke run; sizes in them count for PPO's budget)."""
    if algo == "ppo":
        sizes = {"num_envs": PPO_ENVS, "num_steps": PPO_STEPS}
        for item in overrides:
            key, _, value = item.partition("=")
            if key.removeprefix("algorithm.") in sizes:
                sizes[key.removeprefix("algorithm.")] = int(value)
        rollout = sizes["num_envs"] * sizes["num_steps"]
        steps = ppo_iterations(budget, **sizes) * rollout
        return {
            **fit_row(
                "ppo",
                "ppo_brax.yaml",
                f"brax/{env}",
                steps,
                seed,
                extra,
                timeout,
                (*PPO_OVERRIDES, *overrides),
            ),
            "algo": algo,
        }
    row = fit_row(
        "openes",
        "openes.yaml",
        f"brax/{env}",
        budget,
        seed,
        extra,
        timeout,
        (*OPENES_OVERRIDES, *overrides),
        read={"best_fitness": "es/best_fitness"},
        budget="max_generations",
        eval_every="eval_every_n_generations",
    )
    return {
        **row,
        "algo": algo,
        "generations": budget,
        "generations_per_s": row["env_steps_per_s"] * budget / row["env_steps"],
    }


def evorl(
    algo: str,
    env: str,
    budget: int,
    seed: int,
    extra: str | None,
    timeout: float,
    settings: tuple[str, ...] = (),
    configs: str | None = None,
    agent: str | None = None,
) -> dict:
    """EvoRL's workflow at its own configs for ``budget`` (PPO ``total_timesteps``, OpenES
    ``num_iters``; ``settings``: more hydra overrides of its config, ``configs``: its
    configs folder, ``agent``: another of its agent configs, for a smoke run on a small
    env). OpenES: ``env_steps_per_s`` counts every step of each episode's scan (EvoRL's own
    count is ``evorl_env_steps_per_s``)."""
    key = "total_timesteps" if algo == "ppo" else "num_iters"
    out = _run(
        [
            sys.executable,
            "-O",
            "-P",
            str(HERE / "_evorl_original.py"),
            "--algo",
            algo,
            "--env",
            env,
            "--seed",
            str(seed),
            *(["--configs", configs] if configs else []),
            *(["--agent", agent] if agent else []),
            "--set",
            f"{key}={budget}",
            *(x for kv in settings for x in ("--set", kv)),
        ],
        extra,
        timeout,
    )
    row = json.loads(out.strip().splitlines()[-1])
    if algo == "openes":
        s = row["settings"]
        stepped = s["pop_size"] * s["episodes_for_fitness"] * s["env"]["max_episode_steps"]
        row["evorl_env_steps_per_s"] = row["env_steps_per_s"]
        row["env_steps_per_s"] = row["generations_per_s"] * stepped
    return row


def limit(
    algo: str,
    env: str,
    extra: str | None,
    timeout: float,
    batch: int | None = None,
    length: int | None = None,
) -> dict:
    """``brax/<env>`` alone on the batch a step of ``algo`` runs (or ``batch``)."""
    out = _run(
        [
            sys.executable,
            str(HERE / "env_limit.py"),
            "--env",
            f"brax/{env}",
            "--episode-length",
            str(EPISODE),
            "--batch",
            str(batch or ALGOS[algo]["envs"]),
            *(["--length", str(length)] if length else []),
        ],
        extra,
        timeout,
    )
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return {**line, "env": env, "algo": algo}


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        if sys.argv[2:3] not in (["ppo"], ["openes"]):
            sys.exit("usage: evorl.py --table ppo|openes FILE ...")
        print(table(sys.argv[3:], **TABLES[sys.argv[2]]))
        return
    parser = row_parser(
        __doc__, "ant", "a brax env name (EvoRL has a config for it)", None, SEED, None, "evorl"
    )
    parser.add_argument("--algo", required=True, choices=sorted(ALGOS))
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="PPO env steps (default 50,000,000), OpenES generations (2,000)",
    )
    parser.add_argument(
        "--evorl-configs",
        default=os.environ.get("EVORL_CONFIGS"),
        help="EvoRL's configs folder (default: .peers/evorl/configs)",
    )
    parser.add_argument(
        "--evorl-pythonpath",
        default=None,
        help="EvoRL's own package folder, before --pythonpath on its side",
    )
    parser.add_argument(
        "--evorl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more hydra override of EvoRL's config",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more of ours' config overrides, after EvoRL's settings",
    )
    args = parser.parse_args()
    algo, env, seed = args.algo, args.env, args.seed
    budget = ALGOS[algo]["budget"] if args.budget is None else args.budget
    if budget < 2:
        parser.error(f"--budget {budget}: expected at least 2 (env steps or generations)")
    evorl_path = os.pathsep.join(p for p in (args.evorl_pythonpath, args.pythonpath) if p) or None
    run = {
        "env_only": lambda: limit(algo, env, args.pythonpath, args.timeout),
        "ours": lambda: ours(
            algo, env, budget, seed, args.pythonpath, args.timeout, tuple(args.override)
        ),
        "evorl": lambda: evorl(
            algo,
            env,
            budget,
            seed,
            evorl_path,
            args.timeout,
            tuple(args.evorl_set),
            args.evorl_configs,
        ),
    }
    rate, result = (
        TABLES[algo].get("rate", "env_steps_per_s"),
        TABLES[algo].get("result", "eval_return"),
    )
    run_sides(run, args.sides, env, seed, args.json, parser, peer="evorl", rate=rate, result=result)


if __name__ == "__main__":
    main()
