"""Env-step quantities on the device stay exact past 2^31 env steps (JAX's default
32-bit mode): a step counter just below 2**31 // env_steps_per_step, stepped past it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.algorithms import (
    DQN,
    PPO,
    SAC,
    TD3,
    DQNConfig,
    PPOConfig,
    SACConfig,
    TD3Config,
    env_steps,
)
from tests._support.shipped import OFF_TINY, PPO_TINY

WRAP = 2**31


def test_dqn_keeps_epsilon_updates_and_target_updates_past_2_to_the_31():
    dqn = DQN(DQNConfig(**{**OFF_TINY, "learning_starts": 64, "epsilon_anneal_steps": 1000,
                           "target_update_interval": 8, "tau": 1.0}))
    per = dqn.env_steps_per_step  # 4 envs x train_frequency
    edge = WRAP // per
    state = jax.jit(dqn.init_state)(jax.random.key(0))  # one program, not one per operation
    step = jax.jit(dqn.training_step)
    state = state.replace(step=jnp.int32(edge - 1))
    for _ in range(3):  # steps edge-1, edge, edge+1: the product would wrap at edge
        before = jax.tree.map(np.asarray, state.params)
        state, metrics = step(state, jax.random.key(int(state.step)))
        assert float(metrics["epsilon"].value) == pytest.approx(dqn.config.epsilon_end)
        moved = any(not np.array_equal(a, b) for a, b in
                    zip(jax.tree.leaves(before), jax.tree.leaves(state.params), strict=True))
        assert moved  # updates go on
        assert bool(dqn.learning(state.step))
    assert int(state.step) == edge + 2


@pytest.mark.parametrize("module", [SAC(SACConfig(**{**OFF_TINY, "learning_starts": 1000})),
                                    TD3(TD3Config(**{**OFF_TINY, "learning_starts": 1000}))],
                         ids=["SAC", "TD3"])
def test_warm_up_and_learning_stay_past_2_to_the_31(module):
    edge = WRAP // module.env_steps_per_step
    action = jnp.full((4, module.env.action_size), 0.25, jnp.float32)
    for s in (edge - 1, edge, edge + 1, edge + 1000):
        step = jnp.int32(s)
        assert bool(module.learning(step))
        state = type("S", (), {"step": step})()
        np.testing.assert_array_equal(module.warmup(state, action, jax.random.key(1)), action)
    assert not bool(module.learning(jnp.int32(0)))  # and before learning_starts: warm-up
    state = type("S", (), {"step": jnp.int32(0)})()
    assert not np.array_equal(module.warmup(state, action, jax.random.key(1)), action)


def test_ppo_anneals_by_update_count_past_2_to_the_31_env_steps():
    ppo = PPO(PPOConfig(**{**PPO_TINY, "total_updates": 2 * (WRAP // 16)}))
    hp = {"lr": jnp.float32(ppo.config.lr)}
    update = WRAP // 16 + 64  # 16 env steps per update: past 2^31 env steps
    lr = float(jax.jit(ppo._learning_rate)(hp, jnp.int32(update)))
    assert lr == pytest.approx(ppo.config.lr * (1 - update / ppo.total_updates), rel=1e-5)


def test_crossings_are_exact_for_any_step():
    for interval, per in [(8, 4), (10, 4), (1000, 3), (7, 7), (3, 5)]:
        for s in [0, 1, 2, 3, 1000, WRAP // per - 1, WRAP // per, WRAP // per + 1, 2**31 - 2]:
            want = ((s + 1) * per) // interval > (s * per) // interval  # Python ints: exact
            assert bool(env_steps.crossed(jnp.int32(s), interval, per)) is want, (interval, per, s)
    with pytest.raises(ValueError, match=r"target_update_interval=1000003 env steps with 4096"):
        env_steps.check_interval(1_000_003, 4096, "target_update_interval")
