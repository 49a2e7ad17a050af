"""Row 4 of the accelerator table: PPO on a MuJoCo Playground task against Playground's own
training (Brax's PPO with Playground's published config for the task).

    python benchmarks/accelerator/playground.py [--env CartpoleBalance] [--env-steps N] \\
        [--seed 0] [--num-evals 10] [--sides env_only,ours,playground] [--pythonpath DIR] \\
        [--json FILE]

Three programs one after the other on the same chip, each in its own process:

* the limit: the task alone with random actions on 2,048 envs (``env_limit.py --env
  playground/<task>``: Playground's training wrapper, MJX's JAX implementation);
* ours: ``jaxtrainer fit ppo --config ppo_playground.yaml env.name=playground/<task>``
  (Playground's DM Control suite PPO settings: 2,048 envs, 983,040 env steps an update,
  16 epochs of 32 minibatches, discount 0.995, reward scaling 10, Adam 1e-3), with
  ``trainer.max_env_steps`` the budget, one evaluation at the end
  (``trainer.eval_every_n_steps=null``) and ``callbacks.throughput=true``;
* Playground: ``_playground_ppo_original.py``: Brax's ``ppo.train`` on
  ``registry.load(task)`` through ``wrapper.wrap_for_brax_training`` with
  ``dm_control_suite_params.brax_ppo_config(task)``, the same budget, its env steps/s
  over its training epochs after the first (which compiles), evaluations excluded.

Returns: ours, the greedy evaluation at the end (128 episodes); Playground's, Brax's
evaluation after its last epoch. Both sides use the same packages (``--pythonpath``).
Printed: one JSON line per program, then a summary line; ``--json`` appends the lines to
FILE; ``playground.py --table FILE ...`` prints the rows of ``docs/benchmarks.md``.

``--env Go1JoystickFlatTerrain`` (a locomotion task: dict observations, a critic on
privileged observations, domain randomisation) runs the same three programs at
Playground's locomotion config (``locomotion_params.brax_ppo_config``), 200M env steps by
default: the limit on 8,192 envs (without randomisation); Playground's side with its
``network_factory`` and ``--domain-randomization`` (the task's randomizer, as
``train_jax_ppo.py --domain_randomization``); ours with ``ppo_playground.yaml`` and these
overrides (:data:`GO1`), each from Playground's setting:

=============================================  ===============================================
Playground (Brax's ``ppo.train`` argument)     ours (``jaxtrainer fit ppo --config
                                               ppo_playground.yaml ...``)
=============================================  ===============================================
num_envs 8192                                  algorithm.num_envs=8192
unroll_length 20                               algorithm.unroll_length=20
batch_size 256 x num_minibatches 32 = 8,192    algorithm.num_steps=20 (8,192 x 20 = 163,840 env
unrolls an update (1 per env)                  steps an update), algorithm.num_minibatches=32
num_updates_per_batch 4                        algorithm.update_epochs=4
learning_rate 3e-4 (constant)                  algorithm.lr=3e-4 (yaml: anneal_lr false)
discounting 0.97                               algorithm.gamma=0.97
entropy_cost 1e-2                              algorithm.ent_coef=0.01 (yaml's)
reward_scaling 1.0                             algorithm.reward_scaling=1.0
clipping_epsilon 0.3 (Brax's default)          algorithm.clip_eps=0.3 (yaml's)
max_grad_norm 1.0                              algorithm.max_grad_norm=1.0
gae_lambda 0.95, vf_loss_coefficient 0.5,      yaml's: gae_lambda 0.95, vf_coef 0.5 without
normalize_advantage (Brax's defaults)          value clipping, normalize_advantages true
normalize_observations true                    yaml's (per entry: the policy's and the critic's)
network_factory: policy_hidden_layer_sizes     algorithm.hidden_sizes=[512,256,128]
(512, 256, 128)
value_hidden_layer_sizes (512, 256, 128)       algorithm.critic_hidden_sizes=[512,256,128]
policy_obs_key state                           env.policy_obs_key=state (yaml's)
value_obs_key privileged_state                 env.value_obs_key=privileged_state
swish, tanh_normal, lecun_uniform (Brax's)     yaml's: activation silu, policy brax
randomization_fn get_domain_randomizer(task)   env.randomization=true (the same model per key)
episode_length 1000, action_repeat 1           env.episode_length=1000 (yaml's)
env config impl (train_jax_ppo.py: jax)        env.config_overrides.impl=jax (yaml's)
num_timesteps 200,000,000                      trainer.max_env_steps (``--env-steps``)
num_evals 10, num_eval_envs 128                one evaluation at the end, eval_episodes 128
=============================================  ===============================================

What ours cannot express, so the sides differ there: ``num_resets_per_eval 10`` (Brax
resets every env to a fresh random state 100 times over the run; ours restarts each env
from its first state all run long, ``reset_mode="first_state"``); ``bootstrap_on_timeout
false`` (Brax leaves a
truncated step out of the loss; ours bootstraps it from V(final observation),
``bootstrap_truncation``); Brax's evaluation is stochastic and ours greedy.

Go1's meshes come from MuJoCo Menagerie, which Playground clones from GitHub:
``_go1_assets.provide`` writes a stand-in (same dynamics) where the ``mujoco_playground``
on ``--pythonpath`` looks, unless a clone is there.
"""

from __future__ import annotations

import json
import pathlib
import sys

import _go1_assets
from sac import fit_row, row_parser, run_sides, table
from seeds import _run

HERE = pathlib.Path(__file__).resolve().parent
NUM_ENVS = 2048  # Playground's DM Control suite PPO config, and ppo_playground.yaml's
GO1 = ("env.value_obs_key=privileged_state", "env.randomization=true",
       "env.episode_length=1000", "algorithm.num_envs=8192", "algorithm.num_steps=20",
       "algorithm.unroll_length=20", "algorithm.num_minibatches=32", "algorithm.update_epochs=4",
       "algorithm.lr=3e-4", "algorithm.gamma=0.97", "algorithm.ent_coef=0.01",
       "algorithm.reward_scaling=1.0", "algorithm.clip_eps=0.3", "algorithm.max_grad_norm=1.0",
       "algorithm.hidden_sizes=[512,256,128]", "algorithm.critic_hidden_sizes=[512,256,128]")
"""Playground's locomotion PPO config for Go1JoystickFlatTerrain as overrides of
``ppo_playground.yaml`` (the table above)."""
LOCOMOTION = {"Go1JoystickFlatTerrain": GO1}
"""Locomotion tasks: their overrides of ``ppo_playground.yaml``."""
LOCOMOTION_ENVS = 8192  # Playground's locomotion PPO config


def ours(env: str, env_steps: int, seed: int, extra: str | None, timeout: float,
         overrides: tuple[str, ...] = ()) -> dict:
    """``jaxtrainer fit ppo --config ppo_playground.yaml`` on ``playground/<env>`` (a
    locomotion task's settings from :data:`LOCOMOTION`, then ``overrides``)."""
    return fit_row("ppo", "ppo_playground.yaml", f"playground/{env}", env_steps, seed, extra,
                   timeout, (*LOCOMOTION.get(env, ()), *overrides))


def playground(env: str, env_steps: int, seed: int, num_evals: int, extra: str | None,
               timeout: float, settings: tuple[str, ...] = ()) -> dict:
    """Playground's training of ``env`` (Brax's PPO, Playground's config; a locomotion
    task with its domain randomisation) at ``env_steps``."""
    randomize = ("--domain-randomization",) if env in LOCOMOTION else ()
    out = _run([sys.executable, str(HERE / "_playground_ppo_original.py"), "--env", env,
                "--num-timesteps", str(env_steps), "--num-evals", str(num_evals),
                "--seed", str(seed), *randomize, *(x for kv in settings for x in ("--set", kv))],
               extra, timeout)
    return json.loads(out.strip().splitlines()[-1])


def limit(env: str, extra: str | None, timeout: float, batch: int | None = None) -> dict:
    """``playground/<env>`` alone on ``batch`` envs (default: the task's PPO config's)."""
    batch = batch or (LOCOMOTION_ENVS if env in LOCOMOTION else NUM_ENVS)
    out = _run([sys.executable, str(HERE / "env_limit.py"), "--env", f"playground/{env}",
                "--batch", str(batch)], extra, timeout)
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return {**line, "env": env}


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        paths = sys.argv[2:]
        go1 = any(json.loads(x).get("env") in LOCOMOTION for p in paths for x in open(p))
        print(table(paths, peer="playground", title="Playground", family="playground",
                    envs=LOCOMOTION_ENVS if go1 else NUM_ENVS))
        return
    parser = row_parser(__doc__, "CartpoleBalance",
                        f"a Playground DM Control task or one of {', '.join(LOCOMOTION)}", None,
                        0, 10, "playground")
    parser.add_argument("--env-steps", type=int, default=None,
                        help="both sides' budget (default: 60M; 200M for a locomotion task)")
    args = parser.parse_args()
    env, seed = args.env, args.seed
    steps = args.env_steps or (200_000_000 if env in LOCOMOTION else 60_000_000)
    if env in LOCOMOTION:
        print(f"Menagerie: {_go1_assets.provide(args.pythonpath)}", flush=True)
    run = {"env_only": lambda: limit(env, args.pythonpath, args.timeout),
           "ours": lambda: ours(env, steps, seed, args.pythonpath, args.timeout),
           "playground": lambda: playground(env, steps, seed, args.num_evals, args.pythonpath,
                                            args.timeout)}
    run_sides(run, args.sides, env, seed, args.json, parser, peer="playground")


if __name__ == "__main__":
    main()
