"""PGA-ME: the offspring's make-up, the policy-gradient step worked against
jax.grad, the critic's training, and runs that do not depend on the device count
or on a stop and resume; QDax's walker2d_uni task by name."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer import ModelCheckpoint
from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.population import PGAME, QDTask, make_task
from tests._support import population
from tests.population.test_population import assert_bitwise_equal

STEPS = 6


def point_policy(genotype, obs):
    """A linear ``tanh`` policy of a 2-D point: ``genotype = [W (2x2), b (2)]``."""
    return jnp.tanh(obs @ genotype[:4].reshape(2, 2) + genotype[4:])


def point_rollout(genotype, key):
    """A point starting at (0, 0) moves by ``0.2 * action`` for 6 steps; reward
    ``1 - |action|^2``; descriptor its final position."""
    def step(pos, _):
        action = point_policy(genotype, pos)
        nxt = pos + 0.2 * action
        return nxt, Transition(pos, action, 1.0 - jnp.sum(jnp.square(action)), nxt,
                               jnp.bool_(False))

    final, transitions = jax.lax.scan(step, jnp.zeros(2), None, length=STEPS)
    return jnp.sum(transitions.reward), final, transitions


POINT = QDTask("point", lambda g, k: point_rollout(g, k)[:2], 6, (-np.inf, np.inf),
               (-1.2, 1.2), 2, lambda key: 0.5 * jax.random.normal(key, (6,)), point_rollout,
               point_policy, 2, 2)


def small(**kw):
    settings = dict(grid_shape=(6, 6), iso_sigma=0.05, line_sigma=0.1,
                    num_critic_training_steps=4, num_pg_training_steps=3,
                    replay_buffer_size=600, critic_hidden_layer_size=(16,), batch_size=8)
    return PGAME(POINT, **{**settings, **kw})


@pytest.mark.slow
def test_offspring_are_pg_steps_then_the_greedy_actor_then_isoline():
    module = small(proportion_mutation_ga=0.5)
    module.configure_population(10)
    assert module.num_ga == 5 and module.replay.num_envs == 10
    assert module.replay.capacity == 600
    # one program each for init, ask and tell (op by op: hundreds of programs)
    ask, tell = jax.jit(module.ask), jax.jit(module.tell)
    state = jax.jit(module.init_state)(jax.random.key(0))
    gen0, _ = ask(state, jax.random.key(1))
    keys = jax.random.split(jax.random.key(1), 10)
    np.testing.assert_array_equal(gen0, jax.vmap(POINT.init)(keys))
    fitness, desc, tr = jax.jit(jax.vmap(point_rollout))(gen0, keys)
    state, metrics = tell(state, gen0, fitness, {"descriptor": desc, "transitions": tr})
    np.testing.assert_array_equal(state.actor, gen0[0])  # QDax: the first initial policy
    assert np.isnan(metrics["critic/loss"].value) and int(state.generation) == 1
    assert int(module.replay.size(state.replay)) == STEPS  # 6 steps in each of 10 rows
    # generation 1 trains: 2 rounds of 2 critic steps and 1 actor step
    state1, metrics = tell(state, gen0, fitness, {"descriptor": desc, "transitions": tr})
    assert np.isfinite(metrics["critic/loss"].value)
    assert not np.array_equal(state1.actor, state.actor)
    assert not np.array_equal(state1.critic["params"]["q1"]["Dense_0"]["kernel"],
                              state.critic["params"]["q1"]["Dense_0"]["kernel"])
    offspring, _ = ask(state1, jax.random.key(2))
    assert offspring.shape == (10, 6)
    np.testing.assert_array_equal(offspring[4], state1.actor)  # 4 PG offspring, then the actor


@pytest.mark.slow
def test_a_policy_gradient_step_is_adam_up_the_first_critic():
    module = small()
    module.configure_population(4)
    state = jax.jit(module.init_state)(jax.random.key(0))  # jitted: a few programs, not hundreds
    parents = jax.vmap(POINT.init)(jax.random.split(jax.random.key(3), 2))
    _, _, tr = jax.jit(jax.vmap(point_rollout))(parents, jax.random.split(jax.random.key(3), 2))
    both = jax.tree.map(lambda x: jnp.concatenate([x, x]), tr)  # 4 rows
    state = state.replace(replay=jax.jit(module.replay.add_steps)(state.replay, both))
    one = PGAME(POINT, num_pg_training_steps=1, critic_hidden_layer_size=(16,), batch_size=8,
                replay_buffer_size=600, policy_learning_rate=0.01)
    one.configure_population(4)
    out = jax.jit(one._policy_gradient)(state, parents, jax.random.key(5))
    batch = jax.jit(one.replay.sample)(state.replay, jax.random.split(jax.random.key(5), 1)[0])

    def objective(g):
        q = one.critic_net.apply(state.critic, batch.obs, point_policy(g, batch.obs))
        return -jnp.mean(q[0])

    gradient = jax.jit(jax.grad(objective))
    for i in range(2):  # Adam's first step: -lr * sign(grad) (up to its epsilon)
        g = gradient(parents[i])
        np.testing.assert_allclose(out[i], parents[i] - 0.01 * g / (jnp.abs(g) + 1e-8),
                                   rtol=1e-5, atol=1e-7)


def test_bad_arguments_are_named_before_anything_compiles():
    with pytest.raises(ValueError, match="the 'arm' task has no rollout and policy"):
        PGAME("arm")
    with pytest.raises(ValueError, match="num_critic_training_steps=5: expected a multiple of "
                                         "policy_delay=2"):
        small(num_critic_training_steps=5)
    with pytest.raises(ValueError, match="proportion_mutation_ga=1.0: expected a number in"):
        small(proportion_mutation_ga=1.0)


def evolve(devices, generations=4, strategy="pmap", callbacks=(), **kw):
    return population.evolve(small(), devices, generations, strategy, log_every=2,
                             callbacks=callbacks, **kw)


@pytest.mark.slow
@pytest.mark.default_emitters
def test_one_and_four_devices_end_with_bitwise_equal_archives():
    one, seen = evolve(1)
    four, seen4 = evolve(4)  # 10 members padded to 12 over 4 devices
    assert_bitwise_equal(four.state, one.state)
    rep = one.state.repertoire
    assert int(one.state.generation) == 4 and np.any(np.asarray(rep.filled))
    assert np.isfinite(seen[-1]["critic/loss"])
    # every elite is its genotype's evaluation, in the cell its descriptor says
    filled = np.asarray(rep.filled)
    fit, desc = jax.jit(jax.vmap(POINT.fn))(rep.genotypes, jnp.zeros(len(filled)))
    np.testing.assert_allclose(np.asarray(fit)[filled], np.asarray(rep.fitnesses)[filled],
                               rtol=1e-6)
    cells = jax.jit(type(rep).cells)(rep, desc)  # jitted: one program, not one an operation
    np.testing.assert_array_equal(np.asarray(cells)[filled], np.flatnonzero(filled))


@pytest.mark.slow
def test_a_stopped_and_resumed_run_equals_an_uninterrupted_one(run_dir):
    """The run's own checkpoint at generation 2 (of 4), resumed in another Trainer,
    ends where the run does, bit for bit."""
    kw = dict(default_root_dir=run_dir, enable_checkpointing=True, strategy="shard_map")
    every = ModelCheckpoint(every_n_steps=2, async_save=False)
    straight, _ = evolve(2, callbacks=[every], **kw)
    assert (Path(straight.log_dir) / "checkpoints" / "2").is_dir()
    resumed, _ = evolve(2, ckpt_path=Path(straight.log_dir) / "checkpoints" / "2", **kw)
    assert resumed.generation == 4
    assert_bitwise_equal(resumed.state, straight.state)


@pytest.mark.slow
def test_walker2d_uni_is_qdax_feet_contact_task():
    task = make_task("walker2d_uni", episode_length=5)
    # QDax's policy MLP (64, 64) on walker2d's 17 observations and 6 actions
    assert (task.num_dims, task.observation_size, task.action_size) == (5702, 17, 6)
    assert (task.descriptor_size, task.descriptor_bounds) == (2, (0.0, 1.0))
    genotype = task.init(jax.random.key(0))
    fitness, descriptor, transitions = jax.jit(task.rollout)(genotype, jax.random.key(1))
    assert transitions.obs.shape == (5, 17) and transitions.action.shape == (5, 6)
    # no fall in 5 steps: the return is every step's reward; contact fractions of 5 steps
    assert not np.any(transitions.terminated)
    assert float(fitness) == pytest.approx(float(jnp.sum(transitions.reward)), rel=1e-6)
    np.testing.assert_allclose(np.asarray(descriptor) * 5, np.round(np.asarray(descriptor) * 5),
                               atol=1e-5)
    assert np.all((np.asarray(descriptor) >= 0) & (np.asarray(descriptor) <= 1))
    np.testing.assert_array_equal(transitions.next_obs[:-1], transitions.obs[1:])
