"""The env-only limit: how many env steps a second the chip runs for one env alone.

    python benchmarks/accelerator/env_limit.py --env CartPole-v1 --batch 4,256,2048,8192

For each batch size: ``batch`` copies of the env stepped with uniformly random
actions in one ``jax.jit(lax.scan)`` of ``--length`` steps, nothing else: no network,
no learning, no logging. A gymnax env runs its own ``reset``/``step`` (which reset a
finished episode inside ``step``); a brax env (``brax/<name>``, e.g. ``brax/hopper``)
runs as both Brax's trainers and ours run it: ``brax.envs.training.wrap`` (episodes of
``--episode-length`` steps, reset inside ``step``; ``--backend`` the physics pipeline,
e.g. ``spring`` as evosax's ``BraxProblem`` takes by default), actions uniform in
[-1, 1]; a MuJoCo Playground task (``playground/<name>``) through Playground's
``wrap_for_brax_training``; a JaxMARL game (``jaxmarl/<name>``, e.g.
``jaxmarl/MPE_simple_spread_v3``) as ``jaxmarl.make`` gives it (its ``step`` resets a
finished episode), every agent's action drawn from its own space, ``batch`` games (an
env step is a game step). Timed after compilation as the best of ``--repeats`` calls
(each waits for its result). Prints one JSON line per batch and structure:
``{"env": ..., "batch": B, "structure": ..., "env_steps_per_s": ...}``.

``--structure per_env`` (brax envs only) steps the same envs the way evosax's
``BraxProblem`` rolls its population out instead: one env as ``brax.envs.create(...,
auto_reset=True)`` gives it (episodes of ``--episode-length``, reset inside ``step``,
no batch wrapper), one ``lax.scan`` of ``--length`` steps per env, ``vmap`` over
``--rollouts`` envs and that ``vmap`` over ``batch / rollouts`` members (evosax's
``_rollouts`` and ``_eval``); each env draws its own random actions (evosax's members
differ by their policies; keys shared over the members would leave nothing to batch).
``--structure batched,per_env`` measures both on the same envs, one after the other.

This is the ceiling every trainer's env steps/s is a fraction of on the same chip
(rows in ``docs/benchmarks.md``). It imports JAX and the env's own package only, so it
runs beside either side's packages.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp


def _gymnax(env_name: str, batch: int):
    """(reset(key) -> state, step(state, key) -> (state, reward)) of ``batch`` gymnax envs."""
    import gymnax

    env, params = gymnax.make(env_name)
    space = env.action_space(params)

    def reset(key):
        return jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, batch), params)[1]

    def step(state, key):
        act_key, step_key = jax.random.split(key)
        actions = jax.vmap(space.sample)(jax.random.split(act_key, batch))
        out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, batch), state, actions, params)
        return out[1], out[2]

    return reset, step


def _jaxmarl(env_name: str, batch: int):
    """The same for ``batch`` JaxMARL games; the reward is the agents' summed."""
    import jaxmarl

    env = jaxmarl.make(env_name.removeprefix("jaxmarl/"))

    def reset(key):
        return jax.vmap(env.reset)(jax.random.split(key, batch))[1]

    def step(state, key):
        act_key, step_key = jax.random.split(key)
        keys = jax.random.split(act_key, len(env.agents))
        actions = {a: jax.vmap(env.action_space(a).sample)(jax.random.split(k, batch))
                   for a, k in zip(env.agents, keys, strict=True)}
        _, state, reward, _, _ = jax.vmap(env.step)(jax.random.split(step_key, batch), state,
                                                    actions)
        return state, sum(reward[a] for a in env.agents)

    return reset, step


def _brax(env_name: str, batch: int, episode_length: int, backend: str | None = None):
    """The same for ``batch`` brax envs as Brax's trainers wrap them (``backend``: brax's
    physics pipeline, ``None`` the env's default), or (``playground/<name>``) MuJoCo
    Playground tasks as Playground's training wrapper wraps them."""
    if env_name.startswith("playground/"):
        from mujoco_playground import registry, wrapper

        task = registry.load(env_name.removeprefix("playground/"),
                             config_overrides={"impl": "jax"})  # MJX's JAX implementation, as ours
        env = wrapper.wrap_for_brax_training(task, episode_length=episode_length)
    else:
        from brax import envs
        from brax.envs.wrappers import training

        kwargs = {"backend": backend} if backend else {}
        env = training.wrap(envs.get_environment(env_name.removeprefix("brax/"), **kwargs),
                            episode_length=episode_length)

    def reset(key):  # brax wants raw uint32 keys
        return env.reset(jax.random.key_data(jax.random.split(key, batch)))

    def step(state, key):
        actions = jax.random.uniform(key, (batch, env.action_size), minval=-1.0, maxval=1.0)
        state = env.step(state, actions)
        return state, state.reward

    return reset, step


def _brax_per_env(env_name: str, batch: int, rollouts: int, length: int, episode_length: int,
                  backend: str | None = None):
    """``run(key) -> summed reward`` of ``batch`` brax envs rolled out as evosax's
    ``BraxProblem`` does: ``vmap`` (members) of ``vmap`` (rollouts) of a per-env scan."""
    from brax import envs

    if batch % rollouts:
        raise ValueError(f"--batch {batch} --rollouts {rollouts}: expected a batch that is a "
                         "multiple of the rollouts a member")
    kwargs = {"backend": backend} if backend else {}
    env = envs.create(env_name.removeprefix("brax/"), episode_length=episode_length,
                      auto_reset=True, **kwargs)

    def rollout(key):
        reset_key, scan_key = jax.random.split(key)

        def one(carry, key):
            state, total = carry
            action = jax.random.uniform(key, (env.action_size,), minval=-1.0, maxval=1.0)
            state = env.step(state, action)
            return (state, total + state.reward), None

        (_, total), _ = jax.lax.scan(one, (env.reset(reset_key), jnp.zeros(())),
                                     jax.random.split(scan_key, length))
        return total

    def run(key):
        keys = jax.random.split(key, (batch // rollouts, rollouts))
        return jax.vmap(jax.vmap(rollout))(keys).sum()

    return run


STRUCTURES = ("batched", "per_env")
"""How ``limit`` steps the envs: one scan of the batched env, or (brax envs) a scan per
env vmapped over rollouts and members, as evosax's ``BraxProblem``."""


def limit(env_name: str, batch: int, length: int, repeats: int,
          episode_length: int = 1000, backend: str | None = None,
          structure: str = "batched", rollouts: int = 1) -> tuple[float, float]:
    """Env steps per second of ``batch`` envs over ``length`` random steps, and the
    reward summed over the last timed call's steps (a check that they ran).
    ``structure``: one of :data:`STRUCTURES` (``per_env``: brax envs only, ``rollouts``
    envs a member)."""
    if structure not in STRUCTURES:
        raise ValueError(f"structure={structure!r}: expected one of {', '.join(STRUCTURES)}")
    if structure == "per_env" and not env_name.startswith("brax/"):
        raise ValueError(f"structure='per_env' with env {env_name!r}: brax envs only (brax/<name>)")
    if structure == "per_env":
        run = _brax_per_env(env_name, batch, rollouts, length, episode_length, backend)
        return _timed(run, batch * length, repeats)
    if env_name.startswith(("brax/", "playground/")):
        reset, step = _brax(env_name, batch, episode_length, backend)
    elif env_name.startswith("jaxmarl/"):
        reset, step = _jaxmarl(env_name, batch)
    else:
        reset, step = _gymnax(env_name, batch)

    def run(key):
        reset_key, key = jax.random.split(key)

        def one(carry, key):
            state, total = carry
            state, reward = step(state, key)
            return (state, total + reward.sum()), None

        (_, total), _ = jax.lax.scan(one, (reset(reset_key), jnp.zeros(())),
                                     jax.random.split(key, length))
        return total

    return _timed(run, batch * length, repeats)


def _timed(run, env_steps: int, repeats: int) -> tuple[float, float]:
    """``run(key) -> total`` compiled, then the best of ``repeats`` calls:
    ``(env_steps / seconds, the last call's total)``."""
    compiled = jax.jit(run).lower(jax.random.key(0)).compile()
    best, total = float("inf"), 0.0
    for i in range(repeats):
        start = time.perf_counter()
        total = jax.block_until_ready(compiled(jax.random.key(i + 1)))
        best = min(best, time.perf_counter() - start)
    return env_steps / best, float(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1",
                        help="a gymnax env name, brax/<name>, playground/<name> or jaxmarl/<name>")
    parser.add_argument("--batch", default="4,256,2048,8192",
                        help="comma-separated numbers of envs stepped together")
    parser.add_argument("--length", type=int, default=1000, help="steps in the timed scan")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episode-length", type=int, default=1000, help="brax and Playground envs only")
    parser.add_argument("--backend", default=None,
                        help="brax envs only: the physics pipeline (default: the env's)")
    parser.add_argument("--structure", default="batched",
                        help=f"comma-separated, of {', '.join(STRUCTURES)} (per_env: brax only)")
    parser.add_argument("--rollouts", type=int, default=16,
                        help="per_env only: envs a member (evosax's num_rollouts)")
    args = parser.parse_args()
    structures = args.structure.split(",")
    bad = [s for s in structures if s not in STRUCTURES]
    if bad or ("per_env" in structures and not args.env.startswith("brax/")):
        parser.error(f"--structure {args.structure} --env {args.env}: expected "
                     f"{' or '.join(STRUCTURES)} (per_env with a brax/<name> env only)")
    for batch in (int(b) for b in args.batch.split(",")):
        for structure in structures:
            rate, _ = limit(args.env, batch, args.length, args.repeats, args.episode_length,
                            args.backend, structure, args.rollouts)
            extra = {"rollouts": args.rollouts} if structure == "per_env" else {}
            print(json.dumps({"side": "env_only", "env": args.env, "batch": batch,
                              "structure": structure, **extra, "env_steps_per_s": rate,
                              "device": jax.devices()[0].device_kind, "jax": jax.__version__}),
                  flush=True)


if __name__ == "__main__":
    main()
