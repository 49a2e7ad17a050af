"""The contract every shipped module keeps (evosax-style: one test over all of
them, tiny configs from ``tests/_support/shipped.py``), on 1 device ("single") and on 4
("pmap"):

* ``init_state`` and one training step (one generation) run;
* every metric reaches callbacks as a Python float (``step``/``env_steps`` as ints);
* resume is exact: 2 steps straight equal 1 step + checkpoint + resume + 1 step,
  state bit for bit and the logged metrics of step 2.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from tests._support import shipped, toys

COUNTERS = ("step", "env_steps")
RATES = ("steps_per_second", "env_steps_per_second")  # wall-clock: differ between runs


class Rows(jt.Callback):
    """Every log interval's metrics, as the callbacks receive them."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_train_steps_end(self, trainer, module, metrics):
        self.rows.append(dict(metrics))


def trainer(root, name: str, strategy: str, callbacks: list) -> jt.Trainer:
    """A quiet 2-step (2-generation) run: metrics every step, no loggers, and
    checkpoints only where ``callbacks`` hold a ModelCheckpoint."""
    save = any(isinstance(c, jt.ModelCheckpoint) for c in callbacks)
    kw = dict(strategy=strategy, devices=1 if strategy == "single" else 4,
              default_root_dir=root, callbacks=callbacks, logger=False,
              enable_checkpointing=save, enable_progress_bar=False,
              compile_evaluation_ahead=False)
    if name in shipped.POPULATION:
        return jt.PopulationTrainer(shipped.POPULATION_SIZE, max_generations=2,
                                    log_every_n_generations=1, **kw)
    return jt.Trainer(max_steps=2, log_every_n_steps=1, **kw)


def check_metrics(name: str, row: dict) -> None:
    assert len(row) > len(COUNTERS) + len(RATES), (name, row)
    for key, value in row.items():
        kind = int if key in COUNTERS else float
        assert type(value) is kind, f"{name}: metric {key}={value!r} is a {type(value).__name__}"
        assert math.isfinite(value), f"{name}: metric {key}={value!r}"


# every module under pmap (4 devices); on one device, one module of each family
# (the single-device path is the same code for the rest of a family)
# one RL module, one ES on one device (the others resume exactly on one device in
# test_resume_algorithms and the recipe tests)
SINGLE_DEVICE = ("PPO", "OpenES")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,strategy", [
    *[(n, "pmap") for n in [*shipped.MODULES, *shipped.POPULATION]],
    *[(n, "single") for n in SINGLE_DEVICE]])
def test_module_contract(tmp_path, name, strategy):
    make = {**shipped.MODULES, **shipped.POPULATION}[name]
    rows = Rows()
    straight = trainer(tmp_path, name, strategy, [
        rows, jt.ModelCheckpoint(every_n_steps=1, save_last=False, async_save=False)])
    straight.fit(make())
    assert [r["step"] for r in rows.rows] == [1, 2]
    for row in rows.rows:
        check_metrics(name, row)
    want = toys.leaves(straight.state)

    again = Rows()
    resumed = trainer(tmp_path, name, strategy, [again])
    resumed.fit(make(), ckpt_path=os.path.join(straight.log_dir, "checkpoints", "1"))
    assert resumed.global_step == 2 and resumed.env_steps == straight.env_steps
    toys.assert_trees_equal(resumed.state, want)
    assert [r["step"] for r in again.rows] == [2]
    drop = set(RATES)
    assert ({k: v for k, v in again.rows[0].items() if k not in drop}
            == {k: v for k, v in rows.rows[1].items() if k not in drop})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [n for n in [*shipped.MODULES, *shipped.POPULATION]
                                  if n not in ("OpenES", "CMA_ES")])
def test_every_shipped_rl_module_acts_through_policy(name):
    """The one policy contract: ``policy(state)`` of a fresh state acts on a batch of
    observations with actions the env takes (``load_policy`` and ``jaxtrainer eval``
    use nothing else)."""
    from jaxtrainer.policy import params_of

    module = {**shipped.MODULES, **shipped.POPULATION}[name]()
    if hasattr(module, "configure_population"):
        module.configure_population(shipped.POPULATION_SIZE)
    if hasattr(module, "configure_budget"):
        module.configure_budget(10)
    state = module.init_state(jax.random.key(0))
    spec, params = params_of(module, state)
    env = spec.env
    obs = jnp.zeros((3, *env.observation_shape), env.observation_dtype)
    actions = jax.jit(lambda p, o: spec.greedy(p, o, jax.random.key(1)))(params, obs)
    assert actions.shape == (3, *env.action_shape)
    assert actions.dtype == (jnp.int32 if env.discrete else jnp.float32)
    act = module.policy(state)  # the contract itself (a population: its default member)
    np.testing.assert_array_equal(act(obs), actions)
