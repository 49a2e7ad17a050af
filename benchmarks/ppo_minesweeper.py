"""PPO on Jumanji's Minesweeper (multi-discrete ``(row, col)`` actions) against a random policy.

Trains PPO on ``jumanji/Minesweeper-v0`` (10 x 10 board, 10 mines; reward 1 per
revealed safe square; an episode ends on a mine, on a square already revealed,
or when the board is solved, at most 90 steps) with the factorised categorical
head (:class:`~jaxtrainer.algorithms.distributions.MultiCategorical`: a row and a
column), then runs fresh episodes of the trained policy (greedy, and sampled as
it trains) and of the uniform random policy (row and column uniform), and
prints each mean return and the ratio trained / random.

    python benchmarks/ppo_minesweeper.py                        # 8e6 env steps, ~6.5 min
    python benchmarks/ppo_minesweeper.py --max-env-steps 1.5e6 --num-envs 64

PPO: 128 envs x 32 steps an update, 4 epochs of 4 minibatches, an MLP of
256 x 256 units on the flattened observation (board, action mask, mine count,
step count: ``float32[202]``) with running observation normalisation, learning
rate 3e-4 annealed over the budget, entropy coefficient 0.01.

Measured 2026-12-03 on 2 CPU cores (defaults, seed 0): 7,999,488 env steps in
383 s (compilation included); mean return over 1024 fresh episodes: random
5.611, PPO greedy 13.248 (2.36x random), PPO sampled 12.561 (2.24x). With
1.5e6 env steps and 64 envs (62 s): random 5.561, greedy 7.729 (1.39x),
sampled 6.934 (1.25x), over 512 episodes.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import jax
import jax.numpy as jnp

import jaxtrainer as jt
from jaxtrainer import envs
from jaxtrainer.algorithms.ppo import PPO, PPOConfig
from jaxtrainer.envs.evaluation import run_episodes

ENV = "jumanji/Minesweeper-v0"


def random_policy(env: envs.Env):
    """``policy(params, obs[n, ...], key) -> int32[n, len(nvec)]``: each component uniform."""
    nvec = jnp.asarray(env.action_nvec, jnp.int32)

    def policy(params, obs, key):
        del params
        return jax.random.randint(key, (obs.shape[0], nvec.shape[0]), 0, nvec, jnp.int32)
    return policy


def mean_return(env: envs.Env, policy, params, episodes: int, seed: int) -> float:
    """Mean undiscounted return of ``episodes`` fresh episodes (all end within the
    env's 90 steps)."""
    run = jax.jit(lambda p, k: run_episodes(env, policy, p, k, episodes))
    result = run(params, jax.random.key(seed))
    assert bool(jnp.all(result.finished)), "an episode did not end within max_episode_steps"
    return float(jnp.mean(result.returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-env-steps", type=float, default=8e6)
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--episodes", type=int, default=1024,
                        help="fresh episodes per policy for the mean returns")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    module = PPO(PPOConfig(env=ENV, num_envs=args.num_envs, num_steps=args.num_steps,
                           update_epochs=4, num_minibatches=4, lr=3e-4, gamma=0.99,
                           ent_coef=0.01, hidden_sizes=(256, 256), eval_episodes=64,
                           normalize_observations=True))
    env = module.env
    print(f"{env}; PPO {args.num_envs} envs x {args.num_steps} steps an update")
    trainer = jt.Trainer(strategy="single", max_env_steps=int(args.max_env_steps),
                         seed=args.seed, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, log_every_n_steps=50,
                         default_root_dir=tempfile.mkdtemp(prefix="ppo-minesweeper-"))
    start = time.perf_counter()
    trainer.fit(module)
    seconds = time.perf_counter() - start
    params = module.policy_params(trainer.state)
    params = jax.device_get(params)

    random = mean_return(env, random_policy(env), None, args.episodes, args.seed + 1)
    greedy = mean_return(env, module.greedy_policy(), params, args.episodes, args.seed + 2)
    sampled = mean_return(env, module.sample_policy(), params, args.episodes, args.seed + 3)
    print(f"env steps {trainer.env_steps:,} in {seconds:.0f} s (compilation included)")
    print(f"mean return over {args.episodes} fresh episodes:")
    print(f"  random policy      {random:7.3f}")
    print(f"  PPO, greedy        {greedy:7.3f}   ratio to random {greedy / random:5.2f}")
    print(f"  PPO, sampled       {sampled:7.3f}   ratio to random {sampled / random:5.2f}")


if __name__ == "__main__":
    main()
