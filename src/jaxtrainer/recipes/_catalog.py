"""The shipped recipes: each one's config file, one-line summary and ``--help`` text.

A recipe is a module built from a YAML config that ships inside the package
(``jaxtrainer/recipes/configs/<name>.yaml``) and trained by ``jaxtrainer fit
<name>``; in a clone, ``python recipes/<name>.py`` is the same command. The
module each recipe builds is :data:`jaxtrainer.recipes._modules.BUILDERS`'.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, NamedTuple

CONFIGS = Path(__file__).parent / "configs"
"""The shipped YAML configs (package data)."""

FINAL_METRIC = "eval/episode_return"
"""The metric a recipe's last line prints unless its :attr:`Recipe.final_metric` says otherwise."""

LAST_LINE = ("The last line printed is ``{metric}=<value> run_dir=<dir>``{what}. "
             "Every key of the config (default ``{config}``, inside the package; "
             "``--print-config`` prints it) can be overridden as ``section.key=value``.")

FAST_COMPILE = ("On CPU the recipe lowers XLA's LLVM optimisation level before JAX starts: "
                "these runs are short, so compiling faster pays more than faster code (about "
                "2x less compile time). Set ``JAXTRAINER_FAST_COMPILE=0`` to keep XLA's default.")


class Recipe(NamedTuple):
    """One shipped recipe.

    Attributes:
      summary: one line (``jaxtrainer fit --list``).
      examples: command lines after ``jaxtrainer fit <name>``, each with a comment.
      notes: more about it (``--help``), or ``""``.
      last_line: what the final metric measures, or ``""``.
      population: trained by a :class:`~jaxtrainer.PopulationTrainer` (``trainer:``
        counts generations) rather than a :class:`~jaxtrainer.Trainer`.
      fast_compile: lowers XLA's CPU optimisation level before JAX starts
        (:data:`FAST_COMPILE`).
      final_metric: the evaluation metric the last line prints (:data:`FINAL_METRIC`).
    """

    summary: str
    examples: tuple[str, ...]
    notes: str = ""
    last_line: str = ""
    population: bool = False
    fast_compile: bool = False
    final_metric: str = FINAL_METRIC


def _pbt(what: str) -> str:
    return (f"The members (each one single-device {what} with the sizes under ``algorithm:``) "
            "are sharded over the devices; every ``pbt.ready_every_n_steps`` training steps "
            "the worst quarter copies the best quarter and perturbs the copied "
            "hyperparameters (``pbt.hyperparams``, traced values in the state: one program "
            "trains every member).")


_BEST_MEMBER = ", the evaluation return of the member with the best training fitness"
_QD_SCORE = (" (QDax's QD-score of the final repertoire: the sum over filled cells of "
             "fitness + algorithm.qd_offset)")
_DEVICES4 = "trainer.strategy=pmap   # with XLA_FLAGS=--xla_force_host_platform_device_count=4"


def _qd(summary: str, examples: tuple[str, ...], search: str, cls: str, logged: str = "",
        fast_compile: bool = False) -> Recipe:
    """A quality-diversity recipe: ``search`` (what a generation does), the module class
    ``cls`` and the metrics it logs beside the QD ones."""
    notes = (f"{search} (``jaxtrainer.population.{cls}``). Logged: qd/score, qd/coverage "
             f"(percent of cells filled), qd/max_fitness{logged}."
             + (" " + FAST_COMPILE if fast_compile else ""))
    return Recipe(summary, (*examples, _DEVICES4), notes=notes, last_line=_QD_SCORE,
                  population=True, fast_compile=fast_compile, final_metric="eval/qd_score")


RECIPES: dict[str, Recipe] = {
    "ppo": Recipe("PPO on a gymnax environment (CartPole-v1)", (
        "                                          # CartPole-v1, every local device",
        "trainer.strategy=pmap env.name=Acrobot-v1 trainer.seed=3",
        "trainer.ckpt_path=last                    # resume the newest run",
        "--config ppo_brax_cpu.yaml                # brax inverted_pendulum on a CPU (minutes)",
        "--config ppo_minatar.yaml                 # CNN torso on Breakout-MinAtar",
        "network.torso.class_path=my_pkg.MyTorso   # one's own flax module as the torso",
        "--config my_ppo.yaml trainer.seed=1       # another YAML, then overrides")),
    "a2c": Recipe("A2C on a gymnax environment (CartPole-v1)", (
        "                                          # CartPole-v1, every local device",
        "trainer.strategy=pmap trainer.seed=3")),
    "impala": Recipe("IMPALA (synchronous, V-trace) on a gymnax environment (CartPole-v1)", (
        "                                          # CartPole-v1, every local device",
        "trainer.strategy=pmap trainer.seed=3")),
    "dqn": Recipe("Double DQN on a gymnax environment (CartPole-v1)", (
        "                                          # CartPole-v1, every local device",
        "algorithm.tau=0.005 algorithm.target_update_interval=8")),
    "c51": Recipe("C51: DQN with a categorical return distribution (CartPole-v1)", (
        "                                          # CartPole-v1, CleanRL c51_jax.py's settings",
        "algorithm.num_atoms=51 algorithm.v_min=0 algorithm.v_max=100")),
    "rainbow": Recipe("Rainbow's parts: C51 + 3-step returns + dueling + double DQN (CartPole-v1)", (
        "                                          # CartPole-v1, the c51 recipe's settings",
        "algorithm.n_step=5 algorithm.dueling=false")),
    "pqn": Recipe("PQN: Q-learning on parallel envs without replay or target network (CartPole-v1)", (
        "                                          # CartPole-v1, CleanRL pqn.py's settings",
        "--config pqn_minatar.yaml                 # CNN torso on Breakout-MinAtar",
        "trainer.strategy=pmap trainer.seed=3")),
    "sac": Recipe("Soft Actor-Critic on continuous control (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "--config sac_brax.yaml                    # brax (GPU): a file from --print-config")),
    "crossq": Recipe("CrossQ: SAC without target networks, batch-renormalised (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, 20k env steps",
        "trainer.max_env_steps=50000 trainer.seed=3")),
    "td3": Recipe("TD3 on continuous control (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "trainer.strategy=pmap trainer.seed=3")),
    "ddpg": Recipe("DDPG (TD3 with one critic, no smoothing or delay) (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "algorithm.twin_critics=true               # an ablation toward TD3"),
        notes="DDPG (Lillicrap et al. 2016) is TD3 with one critic, no target policy "
              "smoothing and no delayed actor updates (``jaxtrainer.algorithms.DDPG``)."),
    "cem_rl": Recipe("CEM-RL: cross-entropy method + TD3 gradient steps (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "trainer.strategy=pmap trainer.seed=3"),
        notes="One training step is one generation.",
        last_line=" (the CEM mean actor, greedy)"),
    "cemrl_openes": Recipe("CEMRL-OpenES: OpenAI-ES + TD3 gradient steps (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "algorithm.population_size=20 algorithm.num_rl_members=10"),
        notes="CEM-RL with OpenAI-ES as its search distribution: half of each generation's "
              "samples take TD3 actor steps before they are evaluated; one training step is "
              "one generation.",
        last_line=" (the search's mean, greedy)"),
    "erl": Recipe("ERL: a genetic algorithm of actors + a TD3 learner (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "algorithm.twin_critics=false algorithm.policy_noise=0 algorithm.policy_delay=1"),
        notes="The TD3 learner's actor joins the population; one training step is one "
              "generation.",
        last_line=" (the champion, greedy)"),
    "openes": Recipe("OpenAI-ES neuroevolution of an MLP policy (CartPole-v1)", (
        "                                          # CartPole-v1, every local device",
        "trainer.population_size=128 trainer.strategy=shard_map",
        "algorithm.name=SNES algorithm.learning_rate=null   # any evosax ES",
        "--config ars.yaml                         # ARS, SimpleES, Sep-CMA-ES: see the docs"),
        notes=FAST_COMPILE, population=True, fast_compile=True),
    "cma_es": Recipe("CMA-ES neuroevolution of a 30-parameter policy (CartPole-v1)", (
        "                                          # CartPole-v1",
        "algorithm.hidden_sizes=[8] trainer.population_size=64"),
        notes=FAST_COMPILE, population=True, fast_compile=True),
    "erl_es": Recipe("ERL-ES: an evolution strategy's samples + a TD3 learner (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "algorithm.population_size=16 algorithm.es_std=0.05"),
        notes="The TD3 learner's actor is one of each generation's samples; the champion is "
              "the search's mean; one training step is one generation.",
        last_line=" (the search's mean, greedy)"),
    "erl_eda": Recipe("ERL-EDA: OpenAI-ES whose mean follows a TD3 learner (Pendulum-v1)", (
        "                                          # gymnax Pendulum-v1, CPU",
        "algorithm.rl_injection_stepsize=0.5"),
        notes="The search's mean moves to the TD3 learner's actor every generation; one "
              "training step is one generation.",
        last_line=" (the search's mean, greedy)"),
    "map_elites": _qd("MAP-Elites on QDax's planar arm (8 joints, 100x100 end-effector cells)", (
        "                                          # QDax's me_arm_example.py settings",
        "algorithm.line_sigma=0.05 env.num_dims=100  # Iso+LineDD on a 100-joint arm"),
        "Quality-diversity search: one generation emits trainer.population_size offspring of "
        "elites drawn from the repertoire (Iso+LineDD variation), evaluates them split over "
        "the devices and keeps, per cell of descriptor space, the best", "MAPElites",
        fast_compile=True),
    "pga_me": _qd("PGA-ME on QDax's walker2d_uni (feet-contact descriptors, 32x32 cells)", (
        "                                          # QDax's examples/pgame.ipynb settings",
        "trainer.population_size=16 env.episode_length=50 algorithm.num_pg_training_steps=10"
        "  # a CPU-sized run"),
        "Quality-diversity search with a critic: each generation, half of "
        "trainer.population_size offspring are elites taken policy-gradient steps up a TD3 "
        "critic trained on every evaluated episode's transitions (plus the critic's own greedy "
        "actor), half Iso+LineDD variations of elites; all are evaluated split over the "
        "devices and kept per cell of descriptor space when best", "PGAME", ", critic/loss"),
    "me_es": _qd("ME-ES on QDax's walker2d_uni (feet-contact descriptors, 32x32 cells)", (
        "                                          # QDax's examples/mees.ipynb settings",
        "algorithm.use_explore=false               # ME-ES exploit: fitness gradients only"),
        "Quality-diversity search by evolution strategies: each generation is one OpenAI-ES "
        "step of one elite (trainer.population_size mirrored samples evaluated split over the "
        "devices), up the fitness or up the novelty against an archive of past descriptors, "
        "alternating every algorithm.num_optimizer_steps steps; the step's offspring is "
        "evaluated and kept in its cell of descriptor space when best", "MEES",
        ", es/explore, es/offspring_fitness"),
    "nsga2": Recipe("NSGA-II on ZDT1 (30 variables, 2 objectives; Deb et al. 2002's settings)", (
        "                                          # 100 members, 250 generations",
        "env.name=zdt3 trainer.seed=3              # ZDT2, ZDT3: the other fronts",
        _DEVICES4),
        notes="Multi-objective search: each generation's trainer.population_size offspring "
              "(binary tournaments on front and crowding distance, SBX crossover, polynomial "
              "mutation) are evaluated split over the devices, each returning one value per "
              "objective; parents and offspring are sorted into Pareto fronts and the best "
              "half survives (``jaxtrainer.population.NSGA2``). Logged: moo/hypervolume "
              "(from algorithm.reference_point), moo/front_size, fitness/<j>/* per objective. "
              "Objectives are maximised: ZDT's minimised (f1, f2) appear as (-f1, -f2). "
              + FAST_COMPILE,
        last_line=" (the hypervolume the final population dominates from "
                  "algorithm.reference_point; ZDT1's true front: 0.6667)",
        population=True, fast_compile=True, final_metric="eval/hypervolume"),
    "pbt_ppo": Recipe("Population-based training of PPO agents (CartPole-v1, 8 members)", (
        "                                          # every local device",
        _DEVICES4,
        "pbt.population_size=16 pbt.ready_every_n_steps=10"),
        notes=_pbt("PPO agent"), last_line=_BEST_MEMBER),
    "pbt_cso": Recipe("PBT-CSO: PPO agents tuned by a competitive swarm (CartPole-v1, 8 members)", (
        "                                          # every local device",
        _DEVICES4,
        "pbt.population_size=16 pbt.ready_every_n_steps=10"),
        notes="The members (each one single-device PPO agent with the sizes under "
              "``algorithm:``) are sharded over the devices; every "
              "``pbt.ready_every_n_steps`` training steps they meet in random pairs and "
              "each pair's loser copies the winner's state and moves its hyperparameters "
              "toward the winner's (the competitive swarm optimiser).",
        last_line=_BEST_MEMBER),
    "pbt_sac": Recipe("Population-based training of SAC agents (Pendulum-v1, 4 members)", (
        "                                          # every local device",
        _DEVICES4,
        "pbt.population_size=8 pbt.ready_every_n_steps=1000"),
        notes=_pbt("SAC agent") + " A copy takes networks, optimizer states and the replay "
              "buffer.", last_line=_BEST_MEMBER),
    "pbt_openes": Recipe("Population-based training of OpenAI-ES runs (CartPole-v1, 4 runs)", (
        "                                          # every local device",
        _DEVICES4,
        "pbt.population_size=8 algorithm.population_size=64"),
        notes="Each member is one OpenAI-ES run whose training step is one generation "
              "(``jaxtrainer.population.GenerationModule``); every "
              "``pbt.ready_every_n_steps`` generations the worst quarter copies the best "
              "quarter's search distribution and optimizer state and perturbs the copied "
              "learning rate and search std. " + FAST_COMPILE,
        last_line=" (the mean policy of the member with the best training fitness)",
        fast_compile=True),
}
"""``name -> Recipe``, in the order ``jaxtrainer fit --list`` shows them."""


def config_file(recipe: str) -> Path:
    """The shipped config of ``recipe``: ``CONFIGS/<recipe>.yaml``."""
    return CONFIGS / f"{recipe}.yaml"


def about(recipe: str, prog: str) -> str:
    """``--help``'s description of ``recipe``, its examples run as ``prog``."""
    entry = RECIPES[recipe]
    width = max((len(prog) + 1 + len(e.split("#")[0].rstrip()) for e in entry.examples
                 if "#" in e), default=0)
    lines = []
    for example in entry.examples:
        command, _, comment = example.partition("#")
        text = f"{prog} {command.strip()}".rstrip()
        lines.append(f"    {text.ljust(width)}  # {comment.strip()}" if comment else f"    {text}")
    notes = [entry.notes] if entry.notes else []
    notes.append(LAST_LINE.format(metric=entry.final_metric, what=entry.last_line,
                                  config=f"configs/{recipe}.yaml"))
    return "\n\n".join([entry.summary + ".", "\n".join(lines),
                        *(textwrap.fill(n, 88) for n in notes)])


def refuse_recipe(recipe: str, doing: str, can: frozenset[str] | set[str], prefix: str = "") -> None:
    """Raises ValueError when ``recipe`` is not one of ``can``: ``the 'sac'
    recipe cannot sweep; recipes that can: a2c, ppo`` (after ``prefix``)."""
    if recipe not in can:
        raise ValueError(f"{prefix}the {recipe!r} recipe cannot {doing}; "
                         f"recipes that can: {', '.join(sorted(can))}")


def unknown_algorithm_key(where: str, name: str, algorithm: Any, module: Any) -> ValueError:
    """The error for ``sweep.hyperparams.<name>`` or ``search.space.<name>`` naming no
    key of the ``algorithm:`` section: the closest key, and the names the module can
    vary per member (the hyperparameters its state keeps, ``initial_hyperparams``),
    else every key of the section."""
    from jaxtrainer._arguments import did_you_mean

    keys = [str(k) for k in algorithm]
    held = module.initial_hyperparams() or {}
    varied = (f"the hyperparameters {type(module).__name__} varies per member: "
              f"{', '.join(sorted(held))}" if held else f"its keys: {', '.join(keys)}")
    return ValueError(f"{where}: {name!r} is not a key of the algorithm section"
                      f"{did_you_mean(name, list(held) or keys)} ({varied})")
