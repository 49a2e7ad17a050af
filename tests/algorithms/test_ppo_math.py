"""PPO's math: GAE with truncation bootstrapping, global advantage normalisation,
distributions, and the module end to end on an env with known returns: replicas
stay equal, completed episodes only, fresh-episode evaluation, bootstrapping at the
time limit."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxtrainer import envs
from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.algorithms.advantages import compute_gae, normalize_advantages
from jaxtrainer.algorithms.distributions import Categorical, DiagGaussian
from jaxtrainer.distributed import AXIS_NAME
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy
from tests.envs.test_envs import FixedLength

GAMMA, LAM = 0.9, 0.8


def gae_reference(rewards, values, next_values, terminated, truncated):
    """GAE from its definition, A_t = sum_k (gamma lambda)^k delta_{t+k} over the rest
    of the episode, with delta using V(final_obs) on truncation and 0 on termination."""
    T, n = rewards.shape
    adv = np.zeros((T, n))
    for e in range(n):
        for t in range(T):
            total = 0.0
            for k in range(t, T):
                bootstrap = 0.0 if terminated[k, e] else next_values[k, e]
                delta = rewards[k, e] + GAMMA * bootstrap - values[k, e]
                total += (GAMMA * LAM) ** (k - t) * delta
                if terminated[k, e] or truncated[k, e]:
                    break
            adv[t, e] = total
    return adv


def test_gae_matches_reference_with_truncated_and_terminated_steps():
    rng = np.random.default_rng(0)
    T, n = 7, 3
    rewards = rng.normal(size=(T, n)).astype(np.float32)
    values = rng.normal(size=(T, n)).astype(np.float32)
    next_values = rng.normal(size=(T, n)).astype(np.float32)
    terminated = np.zeros((T, n), bool)
    truncated = np.zeros((T, n), bool)
    terminated[2, 0] = True          # env 0: terminal state at t=2
    truncated[4, 1] = True           # env 1: time limit at t=4
    truncated[1, 2] = terminated[5, 2] = True
    adv, targets = compute_gae(jnp.asarray(rewards), jnp.asarray(values),
                               jnp.asarray(next_values), jnp.asarray(terminated),
                               jnp.asarray(terminated | truncated), GAMMA, LAM)
    want = gae_reference(rewards, values, next_values, terminated, truncated)
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, want + values, rtol=1e-5, atol=1e-5)
    # By hand: a terminal step's target is its reward; a truncated step's target
    # bootstraps from V(final_obs); the rollout's last step bootstraps too.
    assert targets[2, 0] == pytest.approx(rewards[2, 0])
    assert targets[4, 1] == pytest.approx(rewards[4, 1] + GAMMA * next_values[4, 1])
    last = rewards[6, 1] + GAMMA * next_values[6, 1] - values[6, 1]
    assert adv[6, 1] == pytest.approx(last)
    assert adv[5, 1] == pytest.approx(
        rewards[5, 1] + GAMMA * next_values[5, 1] - values[5, 1] + GAMMA * LAM * last, rel=1e-5)


def test_gae_per_unroll_equals_gae_of_each_segment():
    """With unroll_length=U the rollout is T/U independent unrolls, each ending in
    a bootstrap from next_value (Brax's PPO): equal to GAE run on every segment."""
    rng = np.random.default_rng(1)
    T, n, U = 12, 3, 4
    rewards, values, next_values = (rng.normal(size=(T, n)).astype(np.float32) for _ in range(3))
    terminated = np.zeros((T, n), bool)
    truncated = np.zeros((T, n), bool)
    terminated[5, 0] = truncated[2, 1] = True
    done = terminated | truncated
    adv, _ = compute_gae(*map(jnp.asarray, (rewards, values, next_values, terminated, done)),
                         GAMMA, LAM, unroll_length=U)
    want = np.concatenate([
        gae_reference(rewards[s:s + U], values[s:s + U], next_values[s:s + U],
                      terminated[s:s + U], truncated[s:s + U]) for s in range(0, T, U)])
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-5)
    # The last step of a segment bootstraps: its advantage is its own delta.
    assert adv[3, 2] == pytest.approx(rewards[3, 2] + GAMMA * next_values[3, 2] - values[3, 2])
    whole, _ = compute_gae(*map(jnp.asarray, (rewards, values, next_values, terminated, done)),
                           GAMMA, LAM)
    assert not np.allclose(whole, adv)
    with pytest.raises(ValueError, match="num_steps=10 is not a multiple of unroll_length=4"):
        PPOConfig(num_steps=10, num_minibatches=1, unroll_length=4)


def test_separate_critic_widths():
    ppo = PPO(PPOConfig(env="Pendulum-v1", num_envs=2, num_steps=4, num_minibatches=1,
                        hidden_sizes=(8, 8, 8), critic_hidden_sizes=[16], eval_episodes=2,
                        total_updates=1))
    params = jax.eval_shape(ppo.network.init, jax.random.key(0), jnp.zeros((1, 3)))["params"]
    assert [v["kernel"].shape for v in params["actor_body"].values()] == [(3, 8), (8, 8), (8, 8)]
    assert [v["kernel"].shape for v in params["critic_body"].values()] == [(3, 16)]
    with pytest.raises(ValueError, match="critic_hidden_sizes"):
        PPOConfig(critic_hidden_sizes=[0])


def test_gae_truncation_differs_from_termination():
    ones = jnp.ones((1, 1))
    no = jnp.zeros((1, 1), bool)
    yes = jnp.ones((1, 1), bool)
    _, truncated_target = compute_gae(ones, 0 * ones, 5 * ones, no, yes, GAMMA, LAM)
    _, terminal_target = compute_gae(ones, 0 * ones, 5 * ones, yes, yes, GAMMA, LAM)
    assert float(truncated_target[0, 0]) == pytest.approx(1 + GAMMA * 5)
    assert float(terminal_target[0, 0]) == pytest.approx(1.0)


def test_advantage_normalisation_uses_global_statistics():
    x = jax.random.normal(jax.random.key(0), (4, 8)) * jnp.arange(1.0, 5.0)[:, None] + 3.0
    flat = np.asarray(x).ravel()
    want = ((flat - flat.mean()) / (flat.std() + 1e-8)).reshape(4, 8)
    # named vmap axis: pmean inside is a mean over the 4 shares
    got = jax.vmap(normalize_advantages, axis_name=AXIS_NAME)(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # and over 4 devices
    mesh = jax.make_mesh((4,), (AXIS_NAME,), axis_types=(jax.sharding.AxisType.Explicit,))
    sharded = jax.device_put(x.reshape(32), jax.sharding.NamedSharding(mesh, P(AXIS_NAME)))
    fn = jax.jit(jax.shard_map(normalize_advantages, mesh=mesh, in_specs=P(AXIS_NAME),
                               out_specs=P(AXIS_NAME)))
    np.testing.assert_allclose(np.asarray(fn(sharded)).reshape(4, 8), want, rtol=1e-5, atol=1e-5)
    # a per-device normalisation would differ
    local = (np.asarray(x) - np.asarray(x).mean(1, keepdims=True)) / np.asarray(x).std(1, keepdims=True)
    assert not np.allclose(local, want, atol=1e-2)


def test_categorical_log_prob_and_entropy():
    logits = jnp.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]])
    p = np.exp(np.asarray(logits)) / np.exp(np.asarray(logits)).sum(-1, keepdims=True)
    dist = Categorical(logits)
    np.testing.assert_allclose(dist.log_prob(jnp.array([2, 1])),
                               [np.log(p[0, 2]), np.log(p[1, 1])], rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(), -(p * np.log(p)).sum(-1), rtol=1e-5)
    np.testing.assert_array_equal(dist.mode(), [2, 0])
    samples = jax.vmap(lambda k: Categorical(logits[0]).sample(k))(
        jax.random.split(jax.random.key(0), 4000))
    np.testing.assert_allclose(np.bincount(samples, minlength=3) / 4000, p[0], atol=0.03)


def test_categorical_log_prob_is_the_entry_without_a_gather_or_scatter():
    """log_prob picks the action's log-probability exactly, and neither it nor its
    gradient gathers or scatters (a scatter's updates run one by one on an accelerator)."""
    logits = jax.random.normal(jax.random.key(0), (64, 5)) * 3
    action = jax.random.randint(jax.random.key(1), (64,), 0, 5)
    logp = jax.nn.log_softmax(logits)
    np.testing.assert_array_equal(Categorical(logits).log_prob(action),
                                  jnp.take_along_axis(logp, action[:, None], axis=-1)[:, 0])
    grad = jax.jit(jax.grad(lambda x: Categorical(x).log_prob(action).sum()))
    text = grad.lower(logits).as_text()
    assert "gather" not in text and "scatter" not in text
    want = jax.grad(lambda x: jnp.take_along_axis(jax.nn.log_softmax(x), action[:, None],
                                                  axis=-1).sum())(logits)
    np.testing.assert_allclose(grad(logits), want, rtol=1e-6, atol=1e-7)


def test_diag_gaussian_log_prob_and_entropy():
    mean = jnp.array([[0.5, -1.0]])
    log_std = jnp.array([0.3, -0.7])
    a = jnp.array([[1.0, 0.0]])
    std = np.exp(np.asarray(log_std))
    want = sum(-0.5 * ((a[0, i] - mean[0, i]) / std[i]) ** 2 - math.log(std[i] * math.sqrt(2 * math.pi))
               for i in range(2))
    dist = DiagGaussian(mean, log_std)
    assert float(dist.log_prob(a)[0]) == pytest.approx(float(want), rel=1e-5)
    want_ent = sum(0.5 * math.log(2 * math.pi * math.e * s * s) for s in std)
    assert float(dist.entropy()[0]) == pytest.approx(want_ent, rel=1e-5)
    assert dist.entropy().shape == (1,)


def test_samples_from_noise_drawn_ahead_are_the_same_bits():
    keys = jax.random.split(jax.random.key(3), 6)
    cat = Categorical(jnp.array([[0.2, -1.0, 0.7], [1.5, 0.0, -0.3]]))
    gauss = DiagGaussian(jnp.array([[0.5, -1.0], [0.0, 2.0]]), jnp.array([0.3, -0.7]))
    for k in keys:
        np.testing.assert_array_equal(cat.sample(k), jax.random.categorical(k, cat.logits))
        np.testing.assert_array_equal(
            gauss.sample(k), gauss.mean + jnp.exp(gauss.log_std) * jax.random.normal(k, (2, 2)))
    # the noise of many steps drawn in one batched call from a distribution's shape
    # only (what the rollout does before its loop) gives each step's own sample
    for dist in (cat, gauss):
        noise = jax.vmap(jax.eval_shape(lambda d=dist: d).noise)(keys)
        assert noise.shape == (6,) + jax.tree.leaves(dist)[0].shape
        for k, n in zip(keys, noise, strict=True):
            np.testing.assert_array_equal(dist.sample_with(n), dist.sample(k))


@pytest.mark.slow
def test_rollout_actions_are_the_policy_samples_of_each_step_key():
    module = PPO(PPOConfig(env="CartPole-v1", num_envs=2, num_steps=6))
    state = jax.jit(module.init_state)(jax.random.key(0))
    key = jax.random.key(5)
    _, _, traj = jax.jit(module.rollout)(state.params, state.env_state, state.obs, key)
    act_keys = jax.vmap(jax.random.split)(jax.random.split(key, 6))[:, 0]
    apply = jax.jit(module.network.apply)
    for t in range(6):  # each step's action is sampled with that step's action key
        dist, _ = apply(state.params, traj.obs[t])
        np.testing.assert_array_equal(traj.action[t], dist.sample(act_keys[t]))
        np.testing.assert_allclose(traj.log_prob[t], dist.log_prob(traj.action[t]), rtol=1e-6)


def test_validate_names_the_value_and_device_count():
    ppo = PPO(PPOConfig(num_envs=6, num_steps=8, num_minibatches=2))
    with pytest.raises(ValueError, match=r"num_envs=6.*4 devices"):
        ppo.validate(4)
    ppo = PPO(PPOConfig(num_envs=4, num_steps=3, num_minibatches=2))
    with pytest.raises(ValueError, match=r"= 6 is not divisible by the 4 devices"):
        ppo.validate(4)
    ppo.validate(2)
    with pytest.raises(ValueError, match="eval_episodes=6"):
        PPO(PPOConfig(eval_episodes=6)).validate(4)
    with pytest.raises(ValueError, match="num_minibatches=3"):
        PPOConfig(num_envs=4, num_steps=5, num_minibatches=3)
    assert PPO(PPOConfig(num_envs=8, num_steps=16)).env_steps_per_step == 128


@pytest.fixture(scope="module")
def fixed_ppo():
    """PPO on episodes of exactly 10 steps (reward 1 each, truncated by the time
    limit), 4 envs, 5-step rollouts, on 4 devices."""
    env = envs.GymnaxEnv(FixedLength(length=10), name="FixedLength")
    ppo = PPO(PPOConfig(num_envs=4, num_steps=5, num_minibatches=1, update_epochs=2,
                        hidden_sizes=(8,), eval_episodes=4, total_updates=100), env=env)
    strategy = PmapStrategy(devices=4)
    ppo.validate(strategy.num_devices)
    state = strategy.init_state(ppo, jax.random.key(0))
    train = strategy.compile_train(ppo, state, jax.random.key(1))
    evaluate = strategy.compile_eval(ppo, state, jax.random.key(2))

    def fresh():  # the compiled train step donates its state argument
        return strategy.init_state(ppo, jax.random.key(0))

    return ppo, fresh, train.fn, evaluate.fn


@pytest.mark.slow
def test_ppo_reports_completed_episodes_only(fixed_ppo):
    # a 5-step rollout completes no episode; 25 steps complete 2 per env, each 10.
    _, fresh, train, _ = fixed_ppo
    _, m = train(fresh(), jax.random.key(1), jnp.int32(0), jnp.int32(1))
    m = to_host(m)
    assert "train/episode_return" not in m and "train/episode_length" not in m
    assert set(m) >= {"loss/total", "loss/policy", "loss/value", "loss/entropy",
                      "loss/approx_kl", "lr"}
    assert m["lr"] == pytest.approx(2.5e-4)
    _, m = train(fresh(), jax.random.key(1), jnp.int32(0), jnp.int32(5))
    host = to_host(m)
    assert float(m["train/episode_return"].count) == 8.0
    assert host["train/episode_return"] == 10.0 and host["train/episode_length"] == 10.0
    assert host["lr"] == pytest.approx(2.5e-4 * (1 - 4 / 100))   # the last update's (4)


def test_ppo_replicas_stay_equal_over_4_devices(fixed_ppo):
    # after 20 updates every device holds the same parameters and optimizer state.
    _, fresh, train, _ = fixed_ppo
    state, m = train(fresh(), jax.random.key(1), jnp.int32(0), jnp.int32(20))
    assert int(state.update_count) == 20
    for leaf in jax.tree.leaves((state.params, state.opt_state)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
    assert state.obs.shape == (4, 1) and state.env_state.episode_return.shape == (4,)
    assert all(math.isfinite(v) for v in to_host(m).values())


@pytest.mark.slow
def test_ppo_targets_bootstrap_on_truncation(fixed_ppo):
    # truncation through the module: at the time limit the target is r + gamma V(final_obs).
    ppo = fixed_ppo[0]
    params = jax.jit(ppo.network.init)(jax.random.key(0), jnp.zeros((1,)))
    obs, env_state = jax.jit(ppo.env.reset_batch, static_argnums=1)(jax.random.key(1), 2)
    # three 5-step rollouts: the 10th step (index 9) hits the time limit
    steps = []
    state, o = env_state, obs
    rollout = jax.jit(ppo.rollout)
    for i in range(3):
        state, o, t = rollout(params, state, o, jax.random.key(10 + i))
        steps.append(t)
    traj = jax.tree.map(lambda *x: jnp.concatenate(x), *steps)
    assert bool(traj.info.truncated[9].all()) and not bool(traj.info.terminated.any())
    _, targets = jax.jit(ppo.advantages_and_targets)(params, traj)
    v_final = ppo.network.apply(params, traj.info.final_obs[9], method=type(ppo.network).value)
    np.testing.assert_allclose(targets[9], 1.0 + ppo.config.gamma * v_final, rtol=1e-5)
    assert not np.allclose(targets[9], 1.0)


@pytest.mark.parametrize("terminate", [False, True])
def test_next_values_are_v_of_final_obs_valued_only_where_needed(monkeypatch, terminate):
    # the next values come from traj.value inside an episode and from the critic only
    # at the last step and at truncations (a loop, several per env here), the values
    # in chunks of whole steps (CRITIC_ROWS=8: 2 steps of 4 envs): the advantages are
    # those of V(final_obs) at every step, bit for bit.
    from jaxtrainer.algorithms import rollout

    monkeypatch.setattr(rollout, "CRITIC_ROWS", 8)
    env = envs.GymnaxEnv(FixedLength(length=3, terminate=terminate, terminate_at=2),
                         name="FixedLength")
    ppo = PPO(PPOConfig(num_envs=4, num_steps=13, hidden_sizes=(8,), reward_scaling=2.0,
                        normalize_observations=True, unroll_length=None), env=env)
    state = jax.jit(ppo.init_state)(jax.random.key(0))
    _, _, traj = jax.jit(ppo.rollout)(state.params, state.env_state, state.obs,
                                      jax.random.key(1), state.obs_stats)
    done = np.asarray(traj.info.done)
    assert done.sum(axis=0).min() >= 4 and bool(traj.info.terminated.any()) == terminate

    @jax.jit
    def reference(traj):  # every step's V(final_obs), in one pass
        def value(obs):
            return ppo.network.apply(state.params, ppo._normalize_obs(state.obs_stats, obs),
                                     method=type(ppo.network).value)
        values = value(traj.obs)
        return values, compute_gae(traj.info.reward * 2.0, values, value(traj.info.final_obs),
                                   traj.info.terminated, traj.info.done, ppo.config.gamma,
                                   ppo.config.gae_lambda)

    values, want = reference(traj)
    got = jax.jit(ppo.advantages_and_targets)(state.params, traj, None, state.obs_stats)
    np.testing.assert_array_equal(traj.value, values)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_terminal_only_bootstrapping_is_purejaxrl_gae(fixed_ppo):
    # bootstrap_truncation=False: every episode end is terminal, the next value is
    # the next step's V(obs), the rollout's last step bootstraps from V(last_obs):
    # PureJaxRL's recursion, written out here with numpy.
    ppo = PPO(dataclasses.replace(fixed_ppo[0].config, bootstrap_truncation=False),
              env=fixed_ppo[0].env)
    params = jax.jit(ppo.network.init)(jax.random.key(0), jnp.zeros((1,)))
    obs, env_state = jax.jit(ppo.env.reset_batch, static_argnums=1)(jax.random.key(1), 2)
    rollout = jax.jit(ppo.rollout)
    state, last_obs2, first = rollout(params, env_state, obs, jax.random.key(3))
    assert not np.asarray(first.info.done).any()
    steps = []  # env steps 5..14: the time limit (10 steps) ends step index 4
    for i in range(2):
        state, last_obs2, t = rollout(params, state, last_obs2, jax.random.key(4 + i))
        steps.append(t)
    traj = jax.tree.map(lambda *x: jnp.concatenate(x), *steps)
    done = np.asarray(traj.info.done, np.float32)
    assert done[4].all() and done.sum() == 2  # step 10 of each episode, truncated
    values = np.asarray(traj.value)
    last_value = np.asarray(ppo.network.apply(params, last_obs2, method=type(ppo.network).value))
    rewards = np.asarray(traj.info.reward)
    gamma, lam = ppo.config.gamma, ppo.config.gae_lambda
    want, gae, next_value = np.zeros_like(values), np.zeros_like(last_value), last_value
    for t in reversed(range(len(values))):
        delta = rewards[t] + gamma * next_value * (1 - done[t]) - values[t]
        gae = delta + gamma * lam * (1 - done[t]) * gae
        want[t], next_value = gae, values[t]
    adv, targets = jax.jit(ppo.advantages_and_targets)(params, traj, last_obs=last_obs2)
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(targets, want + values, rtol=1e-5, atol=1e-6)
    assert np.allclose(targets[4], 1.0)  # the truncated step: no bootstrap
    with pytest.raises(ValueError, match="needs last_obs"):
        ppo.advantages_and_targets(params, traj)


def test_ppo_evaluation_uses_fresh_episodes(fixed_ppo):
    # whatever the training state's envs are doing, evaluation runs fresh ones.
    _, fresh, train, evaluate = fixed_ppo
    state, _ = train(fresh(), jax.random.key(1), jnp.int32(0), jnp.int32(1))  # envs mid-episode
    assert bool((state.env_state.episode_length == 5).all())
    m = evaluate(state, jax.random.key(5))
    assert float(m["eval/episode_return"].count) == 4.0
    assert to_host(m) == {"eval/episode_return": 10.0, "eval/episode_length": 10.0}


@pytest.mark.slow
def test_ppo_continuous_actions_run_and_stay_finite():
    ppo = PPO(PPOConfig(env="Pendulum-v1", num_envs=2, num_steps=8, num_minibatches=2,
                        update_epochs=1, hidden_sizes=(8,), eval_episodes=2, total_updates=3))
    assert not ppo.network.discrete
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(ppo, jax.random.key(0))
    train = strategy.compile_train(ppo, state, jax.random.key(1))
    state, m = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(3))
    m = to_host(m)
    assert all(math.isfinite(v) for v in m.values())
    assert "log_std" in state.params["params"]
    assert m["loss/entropy"] == pytest.approx(0.5 * math.log(2 * math.pi * math.e), abs=0.05)
