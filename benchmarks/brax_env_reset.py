"""A brax environment alone through our adapter vs brax's training-wrapped env.

Steps ``--envs`` copies of a brax env (default ``inverted_pendulum``, 128 envs)
for ``--steps`` steps with random actions in ``[-1, 1]``, inside one jitted
``lax.scan`` (reset included, outside the timing: each variant's program is
compiled and run once first), three ways in the same process:

* ``brax``: ``brax.envs.training.wrap(env, episode_length=1000)`` (brax's
  ``EpisodeWrapper``, ``VmapWrapper`` and ``AutoResetWrapper``: an ended
  episode's slot goes back to its first state), the reference;
* ``ours first_state``: ``jaxtrainer.envs.make("brax/<env>")``, the default
  ``reset_mode``, stepped as the algorithms step it (``vmap`` of ``Env.step``,
  one key per env);
* ``ours exact``: ``reset_mode="exact"`` (a fresh reset per env per step).

Variants alternate over ``--repeats`` rounds; printed: env steps/s (median) and
ours/brax, the median over rounds of the back-to-back ratio.

    python benchmarks/brax_env_reset.py
    python benchmarks/brax_env_reset.py --env ant --envs 64 --steps 200
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from jaxtrainer import envs


def brax_program(name: str, num_envs: int, steps: int):
    """``run(key) -> float32[]`` over brax's training-wrapped env (the sum of
    rewards and observations: with the rewards alone, constant 1 on
    inverted_pendulum, XLA would drop the simulation)."""
    import brax.envs
    from brax.envs.wrappers import training

    env = training.wrap(brax.envs.get_environment(name), episode_length=1000)

    @jax.jit
    def run(key):
        reset_key, act_key = jax.random.split(key)
        state = env.reset(jax.random.split(jax.random.key_data(reset_key), num_envs))

        def one_step(state, k):
            action = jax.random.uniform(k, (num_envs, env.action_size), minval=-1.0, maxval=1.0)
            state = env.step(state, action)
            return state, state.reward.sum() + state.obs.sum()  # depends on the simulation

        _, rewards = jax.lax.scan(one_step, state, jax.random.split(act_key, steps))
        return rewards.sum()
    return run


def our_program(name: str, num_envs: int, steps: int, reset_mode: str):
    """``run(key) -> float32[]`` over our adapter, stepped as the algorithms do."""
    env = envs.make(f"brax/{name}", reset_mode=reset_mode)

    @jax.jit
    def run(key):
        reset_key, act_key = jax.random.split(key)
        _, state = env.reset_batch(reset_key, num_envs)

        def one_step(state, k):
            action_key, env_key = jax.random.split(k)
            action = jax.random.uniform(action_key, (num_envs, env.action_size),
                                        minval=-1.0, maxval=1.0)
            obs, state, info = jax.vmap(env.step)(jax.random.split(env_key, num_envs), state,
                                                  action)
            return state, info.reward.sum() + obs.sum()  # depends on the simulation

        _, rewards = jax.lax.scan(one_step, state, jax.random.split(act_key, steps))
        return rewards.sum()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="inverted_pendulum")
    parser.add_argument("--envs", type=int, default=128)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    programs = {"brax": brax_program(args.env, args.envs, args.steps),
                "ours first_state": our_program(args.env, args.envs, args.steps, "first_state"),
                "ours exact": our_program(args.env, args.envs, args.steps, "exact")}
    for run in programs.values():  # compile and warm up, untimed
        run(jax.random.key(0)).block_until_ready()
    seconds: dict[str, list[float]] = {name: [] for name in programs}
    names = list(programs)
    for r in range(args.repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            jnp.asarray(programs[name](jax.random.key(r + 1))).block_until_ready()
            seconds[name].append(time.perf_counter() - start)
    steps = args.envs * args.steps
    print(f"brax {args.env}, {args.envs} envs x {args.steps} steps, random actions, "
          f"{args.repeats} alternating rounds ({jax.default_backend()})")
    print(f"{'variant':<18} {'env steps/s':>12} {'ours/brax':>10}")
    for name in names:
        ratio = statistics.median(b / a for a, b in zip(seconds[name], seconds["brax"],
                                                        strict=True))
        print(f"{name:<18} {steps / statistics.median(seconds[name]):>12,.0f} {ratio:>10.3f}")


if __name__ == "__main__":
    main()
