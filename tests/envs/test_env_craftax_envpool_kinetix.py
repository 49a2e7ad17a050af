"""The Craftax, EnvPool and Kinetix families by name: the Env contract (terminated apart
from truncated, auto-reset, final observations, episode statistics and Craftax's
achievements as extra statistics) and the one-line errors of a missing or unusable
family. PPO through the recipe on Craftax and EnvPool: ``test_ppo_on_craftax_envpool.py``
(a file of its own, so that a parallel run's two workers share the compile time)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import envs
from jaxtrainer.envs.evaluation import episode_metrics
from jaxtrainer.envs.kinetix_env import _KINETIX_UNAVAILABLE
from tests.envs.test_env_families import _python

CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"  # float32[1345], 17 actions, 22 achievements

def _rollout(env, num_envs, steps, seed=0):
    """Random actions: ``(first obs, obs after each step, infos, done)``, leaves ``[steps,
    num_envs]``, host arrays (the checks compile no program each)."""

    def run(key):
        obs0, state = env.reset_batch(key, num_envs)

        def one(state, k):
            action = jax.random.randint(k, (num_envs,), 0, env.num_actions)
            obs, state, info = env.step_batch(k, state, action)
            return state, (obs, info)

        obs, info = jax.lax.scan(one, state, jax.random.split(key, steps))[1]
        return obs0, obs, info, info.done

    return jax.device_get(jax.jit(run)(jax.random.key(seed)))


def _stack(*leaves):
    """Host arrays stacked on the host; typed PRNG keys (which stay JAX arrays) by JAX."""
    if jnp.issubdtype(leaves[0].dtype, jax.dtypes.prng_key):
        return jnp.stack(leaves)
    return np.stack(leaves)


@pytest.fixture(scope="module")
def craftax():
    """Craftax Classic with a 2-step limit and 2 fresh worlds a step for 4 envs
    (reset_ratio 2), its first state and 3 random steps of 4 envs, which all reach
    the limit together at the second step: ``(env, state0, obs, infos)``, leaves
    ``[3, 4]``. The step is one compiled program called 3 times (Craftax's step
    compiles for seconds; a scan over it compiles longer still). Host arrays: the tests'
    checks, slices and stacks compile no program each."""
    pytest.importorskip("craftax")
    env = envs.make(CLASSIC, max_episode_steps=2, reset_ratio=2)  # every family's limit name
    # strong types, as the step returns them (weak ones would compile the step twice)
    _, state0 = jax.jit(lambda k: jax.tree.map(lambda x: x.astype(x.dtype), env.reset_batch(k, 4)))(
        jax.random.key(0))

    @jax.jit
    def step(key, state):
        obs, state, info = env.step_batch(key, state, jax.random.randint(key, (4,), 0, 17))
        return state, (obs, info)

    state, steps = state0, []
    for key in jax.random.split(jax.random.key(1), 3):
        state, out = step(key, state)
        steps.append(out)
    obs, info = jax.tree.map(_stack, *jax.device_get(steps))
    return env, jax.device_get(state0), obs, info


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_craftax_truncates_at_its_limit_resets_and_reports_its_achievements(craftax):
    env, _, obs, info = craftax
    assert (env.name, env.observation_shape, env.observation_dtype) == (CLASSIC, (1345,),
                                                                        jnp.float32)
    assert env.discrete and env.num_actions == 17 and env.max_episode_steps == 2
    assert obs.shape == (3, 4, 1345) and obs.dtype == jnp.float32
    assert np.all(info.truncated[1]) and not np.any(info.terminated)
    assert np.all(info.episode_length[1] == 2) and np.all(info.episode_length[2] == 1)
    assert np.all(info.final_obs[:1] == obs[:1])  # goes on: final_obs is the obs
    assert not np.all(info.final_obs[1] == obs[1])  # reset: the next episode's first
    assert np.allclose(info.episode_return[1], info.reward[:2].sum(0))
    extra = info.extra_statistics
    assert len(extra) == 22 and extra["achievements/collect_wood"].shape == (3, 4)
    assert all(np.all((v == 0) | (v == 1)) for v in extra.values())
    metrics = episode_metrics(info)
    assert "train/achievements/collect_wood" in metrics and "train/episode_return" in metrics


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_craftax_batches_share_fresh_worlds_and_reset_ratio_one_is_exact(craftax):
    """4 envs that all reach the time limit together take the batch's 2 fresh
    worlds in turn (reset_ratio 2: the rollout's second step); with reset_ratio=1
    a batched step is the exact per-env step (integers equal, floats to rounding:
    batched code vectorises differently)."""
    _, state, obs, info = craftax
    first = obs[1]  # every episode ended here: each env's next world
    assert np.all(info.truncated[1])
    assert np.all(first[2] == first[0]) and np.all(first[3] == first[1])
    assert not np.all(first[0] == first[1])
    exact = envs.make(CLASSIC, max_timesteps=1, reset_ratio=1)  # Craftax's own limit name
    assert exact.max_episode_steps == 1 and envs.make(CLASSIC).reset_ratio == 16
    keys, action = jax.random.split(jax.random.key(1), 4), np.arange(4, dtype=np.int32)
    batched = jax.device_get(jax.jit(jax.vmap(exact.step))(keys, state, action))
    step = jax.jit(exact.step)  # one by one: 4 calls of the unbatched program
    one_by_one = jax.tree.map(_stack, *jax.device_get([
        step(keys[i], jax.tree.map(lambda x, i=i: x[i], state), action[i]) for i in range(4)]))
    assert np.all(batched[2].truncated)  # every episode ended at its 1-step limit
    for got, want in zip(jax.tree.leaves(batched), jax.tree.leaves(one_by_one), strict=True):
        if jnp.issubdtype(got.dtype, jnp.floating):
            assert np.allclose(got, want, rtol=1e-6, atol=1e-6)
        else:
            assert np.all(got == want)
    assert len({jax.device_get(batched[0][i]).tobytes() for i in range(4)}) == 4  # own worlds
    with pytest.raises(ValueError, match=r"reset_ratio=0: expected an int >= 1"):
        envs.make(CLASSIC, reset_ratio=0)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_craftax_tells_death_from_its_time_limit(craftax):
    """A state whose player has no health is terminated; one at the time limit truncated."""
    env = craftax[0]
    ended = jax.jit(lambda key, timestep, health: env.ended(env.reset_env(key)[1].replace(
        timestep=timestep, player_health=health)))
    key = jax.random.key(0)
    assert [bool(x) for x in ended(key, 0, 9.0)] == [False, False]
    assert [bool(x) for x in ended(key, 2, 9.0)] == [False, True]
    assert [bool(x) for x in ended(key, 2, 0.0)] == [True, False]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_envpool_cartpole_follows_the_env_contract_and_reruns_reproduce():
    pytest.importorskip("envpool")
    env = envs.make("envpool/CartPole-v1", max_episode_steps=7)
    assert (env.observation_shape, env.observation_dtype) == ((4,), jnp.float32)
    assert env.discrete and env.num_actions == 2 and env.max_episode_steps == 7
    obs0, obs, info, done = _rollout(env, num_envs=3, steps=20)
    assert np.all(info.truncated[6]) and np.all(info.episode_length <= 7)
    assert not np.any(info.terminated & info.truncated)
    # auto-reset on the same step: the reached observation is final_obs
    assert np.all(np.where(done[..., None], info.final_obs != obs, True))
    assert np.all(np.where(~done[..., None], info.final_obs == obs, True))
    assert np.all(np.abs(np.where(done[..., None], obs, 0.0)) <= 0.05)
    assert np.all(np.where(done[:-1], info.episode_length[1:] == 1, True))
    assert np.allclose(info.episode_return, info.episode_length.astype(np.float32))
    again = _rollout(env, num_envs=3, steps=20)
    assert all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves((obs0, obs, info)), jax.tree.leaves(again[:3]), strict=True))
    assert not np.array_equal(obs0, _rollout(env, num_envs=3, steps=1, seed=1)[0])


@pytest.mark.parametrize("name,close", [
    ("craftax/Craftax-Classic-Symbolic-v2", CLASSIC),
    ("envpool/CartPole-v2", "envpool/CartPole-v1"),
])
def test_an_unknown_name_in_the_family_names_the_closest(name, close):
    pytest.importorskip(name.split("/")[0])
    with pytest.raises(ValueError, match=f"did you mean '{close}'"):
        envs.make(name)


@pytest.mark.timeout(120)
def test_a_missing_family_is_one_line_naming_its_extra_and_kinetix_says_why_not():
    """craftax and envpool made unimportable in a subprocess: one line naming the extra.
    Kinetix: one line naming the jax pin that keeps kinetix-env out."""
    names = {"craftax": CLASSIC, "envpool": "envpool/CartPole-v1"}
    done = _python(f"import sys\nnames = {names!r}\n"
                   "import jaxtrainer.envs as e\n"
                   "for module, name in [*names.items(), ('kinetix', 'kinetix/s-h0-weak-thrust')]:\n"
                   "    sys.modules[module] = None\n"
                   "    try:\n        e.make(name)\n"
                   "    except ImportError as err:\n        print(err)\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[:2] == [f'{m}/... environments need {m}: pip install -e ".[{m}]" (in a checkout; '
                         f'pip install "jaxtrainer[{m}]" otherwise)' for m in names]
    assert lines[2] == _KINETIX_UNAVAILABLE


def test_kinetix_names_the_version_conflict():
    with pytest.raises(ImportError) as raised:
        envs.make("kinetix/s-h0-weak-thrust")
    assert str(raised.value) == _KINETIX_UNAVAILABLE
    assert "jax<=0.9.0" in str(raised.value) and "jax 0.10" in str(raised.value)
