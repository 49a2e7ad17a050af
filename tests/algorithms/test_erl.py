"""ERL: the GA step and the RL actor's injection by hand, the crossover and
mutation operators, bitwise learner replicas on 2 devices that agree with one
device, exact env-step counting, and config errors naming the field."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms.erl import ERL, ERLConfig
from jaxtrainer.algorithms.genetic import crossover, ga_step, inject, mutate
from jaxtrainer.algorithms.replay import ReplayBuffer
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy
from tests._support import toys

# 4 members + 2 copies of the RL actor, 20 steps each: 120 env steps a generation;
# learning starts with generation 1 (240 env steps in the buffer). The learner is the
# paper's DDPG (TD3 with its additions off: a smaller program to compile).
TINY = dict(population_size=4, elite_fraction=0.25, rl_episodes=2, rollout_steps=20,
            critic_steps=4, hidden_sizes=(8,), buffer_size=480, batch_size=8,
            learning_starts=240, eval_episodes=4, twin_critics=False, policy_noise=0.0,
            policy_delay=1)


def toy_population():
    """5 members whose every entry encodes the member: kernel [5, 2, 3], bias [5, 3]."""
    ids = jnp.arange(5.0)
    return {"kernel": ids[:, None, None] + jnp.zeros((5, 2, 3)),
            "bias": -ids[:, None] + jnp.zeros((5, 3))}


def test_ga_step_and_injection_match_a_hand_computation():
    population = toy_population()
    fitness = jnp.array([3.0, 9.0, 1.0, 7.0, 5.0])       # ranks: members 1, 3, 4, 0, 2
    config = ERLConfig(population_size=5, elite_fraction=0.4, crossover_prob=0.0,
                       mutation_prob=0.0)                 # K = int(0.4 * 5) = 2 elites
    key = jax.random.key(4)
    # without crossover and mutation the only draws are the 3 tournaments' (size 3)
    # rank positions floor(5 u), u = uniform(key, (9,)):
    u = jax.random.uniform(key, (9,)).reshape(3, 3)
    np.testing.assert_array_equal(jnp.floor(5 * u), [[4, 3, 0], [3, 2, 2], [1, 4, 4]])
    # winners: best drawn rank 0, 2, 1 -> members 1, 4, 3, which fill the non-elite
    # slots in rank order: slot 4 (3rd best), slot 0 (4th), slot 2 (the worst)
    new, order = jax.jit(ga_step, static_argnums=3)(population, fitness, key, config)
    np.testing.assert_array_equal(order, [1, 3, 4, 0, 2])
    expected = [4, 1, 3, 3, 1]                          # member held by slots 0..4
    np.testing.assert_array_equal(new["kernel"][:, 0, 0], expected)
    np.testing.assert_array_equal(new["bias"][:, 0], [-m for m in expected])
    for slot in (1, 3):                                  # the elites, bitwise in place
        np.testing.assert_array_equal(new["kernel"][slot], population["kernel"][slot])
    # the RL actor replaces the worst member's slot (order[-1] = 2), only when due
    actor = {"kernel": jnp.full((2, 3), 42.0), "bias": jnp.full((3,), 43.0)}
    injected = jax.jit(inject)(new, actor, order[-1], jnp.bool_(True))
    np.testing.assert_array_equal(injected["kernel"][:, 0, 0], [4, 1, 42, 3, 1])
    np.testing.assert_array_equal(injected["bias"][2], [43.0] * 3)
    kept = jax.jit(inject)(new, actor, order[-1], jnp.bool_(False))
    np.testing.assert_array_equal(kept["kernel"], new["kernel"])
    # NaN fitness ranks last: member 0 becomes the worst slot
    _, order = jax.jit(ga_step, static_argnums=3)(population, fitness.at[0].set(jnp.nan), key,
                                                  config)
    assert int(order[-1]) == 0 and int(order[0]) == 1


def test_crossover_and_mutation_match_a_hand_computation():
    a = {"kernel": jnp.zeros((2, 4)), "bias": jnp.zeros(4)}     # leaves: bias, then kernel
    b = {"kernel": jnp.ones((2, 4)), "bias": jnp.ones(4)}
    # fraction 0.5: r < 0.25 copies b's unit into a, 0.25 <= r < 0.5 a's into b
    r = jnp.array([0.2, 0.26, 0.7, 0.0,                           # bias entries
                   0.1, 0.3, 0.6, 0.9])                           # kernel columns (neurons)
    ca, cb = jax.jit(crossover, static_argnums=3)(a, b, r, 0.5)
    np.testing.assert_array_equal(ca["bias"], [1, 0, 0, 1])
    np.testing.assert_array_equal(cb["bias"], [1, 0, 1, 1])
    np.testing.assert_array_equal(ca["kernel"], [[1, 0, 0, 0]] * 2)   # whole columns move
    np.testing.assert_array_equal(cb["kernel"], [[1, 0, 1, 1]] * 2)

    x = {"bias": jnp.array([5.0, 5.0]), "k2": jnp.array([[3.0, 3.0]]),
         "kernel": jnp.array([[2.0, -4.0], [0.0, 1.0]])}
    u = jnp.array([[0.9, 0.4],     # k2: 0.9 >= 2 * 0.4, not considered
                   [0.5, 0.3]])    # kernel: 0.5 < 2 * 0.3, considered
    v = jnp.array([0.0, 0.0, 0.001, 0.006, 0.05, 0.2])   # k2's 2 weights, then kernel's 4
    z = jnp.array([7.0, 7.0, 0.5, -0.5, 3.0, 1.0])
    out = jax.jit(lambda *args: mutate(*args, fraction=0.1, limit=10.0))(x, u, v, z)
    np.testing.assert_array_equal(out["bias"], x["bias"])       # biases never mutate
    np.testing.assert_array_equal(out["k2"], x["k2"])
    # r = v / 0.1: 0.01 super (2 + 0.5 * 10 * 2 = 12, clipped to 10), 0.06 reset
    # (-> z = -0.5), 0.5 normal (0 + 3 * 0.1 * |0| = 0), v = 0.2 not picked
    np.testing.assert_allclose(out["kernel"], [[10.0, -0.5], [0.0, 1.0]], rtol=1e-6)

    # the elites survive a GA step with crossover and mutation on, bitwise
    population = toy_population()
    config = ERLConfig(population_size=5, elite_fraction=0.4, mutation_prob=1.0)
    new, order = jax.jit(ga_step, static_argnums=3)(
        population, jnp.array([3.0, 9.0, 1.0, 7.0, 5.0]), jax.random.key(3), config)
    for slot in order[:2]:
        np.testing.assert_array_equal(new["kernel"][slot], population["kernel"][slot])
    assert not np.array_equal(new["kernel"][order[2:]], population["kernel"][order[2:]])


class KeepStates(jt.Callback):
    """Host copies of ``((population, search), critic)`` and the metrics after every
    logged interval."""

    def __init__(self):
        self.states = []

    def on_train_steps_end(self, trainer, module, metrics):
        s = trainer.state
        self.states.append((toys.leaves(((s.population, s.search), s.rl.critic_params)),
                            dict(metrics)))


class TrainOnly(ERL):
    """No evaluation_step, so the Trainer compiles no evaluation program (test time)."""

    evaluation_step = jt.Module.evaluation_step


def fit(strategy, overrides=None, **budget):
    """A quiet ERL fit of ``TINY`` (with ``overrides``); the Trainer and
    :class:`KeepStates`' states."""
    keep = KeepStates()
    trainer = jt.Trainer(strategy=strategy, log_every_n_steps=1, callbacks=[keep], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         compile_evaluation_ahead=False, **budget)
    trainer.fit(TrainOnly(ERLConfig(**{**TINY, **(overrides or {})})))
    return trainer, keep.states


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_devices_keep_the_learner_bitwise_and_agree_with_one_device():
    two, states2 = fit(PmapStrategy(devices=2), max_env_steps=400)   # 3 generations of 120
    one, states1 = fit(SingleDeviceStrategy(), max_steps=1)
    # generation 0 does not learn: its GA step, from fitness gathered bit for bit and
    # replicated keys, gives the same population on 1 and 2 devices, bitwise (the
    # members' returns agree to float rounding only: XLA:CPU rounds batches of other
    # shapes differently, but the GA ranks them)
    (pop1, critic1), m1 = states1[0]
    (pop2, critic2), m2 = states2[0]
    for a, b in zip(jax.tree.leaves((pop1, critic1)), jax.tree.leaves((pop2, critic2)),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    for k in ("fitness/max", "fitness/mean", "fitness/min", "rl/episode_return"):
        assert m1[k] == pytest.approx(m2[k], rel=1e-5, abs=0), k
    assert "loss/critic" not in m2 and "ga/rl_elite" not in m2
    # generations 1-2 learn (after that the devices' batches differ from one device's
    # batches, so only the replicas are compared): finite losses, the critic moved
    m = states2[-1][1]
    assert np.isfinite(m["loss/critic"]) and np.isfinite(m["loss/actor"])
    assert m["ga/rl_elite"] in (0.0, 1.0)                # generation 1 injected the RL actor
    assert not np.array_equal(jax.tree.leaves(states2[-1][0][1])[0], jax.tree.leaves(critic2)[0])
    state = two.state
    for leaf in jax.tree.leaves((state.population, state.rl, state.generation, state.champion,
                                 state.injected)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
    # the last generation injected the trained RL actor into its worst slot
    slot = int(state.injected)
    assert 0 <= slot < 4 and slot != int(state.champion)
    for member, actor in zip(jax.tree.leaves(state.population),
                             jax.tree.leaves(state.rl.actor_params), strict=True):
        np.testing.assert_array_equal(np.asarray(member)[slot], np.asarray(actor))
    # env steps: (4 members + 2 RL episodes) x 20 steps a generation, all in the buffer
    assert int(state.generation) == 3 and two.global_step == 3
    assert two.env_steps == 360 and [int(s[1]["env_steps"]) for s in states2] == [120, 240, 360]
    assert int(ReplayBuffer.size(state.buffer)) * 6 == 360
    assert state.buffer.experience.obs.shape[:2] == (6, 80)   # 6 env rows x 480 / 6 slots


def test_bad_configs_are_errors_naming_the_field_before_compiling(monkeypatch):
    for kwargs, match in [
            (dict(population_size=1), r"ERLConfig.population_size=1"),
            (dict(elite_fraction=1.5), r"ERLConfig.elite_fraction=1.5: expected a number in"),
            (dict(population_size=4, elite_fraction=1.0), r"ERLConfig.elite_fraction=1.0: keeps 4"),
            (dict(mutation_prob=-0.1), r"ERLConfig.mutation_prob=-0.1"),
            (dict(super_mutation_prob=0.6, reset_prob=0.6), r"ERLConfig.reset_prob=0.6"),
            (dict(episodes_per_member=2, rl_episodes=1), r"ERLConfig.rl_episodes=1"),
            (dict(tournament_size=0), r"ERLConfig.tournament_size=0"),
            (dict(critic_steps=0), r"ERLConfig.critic_steps=0"),
            (dict(weight_limit=0), r"ERLConfig.weight_limit=0"),
            (dict(hidden_sizes=[8, 0]), r"ERLConfig.hidden_sizes\[1\]=0"),
            (dict(activation="elu"), r"ERLConfig.activation='elu'"),
            (dict(twin_critics="yes"), r"ERLConfig.twin_critics='yes'")]:
        with pytest.raises(ValueError, match=match):
            ERLConfig(**kwargs)
    with pytest.raises(ValueError, match="continuous actions"):
        ERL(ERLConfig(**{**TINY, "env": "CartPole-v1"}))

    trainer = toys.no_compile_trainer(monkeypatch)
    with pytest.raises(ValueError, match=r"population_size=6 is not divisible by the 4 devices"):
        trainer.fit(ERL(ERLConfig(**{**TINY, "population_size": 6})))
    with pytest.raises(ValueError, match=r"rl_episodes=2 plays 2 copies .* not divisible by the 4"):
        trainer.fit(ERL(ERLConfig(**TINY)))
