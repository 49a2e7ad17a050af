"""CEM-RL: the sepCEM update by hand, device-count independent member samples,
bitwise critic replicas on 4 devices, exact env-step counting, and errors
raised before anything compiles."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms.cem_rl import (
    CEMRL,
    CEMRLConfig,
    elite_weights,
    sample_population,
    sep_cem_update,
)
from jaxtrainer.algorithms.replay import ReplayBuffer
from jaxtrainer.strategies import PmapStrategy, SingleDeviceStrategy
from tests._support import toys

TINY = dict(population_size=4, rollout_steps=20, critic_steps=4, actor_steps=2,
            actor_hidden_sizes=(8,), critic_hidden_sizes=(8,), buffer_size=400, batch_size=8,
            learning_starts=0, eval_episodes=4)


def test_sep_cem_update_matches_a_hand_computation():
    # K_e = 2 elites: weights log(3/1), log(3/2), normalised by their sum log(4.5)
    w = elite_weights(2)
    np.testing.assert_allclose(w, [math.log(3) / math.log(4.5), math.log(1.5) / math.log(4.5)],
                               rtol=1e-6)
    members = jnp.array([[1.0, 2.0], [3.0, -1.0], [0.0, 4.0], [2.0, 2.0]])
    fitness = jnp.array([3.0, 1.0, 4.0, 2.0])          # elites: member 2, then member 0
    mean = jnp.array([1.0, 1.0])
    new_mean, new_var, damp = sep_cem_update(mean, members, fitness, jnp.float32(1e-3),
                                             jnp.asarray(w), damp_limit=1e-5, damp_tau=0.95)
    w1, w2 = w
    eps = 0.95 * 1e-3 + 0.05 * 1e-5                      # noise decays towards damp_limit
    assert float(damp) == pytest.approx(eps, rel=1e-6)
    np.testing.assert_allclose(new_mean, [w1 * 0 + w2 * 1, w1 * 4 + w2 * 2], rtol=1e-6)
    # z = elite - old mean: (-1, 3) and (0, 1); var = (1/K_e) sum w z^2 + eps (ES.py sepCEM)
    np.testing.assert_allclose(new_var, [(w1 * 1 + w2 * 0) / 2 + eps, (w1 * 9 + w2 * 1) / 2 + eps],
                               rtol=1e-6)
    # ties keep the lower index first; NaN fitness ranks last
    tie_mean, _, _ = sep_cem_update(mean, members, jnp.array([5.0, 5.0, jnp.nan, 1.0]),
                                    jnp.float32(0.0), jnp.asarray(w), 0.0, 1.0)
    np.testing.assert_allclose(tie_mean, w1 * members[0] + w2 * members[1], rtol=1e-6)


def test_member_i_depends_on_its_key_and_index_only():
    mean, var = jnp.arange(5.0), jnp.full((5,), 0.25)
    key = jax.random.key(7)
    sample = jax.jit(sample_population, static_argnums=(3, 4))
    small = sample(mean, var, key, 4, False)
    large = sample(mean, var, key, 8, False)
    np.testing.assert_array_equal(small, large[:4])
    eps = jax.random.normal(jax.random.fold_in(key, 3), (5,))
    np.testing.assert_allclose(small[3], mean + 0.5 * eps, rtol=1e-6)
    mirrored = sample(mean, var, key, 8, True)
    np.testing.assert_allclose(mirrored[:4], large[:4], rtol=1e-6)
    np.testing.assert_allclose(mirrored[4:] - mean, -(mirrored[:4] - mean), rtol=1e-6)


class KeepStates(jt.Callback):
    """Host copies of the CEM state after every logged interval."""

    def __init__(self):
        self.states = []

    def on_train_steps_end(self, trainer, module, metrics):
        s = trainer.state
        self.states.append((toys.leaves((s.mean, s.var, s.damp, s.search)), dict(metrics)))


class TrainOnly(CEMRL):
    """No evaluation_step, so the Trainer compiles no evaluation program (test time)."""

    evaluation_step = jt.Module.evaluation_step


def fit(strategy, config=TINY, **budget):
    keep = KeepStates()
    trainer = jt.Trainer(strategy=strategy, log_every_n_steps=1, callbacks=[keep], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         compile_evaluation_ahead=False, **budget)
    trainer.fit(TrainOnly(CEMRLConfig(**config)))
    return trainer, keep.states


@pytest.mark.slow
def test_one_and_four_devices_agree_replicas_stay_bitwise_and_env_steps_are_exact():
    four, states4 = fit(PmapStrategy(devices=4), max_env_steps=250)   # 80 env steps a generation
    # generation 0 never learns, so it does not depend on num_rl_members (0 here: a
    # smaller program to compile). Its members, drawn from (seed, generation, i), and
    # their fitness are the same on 1 and 4 devices, and so is the CEM update, bit for bit.
    one, states1 = fit(SingleDeviceStrategy(), {**TINY, "num_rl_members": 0}, max_steps=1)
    (cem1, m1), (cem4, m4) = states1[0], states4[0]
    for a, b in zip(cem1, cem4, strict=True):
        np.testing.assert_array_equal(a, b)
    # The members' returns agree to float rounding, not bit for bit: one device
    # evaluates the 4 members batched, four devices one each, and XLA:CPU does not
    # promise the same rounding for different batch shapes (1 ulp of fitness/mean
    # seen with LLVM optimisation off, the tests' setting). The CEM update ranks
    # members, so the search distribution above is still bitwise equal.
    for k in ("fitness/max", "fitness/mean", "fitness/min", "cem/std"):
        assert m1[k] == pytest.approx(m4[k], rel=1e-6, abs=0), k
    assert "loss/critic" not in m4                            # not learning yet: unreported
    # generations 1-2 learn; the critic, its target and optimizer, and the search
    # distribution stay bitwise equal on the 4 devices
    m = states4[-1][1]
    assert np.isfinite(m["loss/critic"]) and np.isfinite(m["loss/actor"])
    state = four.state
    for leaf in jax.tree.leaves((state.mean, state.var, state.damp, state.critic_params,
                                 state.target_critic_params, state.critic_opt, state.generation)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
    # max_env_steps=250: 3 generations of 4 members x 20 steps, all of them in the buffer
    assert int(state.generation) == 3 and four.global_step == 3
    assert four.env_steps == 240 and [int(s[1]["env_steps"]) for s in states4] == [80, 160, 240]
    assert int(ReplayBuffer.size(state.buffer)) * 4 == 240
    assert state.buffer.experience.obs.shape[:2] == (4, 100)   # 4 member rows x 100 slots


OPENES = {**TINY, "evolution": "Open_ES", "es_std": 0.05, "es_learning_rate": 0.05}


@pytest.mark.default_emitters
@pytest.mark.slow
def test_cemrl_openes_is_bitwise_on_one_and_four_devices():
    four, states4 = fit(PmapStrategy(devices=4), OPENES, max_env_steps=250)
    one, states1 = fit(SingleDeviceStrategy(), {**OPENES, "num_rl_members": 0}, max_steps=1)
    for a, b in zip(jax.tree.leaves(states1[0][0]), jax.tree.leaves(states4[0][0]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert "es/best_fitness" in states4[0][1] and "cem/std" not in states4[0][1]
    state = four.state
    np.testing.assert_array_equal(state.mean, state.search.es.mean)
    toys.replicas_equal((state.search, state.critic_params, state.critic_opt))
    assert int(state.generation) == 3 and four.env_steps == 240
    assert np.isfinite(states4[-1][1]["loss/actor"])          # the RL members learned


@pytest.mark.default_emitters
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cemrl_openes_two_plus_two_generations_equal_four_on_four_devices(tmp_path):
    """The bit-for-bit test's config, in its process: its 4-device program, compiled
    there, serves these fits."""
    straight = toys.two_plus_two_on_four_devices(tmp_path, lambda: TrainOnly(CEMRLConfig(**OPENES)))
    state = straight.state
    assert int(state.generation) == 4 and int(state.search.es.generation_counter) == 4
    toys.replicas_equal((state.search, state.critic_params))


def test_cemrl_openes_config():
    assert CEMRLConfig(population_size=5, evolution="Open_ES", antithetic=False).evolution
    with pytest.raises(ValueError, match="SimpleGA"):
        CEMRL(CEMRLConfig(**{**TINY, "evolution": "SimpleGA"}))
    with pytest.raises(ValueError, match=r"es_std=0"):
        CEMRLConfig(evolution="Open_ES", es_std=0)


def test_bad_sizes_are_errors_before_compiling(monkeypatch):
    trainer = toys.no_compile_trainer(monkeypatch)
    with pytest.raises(ValueError, match=r"^CEMRL: population_size=6 is not divisible by the 4 "
                                         r"devices; use a multiple of 4, or devices=3 \(the most "
                                         r"devices that divide 6\)$"):
        trainer.fit(CEMRL(CEMRLConfig(**{**TINY, "population_size": 6, "critic_steps": 6,
                                            "buffer_size": 600})))
    with pytest.raises(ValueError, match=r"batch_size=6 is not divisible by the 4 devices"):
        trainer.fit(CEMRL(CEMRLConfig(**{**TINY, "batch_size": 6})))
    with pytest.raises(ValueError, match="population_size=1"):
        CEMRLConfig(population_size=1, antithetic=False)
    with pytest.raises(ValueError, match="population_size=5 is odd"):
        CEMRLConfig(population_size=5)
    with pytest.raises(ValueError, match="num_elites=0"):
        CEMRLConfig(num_elites=0)
    with pytest.raises(ValueError, match="critic_steps=5 is not a multiple of num_rl_members=2"):
        CEMRL(CEMRLConfig(**{**TINY, "critic_steps": 5}))
    with pytest.raises(ValueError, match="capacity=401 must be a positive multiple"):
        CEMRL(CEMRLConfig(**{**TINY, "buffer_size": 401}))
    with pytest.raises(ValueError, match="continuous actions"):
        CEMRL(CEMRLConfig(**{**TINY, "env": "CartPole-v1"}))
