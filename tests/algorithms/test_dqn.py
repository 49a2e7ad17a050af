"""DQN: double-DQN targets, the epsilon schedule, target-network updates, learned
Q-values that bootstrap on truncation, replicas that stay equal on 4 devices."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxtrainer import envs
from jaxtrainer.algorithms.dqn import (
    DQN,
    DQNConfig,
    epsilon_greedy,
    quantile_huber_loss,
    td_targets,
)
from jaxtrainer.algorithms.exploration import linear_schedule
from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.algorithms.target_update import periodic_soft_update, soft_update
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import SingleDeviceStrategy
from tests.envs.test_envs import FixedLength


def test_double_dqn_target_uses_online_argmax_and_target_value():
    online = jnp.array([[1.0, 5.0, 0.0], [2.0, 0.0, 3.0]])
    target = jnp.array([[4.0, 1.0, 9.0], [7.0, 8.0, 6.0]])
    r = jnp.array([1.0, 2.0])
    no = jnp.array([False, False])
    # online picks actions 1 and 2 -> target values 1 and 6
    np.testing.assert_allclose(td_targets(online, target, r, no, 0.5), [1.5, 5.0])
    # plain DQN: max of the target network, 9 and 8
    np.testing.assert_allclose(td_targets(online, target, r, no, 0.5, double=False), [5.5, 6.0])
    # terminal transitions do not bootstrap
    np.testing.assert_allclose(td_targets(online, target, r, jnp.array([True, False]), 0.5),
                               [1.0, 5.0])


def test_epsilon_schedule_values():
    dqn = DQN(DQNConfig(epsilon_start=1.0, epsilon_end=0.05, epsilon_anneal_steps=1000,
                        num_envs=4, buffer_size=8))
    got = [float(dqn.epsilon(jnp.int32(t))) for t in (0, 250, 500, 1000, 5000)]
    np.testing.assert_allclose(got, [1.0, 0.7625, 0.525, 0.05, 0.05], rtol=1e-6)
    assert float(linear_schedule(0.3, 0.1, 0, 7)) == pytest.approx(0.1)
    # the rate is the fraction of random actions
    q = jnp.tile(jnp.array([[0.0, 1.0, 0.0, 0.0]]), (20000, 1))
    actions = np.asarray(epsilon_greedy(jax.random.key(0), q, jnp.float32(0.4)))
    assert np.mean(actions != 1) == pytest.approx(0.4 * 3 / 4, abs=0.015)
    assert np.all(np.asarray(epsilon_greedy(jax.random.key(1), q, jnp.float32(0.0))) == 1)


def test_soft_and_hard_target_update_math():
    target = {"w": jnp.array([0.0, 10.0]), "b": jnp.array(4.0)}
    online = {"w": jnp.array([1.0, 20.0]), "b": jnp.array(0.0)}
    soft = soft_update(target, online, 0.1)
    np.testing.assert_allclose(soft["w"], [0.1, 11.0], rtol=1e-6)
    np.testing.assert_allclose(soft["b"], 3.6, rtol=1e-6)
    hard = soft_update(target, online, 1.0)
    np.testing.assert_array_equal(hard["w"], online["w"])
    assert float(periodic_soft_update(target, online, 0.5, jnp.int32(3), 2)["b"]) == 4.0
    assert float(periodic_soft_update(target, online, 0.5, jnp.int32(4), 2)["b"]) == 2.0


def fixed_env(**kwargs):
    return envs.GymnaxEnv(FixedLength(length=5, reward_is_action=True, **kwargs), name="FixedLength")


def tiny(tau, interval, **kw):
    cfg = DQNConfig(num_envs=4, buffer_size=64, batch_size=8, learning_starts=0, tau=tau,
                    target_update_interval=interval, hidden_sizes=(8,), eval_episodes=4)
    return DQN(cfg, env=fixed_env(), **kw)


_COMPILED: dict = {}


def run_steps(module, strategy, n, **hyperparams):
    """``n`` training steps from a fresh state (seed 0), compiled once per module;
    ``hyperparams``: values in ``state.hyperparams`` other than the config's."""
    state = strategy.init_state(module, jax.random.key(0))
    state = state.replace(hyperparams={**state.hyperparams, **{
        k: jax.device_put(jnp.asarray(v, state.hyperparams[k].dtype),
                          state.hyperparams[k].sharding) for k, v in hyperparams.items()}})
    if id(module) not in _COMPILED:
        _COMPILED[id(module)] = (module, strategy.compile_train(module, state, jax.random.key(1)))
    train = _COMPILED[id(module)][1]
    return train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(n))


@functools.cache
def every_8_env_steps():
    """DQN on 4 envs updating its target every 8 env steps (tau 1: a hard copy), one
    module (and so one compiled program) for the target-update tests."""
    return tiny(1.0, 8)


@pytest.mark.slow
def test_hard_target_update_every_interval_env_steps():
    # 4 env steps per training step, interval 8 env steps: copy after steps 2, 4, ...
    dqn = every_8_env_steps()
    strategy = SingleDeviceStrategy()
    init = strategy.init_state(dqn, jax.random.key(0))
    p0 = jax.tree.map(np.asarray, init.params)
    s1, _ = run_steps(dqn, strategy, 1)
    s2, _ = run_steps(dqn, strategy, 2)
    s3, _ = run_steps(dqn, strategy, 3)
    jax.tree.map(np.testing.assert_array_equal, s1.target_params, p0)          # not yet
    assert not all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(s1.params), jax.tree.leaves(p0), strict=True))          # learned
    jax.tree.map(np.testing.assert_array_equal, s2.target_params, s2.params)   # copied
    jax.tree.map(np.testing.assert_array_equal, s3.target_params, s2.params)   # kept
    assert int(s3.updates) == 3 and int(s3.step) == 3


@pytest.mark.slow
def test_soft_target_update_polyak_averages():
    """tau 0.25 (a traced hyperparameter: the hard-update test's program) every 8
    env steps: t <- 0.25 p + 0.75 t after steps 2 and 4, kept after step 3."""
    dqn, strategy = every_8_env_steps(), SingleDeviceStrategy()
    s1, s2, s3, s4 = (run_steps(dqn, strategy, n, tau=0.25)[0] for n in (1, 2, 3, 4))
    assert float(s4.hyperparams["tau"]) == 0.25
    for before, after in ((s1, s2), (s3, s4)):
        want = jax.tree.map(lambda p, t: 0.25 * p + 0.75 * t, after.params, before.target_params)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                     after.target_params, want)
    jax.tree.map(np.testing.assert_array_equal, s3.target_params, s2.target_params)


@pytest.mark.slow
@pytest.mark.parametrize("terminate", [False, True])
def test_learned_q_values_bootstrap_on_truncation_only(terminate):
    # Reward = action (1 is best), gamma 0.5, episodes of 5 steps. With truncation the
    # optimal Q is 1/(1-gamma) = 2 for action 1 at every step, also the last one; when the
    # 5th step is a terminal state instead, Q(last, 1) = 1 and Q(last, 0) = 0.
    cfg = DQNConfig(num_envs=4, buffer_size=400, batch_size=64, learning_starts=0, lr=3e-3,
                    gamma=0.5, tau=1.0, target_update_interval=40, epsilon_start=1.0,
                    epsilon_end=1.0, hidden_sizes=(32,), eval_episodes=4)
    dqn = DQN(cfg, env=fixed_env(terminate=terminate))
    state, m = run_steps(dqn, SingleDeviceStrategy(), 1500)
    q = np.asarray(dqn.network.apply(state.params, jnp.arange(5.0)[:, None]))
    if terminate:
        np.testing.assert_allclose(q[:4, 1], [1.9375, 1.875, 1.75, 1.5], atol=0.08)
        np.testing.assert_allclose(q[4], [0.0, 1.0], atol=0.08)
    else:
        np.testing.assert_allclose(q[:, 1], 2.0, atol=0.08)
        np.testing.assert_allclose(q[:, 0], 1.0, atol=0.08)
    assert to_host(m)["train/episode_length"] == 5.0


def test_dqn_rejects_sizes_and_continuous_actions():
    with pytest.raises(ValueError, match=r"DQN: batch_size=6 is not divisible by the 4 devices"):
        tiny(1.0, 8, batch_size=6).validate(4)
    with pytest.raises(ValueError, match="eval_episodes=6"):
        tiny(1.0, 8, eval_episodes=6).validate(4)
    with pytest.raises(ValueError, match="discrete actions"):
        DQN(DQNConfig(env="Pendulum-v1", num_envs=4, buffer_size=8))


@pytest.mark.slow
def test_dqn_resumes_exactly_with_its_replay_buffer(tmp_path):
    # 3 steps + checkpoint + resume + 3 steps equals 6 straight on 2 devices, buffer
    # included; the same checkpoint also restores on 1 device (the buffer's global
    # shape [num_envs, capacity / num_envs, ...] does not depend on the device count).
    import os

    import jaxtrainer as jt
    from tests._support import toys

    def module():
        return tiny(1.0, 8)

    kw = dict(strategy="pmap", devices=2)
    straight = toys.trainer(tmp_path, max_steps=6, callbacks=[
        jt.CSVLogger(), jt.ModelCheckpoint(every_n_steps=3, async_save=False)], **kw)
    straight.fit(module())
    want = toys.leaves(straight.state)
    ckpt = os.path.join(straight.log_dir, "checkpoints", "3")
    # the resumed runs save nothing (their final checkpoints would not be read)
    resumed = toys.trainer(tmp_path, max_steps=6, enable_checkpointing=False, **kw)
    resumed.fit(module(), ckpt_path=ckpt)
    toys.assert_trees_equal(resumed.state, want)
    assert (resumed.global_step, resumed.env_steps) == (6, 24)
    single = toys.trainer(tmp_path / "one", max_steps=4, strategy="single",
                          enable_checkpointing=False)
    single.fit(module(), ckpt_path=ckpt)
    assert single.state.buffer.experience.obs.shape == (4, 16, 1)
    assert int(single.state.buffer.current_index) == 4 and int(single.state.updates) == 4


def run_recipe(name, run_dir, capsys, *overrides, trainers=None):
    """Run recipes/<name>.py's main with a tiny budget on 4 devices; check the last line.
    ``trainers``: a list the recipe's fitted Trainer is appended to (its final state)."""
    import csv
    import importlib.util
    import pathlib

    import jaxtrainer as jt

    path = pathlib.Path(__file__).parents[2] / "recipes" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    fit = jt.Trainer.fit

    def keep(self, *args, **kwargs):
        trainers.append(self)
        return fit(self, *args, **kwargs)

    if trainers is not None:
        jt.Trainer.fit = keep
    try:
        result = recipe.main([f"trainer.default_root_dir={run_dir}", "trainer.strategy=pmap",
                              "trainer.enable_progress_bar=false", *overrides])
    finally:
        jt.Trainer.fit = fit
    run = run_dir / "version_0"
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"eval/episode_return={result['eval/episode_return']:.2f} run_dir={run}"
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    return result, rows


@pytest.mark.slow
def test_dqn_recipe_tiny_run_on_4_devices_keeps_the_replicas_equal_and_shards_the_buffer(
        run_dir, capsys):
    """The recipe's fit on 4 devices: its last line and rows; the network, its target
    and the optimizer state bitwise equal on every device, the buffer's env rows split
    over them."""
    trainers = []
    result, rows = run_recipe("dqn", run_dir, capsys, "trainer.max_env_steps=1000",
                              "trainer.devices=auto", "algorithm.num_envs=16",  # over the preset's
                              "algorithm.train_frequency=1", "algorithm.anneal_lr=false",
                              "trainer.log_every_n_steps=31", "algorithm.learning_starts=320",
                              "algorithm.hidden_sizes=[16]", "algorithm.eval_episodes=4",
                              trainers=trainers)
    assert int(rows[-1]["env_steps"]) == 992                 # 62 steps x 16 env steps
    assert 8.0 <= result["eval/episode_return"] <= 500.0
    trained = [r for r in rows if r.get("loss/td")]    # the final evaluation has its own row
    assert trained[-1]["step"] == rows[-1]["step"] and rows[-1]["eval/episode_return"]
    assert np.isfinite(float(trained[-1]["loss/td"]))
    state = trainers[-1].state
    for leaf in jax.tree.leaves((state.params, state.target_params, state.opt_state)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
    obs = state.buffer.experience.obs        # [num_envs, capacity/num_envs, 4]
    assert obs.shape == (16, 625, 4)
    assert [s.data.shape for s in obs.addressable_shards] == [(4, 625, 4)] * 4
    assert int(state.buffer.current_index) == 62              # 62 adds into 625 slots
    assert int(state.updates) == 43     # steps 20-62 learn (from 320 env steps on)


@pytest.mark.slow
def test_dqn_hyperparameters_are_read_from_the_state_without_recompiling():
    """``lr``, ``gamma``, ``tau`` and the epsilon rates are traced values in
    ``state.hyperparams`` (PBT changes them): other numbers there give another
    step from the same compiled program (the target-update tests' program, compiled
    ahead of time: it takes no other shapes or dtypes), and the optimizer follows ``lr``."""
    dqn, strategy = every_8_env_steps(), SingleDeviceStrategy()
    init = strategy.init_state(dqn, jax.random.key(0))
    assert set(init.hyperparams) == {"lr", "gamma", "tau", "epsilon_start", "epsilon_end"}
    base, base_metrics = run_steps(dqn, strategy, 2)
    program = _COMPILED[id(dqn)][1]
    changed, metrics = run_steps(dqn, strategy, 2, lr=1e-2, epsilon_start=0.0, epsilon_end=0.0)
    assert _COMPILED[id(dqn)][1] is program
    assert float(to_host(metrics)["epsilon"]) == 0.0 < float(to_host(base_metrics)["epsilon"])
    assert float(changed.opt_state.hyperparams["learning_rate"]) == np.float32(1e-2)
    for a, b in ((base.params, changed.params), (base.buffer, changed.buffer)):
        assert any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a),
                                                             jax.tree.leaves(b), strict=True))


@pytest.mark.slow
def test_anneal_lr_lowers_the_rate_linearly_over_the_budget_and_needs_one():
    """With ``anneal_lr`` the rate of training step k is ``lr * (1 - k / budget)``
    (the same optax schedule as PPO's); outside a Trainer it is an error."""
    cfg = DQNConfig(num_envs=4, buffer_size=64, batch_size=8, learning_starts=0,
                    hidden_sizes=(8,), eval_episodes=4, lr=1e-3, anneal_lr=True)
    module = DQN(cfg, env=fixed_env())
    state = jax.jit(module.init_state)(jax.random.key(0))
    with pytest.raises(ValueError, match=r"DQN: anneal_lr=True needs the run's budget"):
        module.training_step(state, jax.random.key(1))
    module.configure_budget(8)
    step = jax.jit(module.training_step)
    rates = []
    for k in range(4):
        state, _ = step(state, jax.random.key(k))
        rates.append(float(state.opt_state.hyperparams["learning_rate"]))
    np.testing.assert_allclose(rates, [1e-3 * (1 - k / 8) for k in range(4)], rtol=1e-6)
    assert float(state.hyperparams["lr"]) == pytest.approx(1e-3)  # the base rate is kept


def test_c51_projection_keeps_the_mass_and_moves_it_to_the_shifted_atoms():
    """Bellemare et al. 2017, Algorithm 1 on a 5-atom support [-2, 2]: a point
    mass on z=1 after r=0.5, gamma=1 lands halfway between atoms 1 and 2 (split
    evenly); a terminal step puts all mass on r; mass beyond v_max is clipped onto it."""
    from jaxtrainer.algorithms.dqn import categorical_projection

    atoms = jnp.linspace(-2.0, 2.0, 5)
    point = jnp.zeros((3, 5)).at[:, 3].set(1.0)  # all mass on z = 1
    target = categorical_projection(point, jnp.array([0.5, 1.0, 3.0]),
                                    jnp.array([False, True, False]), 1.0, atoms)
    np.testing.assert_allclose(np.asarray(target), [[0, 0, 0, 0.5, 0.5],   # 1.5
                                                    [0, 0, 0, 1.0, 0],     # terminal: r = 1
                                                    [0, 0, 0, 0, 1.0]],    # 4 -> clipped to 2
                               atol=1e-6)
    pmf = jax.nn.softmax(jax.random.normal(jax.random.key(0), (4, 5)))
    spread = categorical_projection(pmf, jnp.array([0.3, -0.7, 0.0, 0.1]),
                                    jnp.zeros(4, bool), 0.9, atoms)
    np.testing.assert_allclose(np.asarray(spread.sum(-1)), 1.0, rtol=1e-6)


def test_c51_needs_a_support_and_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"DQNConfig.distributional='iqn': choose one of 'c51', "
                                         r"'qr'"):
        DQNConfig(distributional="iqn")
    with pytest.raises(ValueError, match=r"C51 needs num_atoms >= 2 and v_min < v_max"):
        DQNConfig(distributional="c51", v_min=1.0, v_max=1.0)
    with pytest.raises(ValueError, match=r"QR-DQN needs num_atoms >= 2 quantiles; got num_atoms=1"):
        DQNConfig(distributional="qr", num_atoms=1)
    with pytest.raises(ValueError, match=r"huber_kappa=0"):
        DQNConfig(distributional="qr", huber_kappa=0)


def test_the_quantile_huber_loss_by_hand():
    """Two quantiles (tau 1/4, 3/4) of one sample, two target samples, kappa 1:
    u = T_j - theta_i; rho = |tau - 1{u<0}| * huber(u); sum over i, mean over j."""
    theta = jnp.array([[0.0, 1.0]])
    target = jnp.array([[0.5, 3.0]])
    huber = lambda u: 0.5 * u * u if abs(u) <= 1 else abs(u) - 0.5  # noqa: E731
    want = 0.0
    for tau, th in ((0.25, 0.0), (0.75, 1.0)):
        want += np.mean([abs(tau - (t - th < 0)) * huber(t - th) for t in (0.5, 3.0)])
    got = quantile_huber_loss(theta, target, 1.0)
    np.testing.assert_allclose(np.asarray(got), [want], rtol=1e-6)
    # kappa 2: L_2(u) / 2 (quadratic up to |u| = 2)
    got2 = quantile_huber_loss(theta, target, 2.0)
    h2 = lambda u: (0.5 * u * u if abs(u) <= 2 else 2 * (abs(u) - 1.0)) / 2  # noqa: E731
    want2 = sum(np.mean([abs(tau - (t - th < 0)) * h2(t - th) for t in (0.5, 3.0)])
                for tau, th in ((0.25, 0.0), (0.75, 1.0)))
    np.testing.assert_allclose(np.asarray(got2), [want2], rtol=1e-6)


@pytest.mark.timeout(200)
def test_qr_dqn_acts_on_the_mean_quantile_and_its_quantiles_learn_the_return_spread():
    """Q-values are the quantiles' means; on a batch whose targets are the
    rewards 0 and 10 alike (terminal transitions), gradient steps take the
    quantiles to the loss's minimiser: the low ones near 0, the high near 10."""
    module = DQN(DQNConfig(distributional="qr", num_atoms=4, hidden_sizes=(16,), lr=3e-2))
    state = jax.jit(module.init_state)(jax.random.key(0))
    obs = jnp.ones((3, 4))
    quantiles = module.logits(state.params, obs)
    assert quantiles.shape == (3, 2, 4)
    np.testing.assert_allclose(np.asarray(module.q_values(state.params, obs)),
                               np.asarray(quantiles.mean(-1)), rtol=1e-6)
    batch = Transition(obs=jnp.zeros((64, 4)), action=jnp.zeros((64,), jnp.int32),
                       reward=jnp.tile(jnp.array([0.0, 10.0]), 32), next_obs=jnp.zeros((64, 4)),
                       terminated=jnp.ones((64,), bool))
    params, opt_state = state.params, state.opt_state

    def step(_, carry):
        params, opt_state = carry
        grads = jax.grad(lambda p: module.loss(p, p, batch)[0])(params)
        updates, opt_state = module.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params, _ = jax.jit(lambda c: jax.lax.fori_loop(0, 2000, step, c))((params, opt_state))
    learned = np.asarray(module.logits(params, jnp.zeros((1, 4)))[0, 0])
    # the minimiser of the quantile Huber loss (kappa 1) for the returns {0, 10}:
    # tau < 1/2 balances (1 - tau) theta (the quadratic pull to 0) against tau (the
    # linear pull to 10), theta = tau / (1 - tau); symmetric above 1/2
    tau = (np.arange(4) + 0.5) / 4
    want = np.where(tau < 0.5, tau / (1 - tau), 10 - (1 - tau) / tau)
    np.testing.assert_allclose(learned, want, atol=1e-3)


@pytest.mark.timeout(200)
def test_c51_acts_greedily_on_the_mean_of_its_distributions():
    module = DQN(DQNConfig(distributional="c51", num_atoms=11, v_min=-5.0, v_max=5.0,
                           hidden_sizes=(8,)))
    state = jax.jit(module.init_state)(jax.random.key(0))
    obs = jnp.ones((3, 4))
    logits = module.logits(state.params, obs)
    assert logits.shape == (3, 2, 11)
    means = (jax.nn.softmax(logits, -1) * jnp.linspace(-5, 5, 11)).sum(-1)
    np.testing.assert_allclose(np.asarray(module.q_values(state.params, obs)), np.asarray(means),
                               rtol=1e-6)
    act = module.greedy_policy()(state.params, obs, None)
    np.testing.assert_array_equal(np.asarray(act), np.asarray(jnp.argmax(means, -1)))


def test_n_step_runs_fold_into_one_transition_up_to_the_episode_end():
    """Rewards 1, 2, 4 at gamma 0.5: a run whose 2nd step ended its episode sums
    1 + 0.5 * 2 and bootstraps (not at all: terminated) from that step's
    next_obs with discount 0.25; an unbroken run sums all three, discount 0.125."""
    from jaxtrainer.algorithms.dqn import n_step_transition
    from jaxtrainer.algorithms.replay import Transition

    reward = jnp.array([[1.0, 2.0, 4.0]] * 3)
    done = jnp.array([[False, True, False], [False, False, False], [True, False, False]])
    terminated = jnp.array([[False, True, False], [False, False, False], [False, False, False]])
    obs = jnp.arange(9.0).reshape(3, 3, 1)
    runs = Transition(obs, jnp.arange(9).reshape(3, 3), reward, obs + 100, terminated, done)
    folded, discount = n_step_transition(runs, 0.5)
    np.testing.assert_allclose(np.asarray(folded.reward), [2.0, 3.0, 1.0])
    np.testing.assert_allclose(np.asarray(discount), [0.25, 0.125, 0.5])
    np.testing.assert_array_equal(np.asarray(folded.next_obs[:, 0]), [101.0, 105.0, 106.0])
    np.testing.assert_array_equal(np.asarray(folded.terminated), [True, False, False])
    np.testing.assert_array_equal(np.asarray(folded.action), [0, 3, 6])  # the run's first


def test_n_step_needs_the_buffer_to_hold_a_run_before_learning():
    with pytest.raises(ValueError, match=r"n_step=3 .* learning_starts=8 must be at least "
                                         r"n_step \* num_envs = 12"):
        DQNConfig(n_step=3, num_envs=4, learning_starts=8)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_rainbow_config_resumes_exactly_on_four_devices_with_the_replicas_equal(tmp_path):
    """C51 + 3-step returns + dueling + double DQN + prioritised replay (the
    rainbow recipe's parts, tiny): 4 steps straight equal 2 + resume + 2,
    learning from step 2 on and the target network copied at 24 env steps
    (step 2), across the resume; every device's priorities its own."""
    from tests._support import toys

    def make():
        return DQN(DQNConfig(num_envs=4, train_frequency=3, buffer_size=64, batch_size=8,
                             learning_starts=12, hidden_sizes=(8,), distributional="c51",
                             num_atoms=5, v_min=-10.0, v_max=10.0, n_step=3, dueling=True,
                             double=True, target_update_interval=24, eval_episodes=4,
                             prioritised=True, priority_exponent=0.5))

    straight = toys.two_plus_two_on_four_devices(tmp_path, make)
    toys.replicas_equal((straight.state.params, straight.state.target_params))
    loss = straight.callback_metrics["loss/td"]
    assert np.isfinite(loss) and loss > 0  # step 4 learned (a cross-entropy)
    # 3 learning steps set each device's sampled runs' priorities: the sum trees differ
    trees = [np.asarray(s.data) for s in straight.state.buffer.sum_tree_state.nodes.addressable_shards]
    assert len(trees) == 4 and not all(np.array_equal(trees[0], t) for t in trees[1:])


def test_prioritised_replay_samples_by_priority_and_weights_by_importance():
    """One env, 8 stored transitions; priorities 1 for all but item 5 (9): with
    alpha 1 item 5 is drawn with probability 9 / 16; the importance weights are
    (min P / P)^beta, beta annealed from 0.4 to 1 over the budget."""
    module = DQN(DQNConfig(num_envs=1, buffer_size=16, batch_size=4096, learning_starts=1,
                           hidden_sizes=(8,), prioritised=True, priority_exponent=1.0))
    example = Transition(jnp.zeros(4), jnp.zeros((), jnp.int32), jnp.zeros(()), jnp.zeros(4),
                         jnp.zeros((), bool))
    buffer = jax.jit(module.buffer.init)(example)  # jitted: one program each, not one an op
    add = jax.jit(module.buffer.add)
    for i in range(8):
        step = jax.tree.map(lambda x, i=i: jnp.full((1,) + x.shape, i, x.dtype), example)
        buffer = add(buffer, step)
    buffer = jax.jit(module.buffer.set_priorities)(buffer, jnp.arange(8),
                                                   jnp.array([1.0] * 5 + [9.0, 1, 1]))
    batch, indices, probabilities = jax.jit(module.buffer.sample_prioritised)(
        buffer, jax.random.key(0))
    indices, probabilities = np.asarray(indices), np.asarray(probabilities)
    np.testing.assert_array_equal(np.asarray(batch.reward), indices.astype(np.float32))
    assert abs((indices == 5).mean() - 9 / 16) < 0.03 and set(indices) == set(range(8))
    np.testing.assert_allclose(probabilities, np.where(indices == 5, 9 / 16, 1 / 16), rtol=1e-5)
    weights = np.asarray(module.importance_weights(jnp.asarray(probabilities), buffer))
    np.testing.assert_allclose(weights, np.where(indices == 5, (1 / 9) ** 0.4, 1.0), rtol=1e-5)
    module.configure_budget(16)  # 16 env steps: 8 taken in, beta halfway to 1
    weights = np.asarray(module.importance_weights(jnp.asarray(probabilities), buffer))
    np.testing.assert_allclose(weights, np.where(indices == 5, (1 / 9) ** 0.7, 1.0), rtol=1e-5)
    # a draw of probability 0 (float rounding in the sum tree) weighs nothing
    zero = module.importance_weights(jnp.array([0.0, 0.25, 0.5]), buffer)
    np.testing.assert_allclose(np.asarray(zero), [0.0, 1.0, 0.5 ** 0.7], rtol=1e-5)


def test_prioritised_replay_is_an_option_with_checked_exponents():
    with pytest.raises(ValueError, match=r"priority_exponent=-1"):
        DQNConfig(prioritised=True, priority_exponent=-1)
    with pytest.raises(ValueError, match=r"importance_exponent=1.5"):
        DQNConfig(prioritised=True, importance_exponent=1.5)
    assert DQN(DQNConfig(hidden_sizes=(8,))).buffer.prioritised is False
