"""Our MAP-Elites, PGA-ME and ME-ES against QDax 0.5.0's own, side by side.

Each run is a child process (one side, one algorithm, one seed), the sides
alternating per seed (ours, theirs, theirs, ours, ...); both sides are timed
from the first iteration of their compiled loop to the last (compilation
excluded) and evaluate the same number of genotypes:

* ``map_elites``: QDax's ``examples/me_arm_example.py`` settings: the 8-joint
  arm, 2048 offspring per iteration, a 100x100 grid over ``[0, 1]^2``,
  Iso+LineDD with ``iso_sigma`` 0.005, ``line_sigma`` 0, genes clipped to
  ``[0, 1]``, ``qd_offset`` 0; 1000 iterations after an initial batch. The
  initial batch is 2048 uniform genotypes on both sides (the example's
  ``init_batch_size`` is 100).
* ``pga_me``: QDax's ``examples/pgame.ipynb`` (v0.5.0) on ``walker2d_uni`` with
  a CPU budget (``PGA_ME`` below; the notebook's values in comments): shorter
  episodes, fewer offspring and iterations, fewer critic and policy-gradient
  steps, smaller networks, a 10x10 grid instead of 1024 CVT centroids; the
  notebook's ``play_reset_fn=env.reset`` (a random start per evaluation) and
  ``qd_offset = reward_offset * episode_length``. QDax's side uses its brax v2
  environments (``qdax.tasks.brax.v2``: brax 0.14's walker2d, spring backend),
  as the notebook's v1 ones need ``brax.v1``, gone from brax 0.14; for the same
  reason ``qpg_emitter.py``'s type-only import of the v1 ``QDEnv`` is answered
  with the v2 class (a ``sys.modules`` entry; QDax's files are not changed).
* ``me_es``: QDax's ``examples/mees.ipynb`` on ``walker2d_uni`` with a CPU
  budget (``ME_ES`` below; the notebook's values in comments): fewer ES samples
  and iterations, a 10x10 grid instead of 1024 CVT centroids; the notebook's
  fixed start (``play_reset_fn=lambda key: init_state``, ``init_state`` from the
  seed's key; ours the task's ``seed=`` set to the run's seed), its one initial
  policy, ``MEESConfig`` and ``qd_offset``. The notebook scores each offspring
  as the average of 30 evaluations (``qdax.utils.sampling``) of its
  deterministic episode, the same value 30 times: both sides score it once
  (QDax's ``scoring_function_brax_envs`` as the MAP-Elites scoring function).

* ours: the ``map_elites`` / ``pga_me`` / ``me_es`` recipe's module with the settings
  above, ``PopulationTrainer(strategy="single")``, loggers, checkpoints and the
  progress bar off, XLA's CPU optimisation level as the recipe sets it;
  ``max_generations = iterations + 1`` (generation 0 is the initial batch), all
  in one log interval (one compiled program: a shorter last interval would be a
  second program, compiled inside the timed loop); seconds per iteration are
  the loop's over ``iterations + 1``.
* theirs: QDax 0.5.0 (``qdax.core.map_elites.MAPElites`` with
  ``MixingEmitter`` / ``PGAMEEmitter`` / ``MEESEmitter``, ``default_qd_metrics``,
  ``compute_euclidean_centroids``, ``arm_scoring_function`` /
  ``scoring_function_brax_envs``), its ``init`` then ``scan_update`` in
  ``jax.lax.scan`` chunks of 10 iterations (the notebook's ``log_period``),
  compiled ahead. QDax is found on ``--qdax-path`` (a folder it was installed
  to: ``pip install --no-deps --target /tmp/qdax-site qdax==0.5.0
  scikit-learn``, then remove the numpy and scipy that pip put beside it).

Statistics per run: the final repertoire's QD-score and coverage (percent of
cells) and seconds per iteration. Printed: every run, each side's median and
QDax's range over the seeds, whether our median lies within QDax's range, and
``ratio=<theirs / ours seconds per iteration>`` (above 1: ours is faster), and
``cpu_ratio``, the same in the process's CPU seconds (every thread's: on a shared machine
the wall clock also counts time waiting for a core).

    python benchmarks/quality_diversity.py                      # all three, seeds 42,43,44
    python benchmarks/quality_diversity.py --algorithms pga_me --seeds 42
    python benchmarks/quality_diversity.py --full               # the examples' own budgets

``--full`` runs ``pga_me`` at the notebook's settings (episode 250, 100
offspring, 1000 iterations, 300 critic and 100 policy-gradient steps, (256,
256) networks, a 32x32 grid) and ``me_es`` at its notebook's (1000 samples,
100 iterations, a 32x32 grid): hours on a CPU, minutes on an accelerator.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()

ARM = dict(num_dims=8, batch_size=2048, iterations=1000, grid_shape=(100, 100),
           iso_sigma=0.005, line_sigma=0.0, qd_offset=0.0)
"""QDax's examples/me_arm_example.py."""

PGA_ME = dict(
    env_name="walker2d_uni",
    episode_length=100,            # notebook: 250
    env_batch_size=32,             # notebook: 100
    iterations=40,                 # notebook: 1000
    policy_hidden_layer_sizes=(64, 64),  # notebook: (256, 256)
    grid_shape=(10, 10),           # notebook: 1024 CVT centroids
    iso_sigma=0.005, line_sigma=0.05, proportion_mutation_ga=0.5,
    replay_buffer_size=100_000,    # notebook: 1000000 (more than this run writes)
    critic_hidden_layer_size=(64, 64),  # notebook: (256, 256)
    critic_learning_rate=3e-4, greedy_learning_rate=3e-4, policy_learning_rate=1e-3,
    noise_clip=0.5, policy_noise=0.2, discount=0.99, reward_scaling=1.0,
    batch_size=128,                # notebook: 256
    soft_tau_update=0.005,
    num_critic_training_steps=30,  # notebook: 300
    num_pg_training_steps=10,      # notebook: 100
    policy_delay=2,
)
"""QDax's examples/pgame.ipynb with a CPU budget (the notebook's values in comments)."""

PGA_ME_FULL = dict(PGA_ME, episode_length=250, env_batch_size=100, iterations=1000,
                   policy_hidden_layer_sizes=(256, 256), grid_shape=(32, 32),
                   replay_buffer_size=1_000_000, critic_hidden_layer_size=(256, 256),
                   batch_size=256, num_critic_training_steps=300, num_pg_training_steps=100)
ME_ES = dict(
    env_name="walker2d_uni",
    episode_length=100,            # notebook: 100
    sample_number=100,             # notebook: 1000
    iterations=30,                 # notebook: 100
    policy_hidden_layer_sizes=(64, 64),  # notebook: (64, 64)
    grid_shape=(10, 10),           # notebook: 1024 CVT centroids
    sample_sigma=0.02, sample_mirror=True, sample_rank_norm=True, num_optimizer_steps=10,
    adam_optimizer=True, learning_rate=0.01, l2_coefficient=0.02, novelty_nearest_neighbors=10,
    last_updated_size=5, exploit_num_cell_sample=2, explore_num_cell_sample=5,
    use_explore=True, use_exploit=True,
)
"""QDax's examples/mees.ipynb with a CPU budget (the notebook's values in comments)."""

ME_ES_FULL = dict(ME_ES, sample_number=1000, iterations=100, grid_shape=(32, 32))
MEES_KEYS = ("sample_sigma", "sample_mirror", "sample_rank_norm", "num_optimizer_steps",
             "adam_optimizer", "learning_rate", "l2_coefficient", "novelty_nearest_neighbors",
             "last_updated_size", "exploit_num_cell_sample", "explore_num_cell_sample",
             "use_explore", "use_exploit")
"""MEESConfig's fields, the same names as MEES's arguments."""
WALKER_REWARD_OFFSET = 1.413  # QDax's reward_offset["walker2d_uni"]
LOG_PERIOD = 10


# ---------------------------------------------------------------- ours (a child process)

def run_ours(algorithm: str, seed: int, settings: dict) -> dict:
    if algorithm == "map_elites":
        from jaxtrainer.commands.fit import fast_cpu_compile

        fast_cpu_compile()  # as `jaxtrainer fit map_elites` does, before JAX starts
    sys.path.insert(0, str(HERE.parent))
    from _timing import LoopClock

    from jaxtrainer.population import MEES, PGAME, MAPElites, PopulationTrainer

    if algorithm == "me_es":
        s = settings
        module = MEES(s["env_name"], grid_shape=s["grid_shape"],
                      qd_offset=WALKER_REWARD_OFFSET * s["episode_length"],
                      novelty_archive_size=s["iterations"], **{k: s[k] for k in MEES_KEYS},
                      episode_length=s["episode_length"],
                      policy_hidden_sizes=s["policy_hidden_layer_sizes"], deterministic=True,
                      seed=seed)
        population = s["sample_number"]
    elif algorithm == "map_elites":
        s = settings
        module = MAPElites("arm", num_dims=s["num_dims"], grid_shape=s["grid_shape"],
                           iso_sigma=s["iso_sigma"], line_sigma=s["line_sigma"],
                           qd_offset=s["qd_offset"])
        population = s["batch_size"]
    else:
        s = settings
        task = dict(episode_length=s["episode_length"],
                    policy_hidden_sizes=s["policy_hidden_layer_sizes"], deterministic=False)
        keys = ("iso_sigma", "line_sigma", "proportion_mutation_ga", "replay_buffer_size",
                "critic_hidden_layer_size", "critic_learning_rate", "greedy_learning_rate",
                "policy_learning_rate", "noise_clip", "policy_noise", "discount",
                "reward_scaling", "batch_size", "soft_tau_update", "num_critic_training_steps",
                "num_pg_training_steps", "policy_delay")
        module = PGAME(s["env_name"], grid_shape=s["grid_shape"],
                       qd_offset=WALKER_REWARD_OFFSET * s["episode_length"],
                       **{k: s[k] for k in keys}, **task)
        population = s["env_batch_size"]
    clock = LoopClock()
    generations = settings["iterations"] + 1
    trainer = PopulationTrainer(  # one log interval: one compiled program, compiled before
        population, strategy="single", devices=1, max_generations=generations,
        log_every_n_generations=generations, seed=seed, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, compile_evaluation_ahead=False, callbacks=[clock],
        default_root_dir=f"/tmp/jaxtrainer-bench-qd-{os.getpid()}")
    trainer.fit(module)
    metrics = {k: float(v) for k, v in trainer.state.repertoire.metrics(module.qd_offset).items()}
    return dict(qd_score=metrics["qd_score"], coverage=metrics["coverage"],
                max_fitness=metrics["max_fitness"],
                seconds_per_iteration=clock.seconds / (settings["iterations"] + 1),
                cpu_seconds_per_iteration=clock.cpu_seconds / (settings["iterations"] + 1))


# -------------------------------------------------------------- theirs (a child process)

def _qdax_without_brax_v1() -> None:
    """``qpg_emitter.py`` and ``pga_me_emitter.py`` import ``QDEnv`` from
    ``qdax.tasks.brax.v1`` for a type annotation; that package imports
    ``brax.v1``, which brax 0.14 no longer has. Answer that import with the v2
    ``QDEnv``."""
    import types

    from qdax.tasks.brax.v2.envs.base_env import QDEnv

    for name in ("qdax.tasks.brax.v1", "qdax.tasks.brax.v1.envs",
                 "qdax.tasks.brax.v1.envs.base_env"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["qdax.tasks.brax.v1.envs.base_env"].QDEnv = QDEnv


def _scan_loop(map_elites, repertoire, emitter_state, key, iterations: int):
    """The notebook's main loop (``scan_update`` in chunks of ``LOG_PERIOD``),
    compiled before the clock starts. Returns (repertoire, seconds, CPU seconds)."""
    import jax

    def chunk(carry):
        return jax.lax.scan(map_elites.scan_update, carry, (), length=LOG_PERIOD)[0]

    compiled = jax.jit(chunk).lower((repertoire, emitter_state, key)).compile()
    carry = (repertoire, emitter_state, key)
    assert iterations % LOG_PERIOD == 0
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(iterations // LOG_PERIOD):
        carry = compiled(carry)
    jax.block_until_ready(carry)
    return carry[0], time.perf_counter() - start, time.process_time() - cpu


def run_theirs(algorithm: str, seed: int, settings: dict) -> dict:
    import functools

    import jax
    import jax.numpy as jnp

    _qdax_without_brax_v1()
    import qdax
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.map_elites import MAPElites
    from qdax.utils.metrics import default_qd_metrics

    assert qdax.__version__ == "0.5.0", qdax.__version__
    s = settings
    key = jax.random.key(seed)
    centroids = compute_euclidean_centroids(grid_shape=s["grid_shape"], minval=0.0, maxval=1.0)
    if algorithm == "map_elites":
        from qdax.core.emitters.standard_emitters import MixingEmitter
        from qdax.tasks.arm import arm_scoring_function

        key, subkey = jax.random.split(key)
        init_variables = jax.random.uniform(subkey, (s["batch_size"], s["num_dims"]),
                                            minval=0.0, maxval=1.0)
        variation_fn = functools.partial(isoline_variation, iso_sigma=s["iso_sigma"],
                                         line_sigma=s["line_sigma"], minval=0.0, maxval=1.0)
        emitter = MixingEmitter(mutation_fn=lambda x, y: (x, y), variation_fn=variation_fn,
                                variation_percentage=1.0, batch_size=s["batch_size"])
        map_elites = MAPElites(scoring_function=arm_scoring_function, emitter=emitter,
                               metrics_function=functools.partial(default_qd_metrics,
                                                                  qd_offset=s["qd_offset"]))
        qd_offset = s["qd_offset"]
    elif algorithm == "me_es":
        import qdax.tasks.brax.v2 as environments
        from qdax.core.emitters.mees_emitter import MEESConfig, MEESEmitter
        from qdax.core.neuroevolution.networks.networks import MLP
        from qdax.tasks.brax.v2.env_creators import (
            make_policy_network_play_step_fn_brax,
            scoring_function_brax_envs,
        )

        env = environments.create(s["env_name"], episode_length=s["episode_length"])
        policy_network = MLP(layer_sizes=tuple(s["policy_hidden_layer_sizes"]) + (env.action_size,),
                             kernel_init=jax.nn.initializers.lecun_uniform(),
                             final_activation=jnp.tanh)
        key, subkey = jax.random.split(key)
        fake_batch = jnp.zeros(shape=(1, env.observation_size))
        keys = jnp.repeat(jnp.expand_dims(subkey, axis=0), repeats=1, axis=0)
        init_variables = jax.vmap(policy_network.init)(keys, fake_batch)
        key, subkey = jax.random.split(key)
        init_state = env.reset(subkey)
        scoring_fn = functools.partial(
            scoring_function_brax_envs, episode_length=s["episode_length"],
            play_reset_fn=lambda key: init_state,
            play_step_fn=make_policy_network_play_step_fn_brax(env, policy_network),
            descriptor_extractor=environments.descriptor_extractor[s["env_name"]])
        qd_offset = environments.reward_offset[s["env_name"]] * s["episode_length"]
        emitter = MEESEmitter(config=MEESConfig(sample_number=s["sample_number"],
                                                **{k: s[k] for k in MEES_KEYS}),
                              total_generations=s["iterations"], scoring_fn=scoring_fn,
                              num_descriptors=env.descriptor_length)
        map_elites = MAPElites(scoring_function=scoring_fn, emitter=emitter,
                               metrics_function=functools.partial(default_qd_metrics,
                                                                  qd_offset=qd_offset))
    else:
        import qdax.tasks.brax.v2 as environments
        from qdax.core.emitters.pga_me_emitter import PGAMEConfig, PGAMEEmitter
        from qdax.core.neuroevolution.networks.networks import MLP
        from qdax.tasks.brax.v2.env_creators import (
            make_policy_network_play_step_fn_brax,
            scoring_function_brax_envs,
        )

        env = environments.create(s["env_name"], episode_length=s["episode_length"])
        reset_fn = jax.jit(env.reset)
        policy_network = MLP(layer_sizes=tuple(s["policy_hidden_layer_sizes"]) + (env.action_size,),
                             kernel_init=jax.nn.initializers.lecun_uniform(),
                             final_activation=jnp.tanh)
        key, subkey = jax.random.split(key)
        keys = jax.random.split(subkey, num=s["env_batch_size"])
        fake_batch = jnp.zeros(shape=(s["env_batch_size"], env.observation_size))
        init_variables = jax.vmap(policy_network.init)(keys, fake_batch)
        scoring_fn = functools.partial(
            scoring_function_brax_envs, episode_length=s["episode_length"],
            play_reset_fn=reset_fn,
            play_step_fn=make_policy_network_play_step_fn_brax(env, policy_network),
            descriptor_extractor=environments.descriptor_extractor[s["env_name"]])
        qd_offset = environments.reward_offset[s["env_name"]] * s["episode_length"]
        config = PGAMEConfig(
            env_batch_size=s["env_batch_size"], batch_size=s["batch_size"],
            proportion_mutation_ga=s["proportion_mutation_ga"],
            critic_hidden_layer_size=tuple(s["critic_hidden_layer_size"]),
            critic_learning_rate=s["critic_learning_rate"],
            greedy_learning_rate=s["greedy_learning_rate"],
            policy_learning_rate=s["policy_learning_rate"], noise_clip=s["noise_clip"],
            policy_noise=s["policy_noise"], discount=s["discount"],
            reward_scaling=s["reward_scaling"], replay_buffer_size=s["replay_buffer_size"],
            soft_tau_update=s["soft_tau_update"],
            num_critic_training_steps=s["num_critic_training_steps"],
            num_pg_training_steps=s["num_pg_training_steps"], policy_delay=s["policy_delay"])
        variation_fn = functools.partial(isoline_variation, iso_sigma=s["iso_sigma"],
                                         line_sigma=s["line_sigma"])
        emitter = PGAMEEmitter(config=config, policy_network=policy_network, env=env,
                               variation_fn=variation_fn)
        map_elites = MAPElites(scoring_function=scoring_fn, emitter=emitter,
                               metrics_function=functools.partial(default_qd_metrics,
                                                                  qd_offset=qd_offset))
    key, subkey = jax.random.split(key)
    repertoire, emitter_state, _ = map_elites.init(init_variables, centroids, subkey)
    repertoire, seconds, cpu_seconds = _scan_loop(map_elites, repertoire, emitter_state, key,
                                                  s["iterations"])
    metrics = default_qd_metrics(repertoire, qd_offset)
    return dict(qd_score=float(metrics["qd_score"]), coverage=float(metrics["coverage"]),
                max_fitness=float(metrics["max_fitness"]),
                seconds_per_iteration=seconds / s["iterations"],
                cpu_seconds_per_iteration=cpu_seconds / s["iterations"])


# ------------------------------------------------------------------------- the parent

def child(side: str, algorithm: str, seed: int, full: bool, qdax_path: str) -> dict:
    env = dict(os.environ)
    if side == "theirs":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (qdax_path, env.get("PYTHONPATH")) if p)
    command = [sys.executable, str(HERE), "--child", side, "--algorithms", algorithm,
               "--seeds", str(seed)] + (["--full"] if full else [])
    start = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{side} {algorithm} seed {seed} failed:\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - start
    return result


def settings_of(algorithm: str, full: bool) -> dict:
    if algorithm == "me_es":
        return ME_ES_FULL if full else ME_ES
    return ARM if algorithm == "map_elites" else (PGA_ME_FULL if full else PGA_ME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", default="map_elites,pga_me,me_es")
    parser.add_argument("--seeds", default="42,43,44",
                        help="comma-separated; one pair per seed (the examples use 42)")
    parser.add_argument("--full", action="store_true",
                        help="pga_me and me_es at their notebooks' own budgets (hours on a CPU)")
    parser.add_argument("--qdax-path", default="/tmp/qdax-site",
                        help="where QDax 0.5.0 is installed (pip install --target)")
    parser.add_argument("--child", choices=("ours", "theirs"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.child:
        algorithm, seed = args.algorithms, seeds[0]
        run = run_ours if args.child == "ours" else run_theirs
        print(json.dumps(run(algorithm, seed, settings_of(algorithm, args.full))))
        return
    for algorithm in args.algorithms.split(","):
        print(f"{algorithm}: {json.dumps(settings_of(algorithm, args.full))}", flush=True)
        results: dict[str, list[dict]] = {"ours": [], "theirs": []}
        for i, seed in enumerate(seeds):
            for side in ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours"):
                r = child(side, algorithm, seed, args.full, args.qdax_path)
                results[side].append(r)
                print(f"{algorithm} seed {seed} {side:6s}: QD-score {r['qd_score']:10.3f}  "
                      f"coverage {r['coverage']:6.2f} %  max fitness {r['max_fitness']:9.4f}  "
                      f"{r['seconds_per_iteration'] * 1e3:8.2f} ms/iteration  "
                      f"({r['cpu_seconds_per_iteration'] * 1e3:.2f} CPU ms)  "
                      f"({r['wall_s']:.0f} s with start and compile)", flush=True)
        for stat in ("qd_score", "coverage"):
            ours = [r[stat] for r in results["ours"]]
            theirs = [r[stat] for r in results["theirs"]]
            inside = min(theirs) <= statistics.median(ours) <= max(theirs)
            print(f"{algorithm} {stat}: ours median {statistics.median(ours):.3f} "
                  f"[{min(ours):.3f}, {max(ours):.3f}], QDax median "
                  f"{statistics.median(theirs):.3f} [{min(theirs):.3f}, {max(theirs):.3f}]; "
                  f"ours within QDax's seed range: {inside}")
        ratio = statistics.median(t["seconds_per_iteration"] / o["seconds_per_iteration"]
                                  for o, t in zip(results["ours"], results["theirs"],
                                                  strict=True))
        cpu_ratio = statistics.median(
            t["cpu_seconds_per_iteration"] / o["cpu_seconds_per_iteration"]
            for o, t in zip(results["ours"], results["theirs"], strict=True))
        print(f"{algorithm} ratio={ratio:.3f}  (QDax's seconds per iteration / ours)  "
              f"cpu_ratio={cpu_ratio:.3f}  (the same in CPU seconds: all threads, less "
              "sensitive to a loaded machine)", flush=True)


if __name__ == "__main__":
    main()
