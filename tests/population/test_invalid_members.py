"""A member whose fitness is NaN (a diverged policy) does not poison its population."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.algorithms import FunctionES, sphere
from jaxtrainer.distributed import MemberLayout
from jaxtrainer.distributed._members import rank


class NaNAtMember3(jt.PopulationModule):
    """OpenES on the sphere, where member 3's fitness is NaN in generation 1 (the
    population carries each member's id and generation to its evaluation)."""

    def __init__(self, es):
        self.es = es

    def configure_population(self, population_size):
        self.es.configure_population(population_size)

    def init_state(self, key):
        return self.es.init_state(key)

    def ask(self, state, key):
        population, state = self.es.ask(state, key)
        size = population.shape[0]
        return {"x": population, "id": jnp.arange(size),
                "generation": jnp.full(size, state.es.generation_counter)}, state

    def evaluate(self, member, key):
        value, extras = self.es.evaluate(member["x"], key)
        diverged = (member["id"] == 3) & (member["generation"] == 0)
        return jnp.where(diverged, jnp.nan, value), extras

    def tell(self, state, population, fitness):
        return self.es.tell(state, population["x"], fitness)


def run(population_module, devices, generations=4, nan_guard=True):
    seen = []

    class Record(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            seen.append(dict(metrics))

    callbacks = [Record()] + ([jt.callbacks.NaNGuard()] if nan_guard else [])
    trainer = jt.PopulationTrainer(population_size=8, strategy="pmap", devices=devices,
                                   max_generations=generations, log_every_n_generations=1,
                                   logger=False, enable_progress_bar=False,
                                   enable_checkpointing=False, callbacks=callbacks)
    trainer.fit(population_module)
    return trainer, seen


@pytest.mark.parametrize("devices", [1, 4])
def test_a_nan_member_of_openes_is_left_out_and_counted(devices):
    es = FunctionES(sphere, num_dims=4, algorithm="Open_ES", std=0.1, learning_rate=0.05)
    trainer, seen = run(NaNAtMember3(es), devices)
    assert trainer.global_step == 4  # NaNGuard let the healthy run go on
    first = seen[0]
    assert first["fitness/invalid"] == 1.0 and seen[1]["fitness/invalid"] == 0.0
    for m in seen:
        assert all(np.isfinite(v) for v in m.values()), m
    mean = np.asarray(es.mean(jax.device_get(trainer.state)))
    assert np.all(np.isfinite(mean))


def test_invalid_fitness_ranks_last_and_is_left_out_of_the_statistics():
    fitness = jnp.array([3.0, jnp.nan, 5.0, jnp.inf, 1.0])
    ranked = jax.jit(rank)(fitness).tolist()  # jitted: one program, not one an operation
    assert ranked[:3] == [2, 0, 4] and set(ranked[3:]) == {1, 3}
    metrics = jax.jit(MemberLayout(5).fitness_metrics)(fitness)
    assert float(metrics["fitness/mean"]) == 3.0
    assert float(metrics["fitness/max"].value) == 5.0 and float(metrics["fitness/min"].value) == 1.0
    assert float(metrics["fitness/invalid"].total) == 2.0
    broken = jax.jit(MemberLayout(2).fitness_metrics)(jnp.array([jnp.nan, jnp.nan]))
    assert np.isnan(float(broken["fitness/mean"]))  # every member failed: NaNGuard stops


def test_nan_guard_stops_a_run_whose_every_member_failed():
    class AllNaN(FunctionES):
        def evaluate(self, member, key):
            return jnp.float32(jnp.nan), {}

    trainer, _ = run(AllNaN(sphere, num_dims=4, algorithm="Open_ES", std=0.1,
                            learning_rate=0.05), 1)
    assert trainer.global_step == 1 and "fitness/mean=nan" in trainer.stop_reason


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 4])
def test_nan_members_of_pbt_rank_last_and_do_not_stop_the_run(devices, run_dir):
    """PBT of a module whose score is NaN for members with noise > 0.5 (a diverged
    member): the run goes on under NaNGuard, the fitness statistics stay finite and
    fitness/invalid counts the NaN members."""
    from jaxtrainer.population import PBT
    from tests.population.test_pbt import Regression

    class Diverging(Regression):
        def training_step(self, state, key):
            state, metrics = super().training_step(state, key)
            bad = state["hyperparams"]["noise"] > 0.5
            return state, {**metrics, "score": jnp.where(bad, jnp.nan, metrics["score"])}

    seen = []

    class Record(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            seen.append(dict(metrics))

    module = PBT(Diverging(), {"noise": (0.0, 1.0)}, population_size=8, ready_every_n_steps=2,
                 fitness_metric="score", member_metrics=("score",))
    trainer = jt.Trainer(strategy="pmap" if devices > 1 else "single", devices=devices,
                         max_steps=6, log_every_n_steps=2, seed=3, default_root_dir=run_dir,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False,
                         callbacks=[Record(), jt.callbacks.NaNGuard()])
    trainer.fit(module)
    assert trainer.global_step == 6 and "NaNGuard" not in trainer.stop_reason
    assert max(m["fitness/invalid"] for m in seen) >= 1
    assert all(np.isfinite(m["fitness/mean"]) and np.isfinite(m["score"]) for m in seen)
    assert any(np.isnan(v) for m in seen for k, v in m.items() if k.startswith("member/"))
