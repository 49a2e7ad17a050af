"""DDPG: TD3 with one critic, no target smoothing and no delay. Its critic target
and loss checked against a numpy forward pass on a fixed batch, an actor and
target update after every critic update, replicas bitwise equal on 2 devices,
the recipe's module, and the config checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.algorithms import DDPG, DDPGConfig, TD3Config
from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.algorithms.target_update import soft_update
from jaxtrainer.metrics import to_host
from jaxtrainer.strategies import PmapStrategy

TINY = dict(num_envs=4, buffer_size=64, batch_size=8, learning_starts=0, gradient_steps=1,
            hidden_sizes=(8,), eval_episodes=4)


def dense_relu_dense(params, x):
    """A 1-hidden-layer flax MLP by hand: ``relu(x W0 + b0) W1 + b1`` in float64."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    h = np.maximum(x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"], 0.0)
    return h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]


def test_ddpg_is_td3_with_one_critic_no_smoothing_and_no_delay():
    ddpg = DDPG(DDPGConfig(**TINY))
    cfg = ddpg.config
    assert (cfg.twin_critics, cfg.policy_noise, cfg.policy_delay) == (False, 0.0, 1)
    assert (cfg.lr, cfg.tau, cfg.exploration_noise) == (3e-4, 0.005, 0.1)  # TD3's others
    state = jax.jit(ddpg.init_state)(jax.random.key(0))
    assert list(state.critic_params["params"]) == ["q1"]            # one critic
    assert list(state.target_critic_params["params"]) == ["q1"]
    obs = jnp.ones((5, 3))
    assert ddpg.critic.apply(state.critic_params, obs, jnp.ones((5, 1))).shape == (1, 5)
    # no smoothing: the target action is the target actor's, whatever the key
    clean = ddpg.act(state.target_actor_params, obs)
    for k in range(3):
        np.testing.assert_array_equal(
            ddpg.target_action(state.target_actor_params, obs, jax.random.key(k)), clean)


@pytest.mark.slow
def test_ddpg_critic_target_and_loss_match_a_hand_computation():
    ddpg = DDPG(DDPGConfig(gamma=0.9, **TINY))
    state = jax.jit(ddpg.init_state)(jax.random.key(0))
    # targets that differ from the online networks, so using the wrong ones shows
    target_actor = jax.tree.map(lambda a: a + 0.3, state.target_actor_params)
    target_critic = jax.tree.map(lambda a: a - 0.2, state.target_critic_params)
    rng = np.random.default_rng(0)
    batch = Transition(
        obs=jnp.asarray(rng.normal(size=(6, 3)), jnp.float32),
        action=jnp.asarray(rng.uniform(-2, 2, size=(6, 1)), jnp.float32),
        reward=jnp.asarray(rng.normal(size=6), jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(6, 3)), jnp.float32),
        terminated=jnp.asarray([False, True, False, False, True, False]))
    loss, _ = jax.jit(ddpg.critic_loss)(state.critic_params, target_actor, target_critic, batch,
                                        jax.random.key(5))

    b = jax.tree.map(lambda a: np.asarray(a, np.float64), batch)
    mu_next = 2.0 * np.tanh(dense_relu_dense(target_actor["params"]["MLP_0"], b.next_obs))
    q_next = dense_relu_dense(target_critic["params"]["q1"],
                              np.concatenate([b.next_obs, mu_next], -1))[:, 0]
    y = b.reward + 0.9 * (1.0 - b.terminated) * q_next             # r + gamma Q'(s', mu'(s'))
    q = dense_relu_dense(state.critic_params["params"]["q1"],
                         np.concatenate([b.obs, b.action], -1))[:, 0]
    assert float(loss) == pytest.approx(np.mean((q - y) ** 2), rel=1e-5)
    assert float(ddpg.actor_loss(state.actor_params, state.critic_params, batch)[0]) == \
        pytest.approx(-np.mean(dense_relu_dense(state.critic_params["params"]["q1"], np.concatenate(
            [b.obs, 2.0 * np.tanh(dense_relu_dense(state.actor_params["params"]["MLP_0"],
                                                   b.obs))], -1))), rel=1e-5)


def test_ddpg_moves_actor_and_targets_after_every_critic_update():
    ddpg = DDPG(DDPGConfig(**TINY))
    state = jax.jit(ddpg.init_state)(jax.random.key(0))              # one device, no mesh
    _, _, buffer, _ = jax.jit(ddpg.collect)(state, jax.random.key(1))
    update = jax.jit(lambda c, k: ddpg.update(c, k, buffer))
    carry = ddpg.carry_of(state)
    for n in range(2):
        before = jax.tree.map(np.asarray, carry)
        carry, loss = update(carry, jax.random.key(10 + n))
        assert float(loss["actor"].count) == 1.0
        assert not np.array_equal(carry.actor_params["params"]["MLP_0"]["Dense_0"]["kernel"],
                                  before.actor_params["params"]["MLP_0"]["Dense_0"]["kernel"])
        want = soft_update(before.target_critic_params, carry.critic_params, ddpg.config.tau)
        jax.tree.map(lambda a, w: np.testing.assert_allclose(a, w, rtol=1e-6),
                     carry.target_critic_params, want)
    assert int(carry.updates) == 2


@pytest.mark.slow
def test_ddpg_replicas_stay_bitwise_equal_over_2_devices():
    ddpg = DDPG(DDPGConfig(**TINY))
    ddpg.validate(2)
    strategy = PmapStrategy(devices=2)
    state = strategy.init_state(ddpg, jax.random.key(0))
    train = strategy.compile_train(ddpg, state, jax.random.key(1))
    state, m = train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(6))
    for leaf in jax.tree.leaves((state.actor_params, state.critic_params,
                                 state.target_actor_params, state.target_critic_params,
                                 state.actor_opt, state.critic_opt)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 2
        np.testing.assert_array_equal(shards[1], shards[0])
    envs = [np.asarray(s.data) for s in state.obs.addressable_shards]
    assert not np.array_equal(envs[0], envs[1])                    # the envs differ per device
    m = to_host(m)
    assert int(state.updates) == 6
    assert np.isfinite(m["loss/critic"]) and np.isfinite(m["loss/actor"])


def test_ddpg_recipe_builds_ddpg_from_its_config():
    import pathlib

    from jaxtrainer.recipes import _modules as modules
    from jaxtrainer.recipes import config

    path = pathlib.Path(__file__).parents[2] / "recipes" / "configs" / "ddpg.yaml"
    module = modules.build_module("ddpg", config.load(path, ["algorithm.hidden_sizes=[4]"]))
    assert isinstance(module, DDPG) and module.config.hidden_sizes == (4,)
    assert (module.config.twin_critics, module.config.policy_noise,
            module.config.policy_delay) == (False, 0.0, 1)
    assert module.critic.num_critics == 1


def test_ddpg_rejects_a_td3_config_and_bad_switches():
    with pytest.raises(ValueError, match=r"expected a DDPGConfig, got a TD3Config"):
        DDPG(TD3Config(**TINY))
    with pytest.raises(ValueError, match=r"DDPGConfig.twin_critics='no': expected True or False"):
        DDPGConfig(twin_critics="no")
    with pytest.raises(ValueError, match=r"DDPGConfig.policy_noise=-0.1"):
        DDPGConfig(policy_noise=-0.1)
    with pytest.raises(ValueError, match="continuous actions"):
        DDPG(DDPGConfig(env="CartPole-v1", **TINY))
