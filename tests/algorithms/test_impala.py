"""IMPALA: V-trace against the paper's definition computed by hand (truncated
importance weights, truncation vs termination), V-trace on on-policy data equal
to n-step / GAE returns, the lagged behaviour policy, replicas bitwise equal on
2 devices, continuous actions, config errors and the recipe."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import envs
from jaxtrainer.algorithms import IMPALA, IMPALAConfig
from jaxtrainer.algorithms.impala import vtrace
from jaxtrainer.algorithms.onpolicy import compute_gae
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy
from tests.envs.test_envs import FixedLength


def vtrace_by_hand(values, next_values, rewards, log_rhos, terminated, done, gamma, lam,
                   rho_bar, c_bar, pg_rho_bar):
    """The paper's definition (arXiv:1802.01561, eq. 1) as a sum, one env, numpy loops:
    v_s = V(x_s) + sum_{t=s}^{end} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t, where
    the sum stops at the episode's last step inside the rollout or at the rollout's end,
    delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t)) with V(x_{t+1}) = next_values[t]
    (0 on termination, the bootstrap value on truncation)."""
    T = len(values)
    ratio = np.exp(log_rhos)
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
    boot = np.where(terminated, 0.0, next_values)
    delta = rho * (rewards + gamma * boot - values)
    v = np.zeros(T)
    for s in range(T):
        total, weight = 0.0, 1.0
        for t in range(s, T):
            total += gamma ** (t - s) * weight * delta[t]
            if done[t]:
                break
            weight *= c[t]
        v[s] = values[s] + total
    # the target of the observation each step reached: v_{s+1} inside an episode,
    # V(final_obs) after its end or at the rollout's end
    v_next = np.array([v[s + 1] if s + 1 < T and not done[s] else next_values[s]
                       for s in range(T)])
    adv = np.minimum(pg_rho_bar, ratio) * (rewards + gamma * np.where(terminated, 0.0, v_next)
                                           - values)
    return v, adv


def random_rollout(seed, T=12, n=3):
    """``[T, n]`` data with episode ends inside the rollout: env 0 truncated at t=4,
    env 1 terminated at t=6, env 2 truncated at t=2 and terminated at t=8.
    ``next_values[t] = values[t+1]`` inside an episode (as an env reports it)."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(T, n)).astype(np.float32)
    rewards = rng.normal(size=(T, n)).astype(np.float32)
    log_rhos = rng.normal(scale=0.7, size=(T, n)).astype(np.float32)  # both sides of 1
    terminated = np.zeros((T, n), bool)
    truncated = np.zeros((T, n), bool)
    truncated[4, 0] = truncated[2, 2] = True
    terminated[6, 1] = terminated[8, 2] = True
    done = terminated | truncated
    next_values = np.concatenate([values[1:], rng.normal(size=(1, n))]).astype(np.float32)
    bootstrap = rng.normal(size=(T, n)).astype(np.float32)  # V(final_obs) where an episode ended
    next_values = np.where(done, bootstrap, next_values)
    return values, next_values, rewards, log_rhos, terminated, done


@pytest.mark.parametrize("lam, rho_bar, c_bar, pg_rho_bar",
                         [(1.0, 1.0, 1.0, 1.0), (0.9, 1.3, 0.7, 0.5)])
def test_vtrace_matches_the_papers_definition_by_hand(lam, rho_bar, c_bar, pg_rho_bar):
    values, next_values, rewards, log_rhos, terminated, done = random_rollout(0)
    ratio = np.exp(log_rhos)
    assert (ratio > max(rho_bar, c_bar, pg_rho_bar)).any() and (ratio < 0.5).any()  # clipping bites
    targets, adv = vtrace(*map(jnp.asarray, (values, next_values, rewards, log_rhos,
                                             terminated, done)),
                          gamma=0.9, lambda_=lam, rho_bar=rho_bar, c_bar=c_bar,
                          pg_rho_bar=pg_rho_bar)
    assert targets.shape == adv.shape == (12, 3) and targets.dtype == jnp.float32
    for env in range(3):
        want_v, want_adv = vtrace_by_hand(
            values[:, env], next_values[:, env], rewards[:, env], log_rhos[:, env],
            terminated[:, env], done[:, env], 0.9, lam, rho_bar, c_bar, pg_rho_bar)
        np.testing.assert_allclose(np.asarray(targets[:, env]), want_v, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(adv[:, env]), want_adv, rtol=1e-5, atol=1e-5)


def test_vtrace_truncation_bootstraps_and_termination_does_not():
    # Three steps, the episode ends at t=1; rho = 2 is clipped to rho_bar = 1.
    values = jnp.array([1.0, 2.0, 3.0])
    next_values = jnp.array([2.0, 10.0, 4.0])        # V(final_obs) = 10 at the end, t=1
    rewards = jnp.array([1.0, 1.0, 1.0])
    log_rhos = jnp.log(jnp.array([1.0, 2.0, 0.5]))
    end = jnp.array([False, True, False])
    never = jnp.zeros(3, bool)
    g = 0.5
    trunc, _ = vtrace(values, next_values, rewards, log_rhos, never, end, g)
    term, _ = vtrace(values, next_values, rewards, log_rhos, end, end, g)
    # t=2: v = 3 + 0.5 * (1 + 0.5 * 4 - 3) (the rollout's end bootstraps from next_value)
    # t=1 truncated: v = 2 + 1 * (1 + 0.5 * 10 - 2) = 6, the trace stops there
    # t=1 terminated: v = 2 + 1 * (1 - 2) = 1
    # t=0: v = 1 + (1 + 0.5 * 2 - 1) + 0.5 * c_0 (v_1 - V_1), c_0 = 1
    np.testing.assert_allclose(np.asarray(trunc), [1 + 1 + 0.5 * 4, 6.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(term), [1 + 1 + 0.5 * -1, 1.0, 3.0], rtol=1e-6)


@pytest.mark.parametrize("bar", [1.0, 3.0])
def test_vtrace_on_policy_is_the_n_step_return(bar):
    values, next_values, rewards, _, terminated, done = random_rollout(1)
    zeros = np.zeros_like(values)
    targets, adv = vtrace(*map(jnp.asarray, (values, next_values, rewards, zeros, terminated,
                                             done)),
                          gamma=0.9, lambda_=1.0, rho_bar=bar, c_bar=bar, pg_rho_bar=bar)
    gae_adv, gae_targets = compute_gae(*map(jnp.asarray, (rewards, values, next_values,
                                                          terminated, done)), 0.9, 1.0)
    np.testing.assert_allclose(np.asarray(targets), np.asarray(gae_targets), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(adv), np.asarray(gae_adv), rtol=1e-5, atol=1e-5)
    # the n-step return written out: discounted rewards to the episode's or rollout's
    # end, then the bootstrap value (0 after termination)
    T = values.shape[0]
    for env in range(values.shape[1]):
        for s in range(T):
            ret, t = 0.0, s
            while True:
                ret += 0.9 ** (t - s) * rewards[t, env]
                if done[t, env] or t == T - 1:
                    break
                t += 1
            ret += 0.9 ** (t - s + 1) * (0.0 if terminated[t, env] else next_values[t, env])
            assert float(targets[s, env]) == pytest.approx(ret, rel=1e-5, abs=1e-5)
    # lambda < 1 on-policy: GAE(lambda)'s targets
    targets, _ = vtrace(*map(jnp.asarray, (values, next_values, rewards, zeros, terminated,
                                           done)), gamma=0.9, lambda_=0.8)
    _, gae_targets = compute_gae(*map(jnp.asarray, (rewards, values, next_values, terminated,
                                                    done)), 0.9, 0.8)
    np.testing.assert_allclose(np.asarray(targets), np.asarray(gae_targets), rtol=1e-5, atol=1e-5)


def test_impala_loss_by_hand():
    impala = IMPALA(IMPALAConfig(hidden_sizes=(4,), vf_coef=0.5, ent_coef=0.1))
    params = jax.jit(impala.network.init)(jax.random.key(0), jnp.zeros((4,)))
    T, B = 5, 2
    obs = jax.random.normal(jax.random.key(1), (T, B, 4))
    final_obs = jax.random.normal(jax.random.key(2), (T, B, 4))
    batch = {"obs": obs, "final_obs": final_obs, "action": jnp.array([[0, 1]] * T),
             "log_prob": jnp.full((T, B), -0.8), "reward": jnp.ones((T, B)),
             "terminated": jnp.zeros((T, B), bool).at[3, 0].set(True),
             "done": jnp.zeros((T, B), bool).at[3, 0].set(True)}
    hp = impala.initial_hyperparams()
    total, aux = jax.jit(impala.loss)(params, batch, hp)

    @jax.jit
    def reference(params, batch):  # the pieces, composed here
        dist, value = impala.network.apply(params, batch["obs"])
        _, next_value = impala.network.apply(params, batch["final_obs"])
        logp = dist.log_prob(batch["action"])
        targets, adv = vtrace(value, next_value, batch["reward"], logp - batch["log_prob"],
                              batch["terminated"], batch["done"], 0.99)
        return dist.entropy(), value, logp, targets, adv

    entropy, value, logp, targets, adv = reference(params, batch)
    policy = -np.mean(np.asarray(adv) * np.asarray(logp))
    vloss = 0.5 * np.mean((np.asarray(value) - np.asarray(targets)) ** 2)
    ent = np.mean(np.asarray(entropy))
    assert float(aux["policy"]) == pytest.approx(policy, rel=1e-5)
    assert float(aux["value"]) == pytest.approx(vloss, rel=1e-5)
    assert float(aux["rho"]) == pytest.approx(np.mean(np.exp(np.asarray(logp) + 0.8)), rel=1e-5)
    assert float(total) == pytest.approx(policy + 0.5 * vloss - 0.1 * ent, rel=1e-5)


@pytest.mark.slow
def test_lagged_behaviour_learns_and_replicas_stay_bitwise_equal_on_2_devices():
    # Reward = action, episodes of 5 steps: the policy must learn to pick action 1
    # every step (return 5). Behaviour 2 updates behind the learner, 2 epochs x 2
    # minibatches of whole trajectories per update, each device holding 4 of the 8 envs.
    env = envs.GymnaxEnv(FixedLength(length=5, reward_is_action=True), name="FixedLength")
    impala = IMPALA(IMPALAConfig(num_envs=8, num_steps=5, policy_lag=2, update_epochs=2,
                                 num_minibatches=2, lr=3e-3, anneal_lr=False, hidden_sizes=(16,),
                                 eval_episodes=4), env=env)
    assert impala.env_steps_per_step == 40
    impala.validate(2)
    strategy = PmapStrategy(devices=2)
    state = strategy.init_state(impala, jax.random.key(0))
    assert len(state.behaviour_params) == 2
    train = strategy.compile_train(impala, state, jax.random.key(1))
    history, rhos = [jax.device_get(state.params)], []
    for step in range(3):
        state, m = train.fn(state, jax.random.key(1), step, 1)
        history.append(jax.device_get(state.params))
        rhos.append(to_host(m)["loss/rho"])
    # after 3 updates the queue holds the params before updates 2 and 3, oldest first
    for got, want in zip(state.behaviour_params, history[1:3], strict=True):
        jax.tree.map(np.testing.assert_array_equal, jax.device_get(got), want)
    assert all(r != 1.0 for r in rhos)                      # off-policy minibatch steps
    state, m = train.fn(state, jax.random.key(1), 3, 150)
    for leaf in jax.tree.leaves((state.params, state.opt_state, state.behaviour_params)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 2
        np.testing.assert_array_equal(shards[1], shards[0])
    assert int(state.update_count) == 153
    assert to_host(m)["train/episode_return"] > 4.0          # mean over the 150 updates


@pytest.mark.slow
def test_on_policy_continuous_actions_have_rho_one_and_stay_finite():
    # policy_lag=0 and one minibatch step per update: the rollout's policy is the
    # learner's, so every importance ratio is exactly 1
    impala = IMPALA(IMPALAConfig(env="Pendulum-v1", num_envs=2, num_steps=4, hidden_sizes=(8,),
                                 policy_lag=0, update_epochs=1, num_minibatches=1,
                                 anneal_lr=False, eval_episodes=2))
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(impala, jax.random.key(0))
    assert state.behaviour_params == ()
    train = strategy.compile_train(impala, state, jax.random.key(1))
    state, m = train.fn(state, jax.random.key(1), 0, 3)
    m = to_host(m)
    assert all(np.isfinite(v) for v in m.values())
    assert m["loss/rho"] == 1.0 and m["loss/approx_kl"] == 0.0
    assert int(state.update_count) == 3


def test_impala_rejects_bad_values_before_compiling():
    with pytest.raises(ValueError, match=r"vtrace: expected arrays of one shape \[T, \.\.\.\], "
                                         r"got values\[4, 2\], next_values\[4, 2\], rewards\[4\]"):
        vtrace(jnp.zeros((4, 2)), jnp.zeros((4, 2)), jnp.zeros(4), jnp.zeros((4, 2)),
               jnp.zeros((4, 2), bool), jnp.zeros((4, 2), bool), 0.99)
    with pytest.raises(ValueError, match=r"num_envs=6 is not divisible by num_minibatches=4"):
        IMPALAConfig(num_envs=6, num_minibatches=4)
    with pytest.raises(ValueError, match=r"IMPALAConfig.policy_lag=-1: expected an int >= 0"):
        IMPALAConfig(policy_lag=-1)
    with pytest.raises(ValueError, match=r"IMPALAConfig.rho_bar=0: expected a number > 0"):
        IMPALAConfig(rho_bar=0)
    with pytest.raises(ValueError, match=r"IMPALA: num_envs=6 is not divisible by the 4 devices"):
        IMPALA(IMPALAConfig(num_envs=6, num_minibatches=1)).validate(4)
    with pytest.raises(ValueError, match=r"num_envs/num_minibatches = 8/4 = 2, are not divisible "
                                         r"by the 4 devices"):
        IMPALA(IMPALAConfig(num_envs=8, num_minibatches=4)).validate(4)
    IMPALA(IMPALAConfig(num_envs=8, num_minibatches=2)).validate(4)


@pytest.mark.slow
def test_impala_recipe_tiny_run_on_4_devices(run_dir, capsys):
    from test_dqn import run_recipe

    result, rows = run_recipe("impala", run_dir, capsys, "trainer.max_env_steps=4096",
                              "trainer.log_every_n_steps=4", "algorithm.hidden_sizes=[16]",
                              "algorithm.eval_episodes=4", "logger.tensorboard=false",
                              "trainer.enable_checkpointing=false")
    assert int(rows[-1]["env_steps"]) == 4096                # 8 updates x 512 env steps
    assert 8.0 <= result["eval/episode_return"] <= 500.0
