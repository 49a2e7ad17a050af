"""SAC and TD3: entropy target and temperature direction, squashed-Gaussian
log-probabilities, target policy smoothing, delayed actor updates, replicas that
stay equal on 4 devices, and a brax smoke run."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxtrainer.algorithms.sac import SAC, SACConfig, squashed_sample
from jaxtrainer.algorithms.target_update import soft_update
from jaxtrainer.algorithms.td3 import TD3, TD3Config
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import SingleDeviceStrategy

TINY = dict(num_envs=4, buffer_size=64, batch_size=8, learning_starts=0, gradient_steps=1,
            hidden_sizes=(8,), eval_episodes=4)


_COMPILED: dict = {}


def run_steps(module, strategy, n):
    """``n`` training steps from a fresh state (seed 0), compiled once per module."""
    state = strategy.init_state(module, jax.random.key(0))
    if id(module) not in _COMPILED:
        _COMPILED[id(module)] = (module, strategy.compile_train(module, state, jax.random.key(1)))
    train = _COMPILED[id(module)][1]
    return train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(n))


def test_sac_target_entropy_is_minus_action_dim():
    assert SAC(SACConfig(**TINY)).target_entropy == -1.0              # Pendulum: 1 action
    assert SAC(SACConfig(target_entropy=-0.5, **TINY)).target_entropy == -0.5
    assert SAC(SACConfig(**TINY)).hparams()["target_entropy"] == -1.0


def test_temperature_rises_below_the_entropy_target_and_falls_above():
    sac = SAC(SACConfig(**TINY))                                      # target entropy -1
    grad = jax.grad(lambda la, lp: sac.alpha_loss(la, lp)[0])
    log_alpha = jnp.log(0.3)
    # entropy -E[log pi] = -2 < -1: gradient descent must increase alpha
    assert float(grad(log_alpha, jnp.float32(2.0))) < 0
    assert float(grad(log_alpha, jnp.float32(0.0))) > 0              # entropy 0 > -1
    # exact value: d/dla [-e^la (lp + H)] = -e^la (lp + H)
    assert float(grad(log_alpha, jnp.float32(2.0))) == pytest.approx(-0.3 * (2.0 - 1.0), rel=1e-5)


def test_squashed_gaussian_log_prob_is_the_change_of_variables():
    mean = jnp.array([[0.3, -0.8]])
    log_std = jnp.array([[-0.5, 0.2]])
    scale, bias = jnp.array([2.0, 0.5]), jnp.array([0.0, 1.0])
    action, log_prob = squashed_sample(mean, log_std, jax.random.key(3), scale, bias)
    u = np.arctanh((np.asarray(action) - np.asarray(bias)) / np.asarray(scale))
    std = np.exp(np.asarray(log_std))
    gauss = -0.5 * ((u - np.asarray(mean)) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi)
    jac = np.log(np.asarray(scale) * (1 - np.tanh(u) ** 2) + 1e-6)
    assert float(log_prob[0]) == pytest.approx(float((gauss - jac).sum()), rel=1e-3, abs=1e-3)
    many, _ = squashed_sample(jnp.zeros((5000, 2)), jnp.full((5000, 2), 1.5),
                              jax.random.key(4), scale, bias)
    assert np.all(np.abs(np.asarray(many) - np.asarray(bias)) <= np.asarray(scale))


@pytest.mark.slow
def test_td3_target_policy_smoothing_is_clipped():
    td3 = TD3(TD3Config(policy_noise=10.0, noise_clip=0.25, **TINY))
    state = SingleDeviceStrategy().init_state(td3, jax.random.key(0))
    obs = jax.random.normal(jax.random.key(1), (4000, 3))
    clean = np.asarray(td3.act(state.target_actor_params, obs))
    smooth = np.asarray(td3.target_action(state.target_actor_params, obs, jax.random.key(2)))
    diff = smooth - clean
    assert np.all(np.abs(diff) <= 0.25 * 2.0 + 1e-6)      # noise_clip * action scale
    assert np.mean(np.abs(np.abs(diff) - 0.5) < 1e-6) > 0.8  # huge noise: mostly at the clip
    assert np.all(np.abs(smooth) <= 2.0)


@pytest.mark.slow
def test_td3_delays_actor_and_target_updates():
    td3 = TD3(TD3Config(policy_delay=3, **TINY))
    state = jax.jit(td3.init_state)(jax.random.key(0))              # one device, no mesh
    _, _, buffer, _ = jax.jit(td3.collect)(state, jax.random.key(1))
    update = jax.jit(lambda c, k: td3.update(c, k, buffer))
    carry = td3.carry_of(state)
    init = jax.tree.map(np.asarray, carry)
    carries, losses = [], []
    for n in range(3):
        carry, loss = update(carry, jax.random.key(10 + n))
        carries.append(carry)
        losses.append(float(loss["actor"].count))
    assert losses == [0.0, 0.0, 1.0]
    for c in carries[:2]:   # critic moves, actor and targets wait
        jax.tree.map(np.testing.assert_array_equal, c.actor_params, init.actor_params)
        jax.tree.map(np.testing.assert_array_equal, c.target_actor_params,
                     init.target_actor_params)
        jax.tree.map(np.testing.assert_array_equal, c.target_critic_params,
                     init.target_critic_params)
        assert not all(np.array_equal(a, b) for a, b in zip(
            jax.tree.leaves(c.critic_params), jax.tree.leaves(init.critic_params), strict=True))
    c3 = carries[2]
    assert not all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(c3.actor_params), jax.tree.leaves(init.actor_params), strict=True))
    want_actor = soft_update(init.target_actor_params, c3.actor_params, td3.config.tau)
    want_critic = soft_update(init.target_critic_params, c3.critic_params, td3.config.tau)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                 c3.target_actor_params, want_actor)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                 c3.target_critic_params, want_critic)
    assert int(c3.updates) == 3


def test_continuous_modules_reject_discrete_envs():
    with pytest.raises(ValueError, match="continuous actions"):
        SAC(SACConfig(env="CartPole-v1", **TINY))
    with pytest.raises(ValueError, match="continuous actions"):
        TD3(TD3Config(env="CartPole-v1", **TINY))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sac_runs_a_few_updates_on_a_brax_env():
    """brax's ``fast`` env (no physics to compile) through the same ``BraxEnv``
    adapter and reset as every brax env; brax's physics pipelines are
    ``tests/envs/test_brax_pipeline.py``'s."""
    from jaxtrainer import envs

    env = envs.make("brax/fast", episode_length=10)  # the default reset
    sac = SAC(SACConfig(env="brax/fast", **TINY), env=env)
    state, m = run_steps(sac, SingleDeviceStrategy(), 12)
    m = to_host(m)
    assert int(state.updates) == 12
    assert np.isfinite(m["loss/critic"]) and np.isfinite(m["loss/actor"])
    assert state.buffer.experience.obs.shape == (4, 16) + env.observation_shape
    assert m["train/episode_length"] <= 10


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sac", "td3"])
def test_recipe_tiny_run_on_4_devices_keeps_the_replicas_equal(name, run_dir, capsys):
    """The recipe's fit on 4 devices: its last line and rows, the networks, targets and
    optimizer states bitwise equal on every device; SAC's temperature falls from 1
    toward the entropy target (the initial policy's entropy is above -1)."""
    from test_dqn import run_recipe

    trainers = []
    result, rows = run_recipe(name, run_dir, capsys, "trainer.max_env_steps=402",
                              "trainer.log_every_n_steps=50", "algorithm.learning_starts=200",
                              "algorithm.hidden_sizes=[16]", "algorithm.eval_episodes=4",
                              trainers=trainers)
    assert int(rows[-1]["env_steps"]) == 400                 # 100 steps x 4 env steps
    assert -2000.0 < result["eval/episode_return"] <= 0.0  # Pendulum returns are negative
    trained = [r for r in rows if r["loss/critic"]]    # the final evaluation has its own row
    assert trained[-1]["step"] == rows[-1]["step"] and trained[-1]["loss/actor"]
    assert rows[-1]["eval/episode_return"]
    state = trainers[-1].state
    # steps 50-100 learn (from 200 env steps on), 4 updates each (the preset's)
    assert int(state.updates) == 204
    shared = (state.actor_params, state.critic_params, state.target_critic_params)
    if name == "sac":
        shared += (state.log_alpha, state.alpha_opt)
        assert float(jnp.exp(state.log_alpha)) < 1.0
        assert all(trained[-1][k] for k in ("loss/alpha", "alpha", "entropy"))
    else:
        shared += (state.target_actor_params, state.actor_opt)
    for leaf in jax.tree.leaves(shared):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])


def test_td3_reads_its_noise_scales_from_the_state():
    """The behaviour noise and the target smoothing noise are traced values in
    ``state.hyperparams`` (PBT changes them): one compiled function, three
    settings."""
    td3 = TD3(TD3Config(**TINY))
    state = jax.jit(td3.init_state)(jax.random.key(0)).replace(step=jnp.int32(1))
    obs, key = jnp.zeros((4, 3)), jax.random.key(1)

    @jax.jit
    def noise(hp):
        s = state.replace(hyperparams={**state.hyperparams, **hp})
        behaviour = td3.explore(s, obs, key) - td3.act(s.actor_params, obs)
        smoothed = (td3.target_action(s.target_actor_params, obs, key, s.hyperparams)
                    - td3.act(s.target_actor_params, obs))
        return jnp.max(jnp.abs(behaviour)), jnp.max(jnp.abs(smoothed))

    def scales(exploration, smoothing):
        out = noise({"exploration_noise": jnp.float32(exploration),
                     "policy_noise": jnp.float32(smoothing)})
        return tuple(float(x) for x in out)

    assert scales(0.0, 0.0) == (0.0, 0.0)
    assert scales(0.3, 0.0)[0] > 0.0 and scales(0.3, 0.0)[1] == 0.0
    assert scales(0.0, 0.3)[1] > 0.0 and scales(0.0, 0.3)[0] == 0.0
    assert noise._cache_size() == 1


# ---- traced hyperparameters (population-based training) ----------------------
_STEPS: dict = {}


def _jit_steps(module, n, state):
    """``n`` training steps (keys 0..n-1) from ``state``, one jitted
    ``training_step`` per module (kept across tests)."""
    if id(module) not in _STEPS:
        _STEPS[id(module)] = (module, jax.jit(module.training_step))
    step = _STEPS[id(module)][1]
    for i in range(n):
        state, _ = step(state, jax.random.key(i))
    return state, step


SAC_TINY = SAC(SACConfig(**{**TINY, "num_envs": 2, "gradient_steps": 2}))


@functools.cache
def sac_init():
    return jax.jit(SAC_TINY.init_state)(jax.random.key(0))


def _named_leaves(tree):
    def host(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)
    return {jax.tree_util.keystr(p): host(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)}


class ConstantSAC(SAC):
    """The program SAC compiled before its hyperparameters moved into the state:
    plain ``optax.adam`` optimizers and every hyperparameter a Python constant
    (the updates see the config's numbers, not ``carry.hyperparams``)."""

    def __init__(self, config):
        super().__init__(config)
        self.actor_optimizer = optax.adam(config.policy_lr)
        self.critic_optimizer = optax.adam(config.q_lr)
        self.alpha_optimizer = optax.adam(config.q_lr)

    def apply_hyperparams(self, carry):
        return carry

    def update(self, carry, key, buffer, obs_stats=None):
        constants = carry.replace(hyperparams=self.hyperparam_defaults())
        new, losses = super().update(constants, key, buffer, obs_stats)
        return new.replace(hyperparams=carry.hyperparams), losses


@pytest.mark.default_emitters
@pytest.mark.slow
def test_sac_with_config_hyperparams_is_the_constant_program_bit_for_bit():
    """5 steps (10 updates) of the default SAC: traced hyperparameters equal to
    the config's give exactly the numbers of the constant program (XLA:CPU fuses
    multiply-adds differently around a traced tau: soft_update keeps the
    constant program's rounding)."""
    traced, _ = _jit_steps(SAC_TINY, 5, sac_init())
    # the constant program's initial state: the same, with plain Adam states
    init = sac_init().replace(**{opt: getattr(sac_init(), opt).inner_state
                                 for opt in ("actor_opt", "critic_opt", "alpha_opt")})
    constant, _ = _jit_steps(ConstantSAC(SAC_TINY.config), 5, init)
    got, want = _named_leaves(traced), _named_leaves(constant)
    for opt in ("actor_opt", "critic_opt", "alpha_opt"):  # inject_hyperparams wraps the Adam state
        inner = _named_leaves(getattr(traced, opt).inner_state)
        assert inner.keys() == _named_leaves(getattr(constant, opt)).keys()
        for name, value in _named_leaves(getattr(constant, opt)).items():
            np.testing.assert_array_equal(inner[name], value, err_msg=f"{opt}{name}")
    compared = [k for k in want if not k.startswith((".actor_opt", ".critic_opt", ".alpha_opt"))]
    assert len(compared) > 30 and int(traced.updates) == 10
    for name in compared:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.default_emitters
def test_sac_hyperparameters_are_read_from_the_state_without_recompiling():
    """SAC's learning rates, gamma and tau are traced values in
    ``state.hyperparams`` (PBT changes them): other numbers there give other
    critics from the program already compiled, and the optimizers follow (in the
    bit-for-bit test's process: its compiled step serves this test)."""
    module, init = SAC_TINY, sac_init()
    assert set(init.hyperparams) == set(module.TUNABLE)
    base, step = _jit_steps(module, 2, init)
    programs = step._cache_size()  # (an env state leaf is weakly typed at reset only)
    hp = {**init.hyperparams, "q_lr": jnp.float32(1e-2), "gamma": jnp.float32(0.5),
          "tau": jnp.float32(0.5)}
    changed, _ = _jit_steps(module, 2, init.replace(hyperparams=hp))
    assert step._cache_size() == programs
    for field in ("critic_params", "target_critic_params"):
        a, b = jax.tree.leaves(getattr(base, field)), jax.tree.leaves(getattr(changed, field))
        assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True)), field
    for field, name in module.LEARNING_RATES:
        assert float(getattr(changed, field).hyperparams["learning_rate"]) == float(hp[name])
    assert {k: float(v) for k, v in changed.hyperparams.items()} == \
        {k: float(v) for k, v in hp.items()}
