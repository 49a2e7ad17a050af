"""The contract every shipped module keeps (evosax-style: one test over all of
them, tiny configs from ``tests/_support/shipped.py``), on 1 device ("single") and on 4
("pmap"):

* ``init_state`` and one training step (one generation) run;
* every metric reaches callbacks as a Python float (``step``/``env_steps`` as ints);
* resume is exact: 2 steps straight equal 1 step + checkpoint + resume + 1 step,
  state bit for bit and the logged metrics of step 2;
* every RL module acts through ``policy(state)`` (on its trained state, under pmap).
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


NO_POLICY = ("OpenES", "CMA_ES")
"""The ES adapters over a function (no environment, no policy)."""


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
    module = make()
    straight.fit(module)
    assert [r["step"] for r in rows.rows] == [1, 2]
    for row in rows.rows:
        check_metrics(name, row)
    want = toys.leaves(straight.state)
    if strategy == "pmap" and name not in NO_POLICY:
        acts_through_policy(module, jax.device_get(straight.state))  # as a checkpoint loads

    again = Rows()
    resumed = trainer(tmp_path, name, strategy, [again])
    resumed.fit(make(), ckpt_path=os.path.join(straight.log_dir, "checkpoints", "1"))
    assert resumed.global_step == 2 and resumed.env_steps == straight.env_steps
    toys.assert_trees_equal(resumed.state, want)
    assert [r["step"] for r in again.rows] == [2]
    drop = set(RATES)
    assert ({k: v for k, v in again.rows[0].items() if k not in drop}
            == {k: v for k, v in rows.rows[1].items() if k not in drop})


def acts_through_policy(module, state) -> None:
    """The one policy contract: ``policy(state)`` acts on a batch of observations
    with actions the env takes (``load_policy`` and ``jaxtrainer eval`` use nothing
    else), the actions of the policy spec's greedy function."""
    from jaxtrainer.policy import params_of

    spec, params = params_of(module, state)
    env = spec.env
    obs = jnp.zeros((3, *env.observation_shape), env.observation_dtype)
    actions = jax.jit(lambda p, o: spec.greedy(p, o, jax.random.key(1)))(params, obs)
    assert actions.shape == (3, *env.action_shape)
    assert actions.dtype == (jnp.int32 if env.discrete else jnp.float32)
    act = module.policy(state)  # the contract itself (a population: its default member)
    np.testing.assert_array_equal(act(obs), actions)


# ---------------------------------------------------------------- the protocols
def test_what_a_module_offers_is_a_protocol_checked_with_isinstance():
    """Populations, members ranked by fitness and the modules a wrapper runs are
    told apart by ``isinstance`` against :mod:`jaxtrainer.module`'s Protocols, and
    :func:`~jaxtrainer.module.unwrap` follows the one wrapping attribute, ``module``."""
    from jaxtrainer.commands._eval_run import EpisodeStatistics
    from jaxtrainer.module import (
        HostEnv,
        Members,
        Population,
        RankedMembers,
        counted_members,
        members_of,
        unwrap,
    )
    from jaxtrainer.population import PBT, GenerationModule, Sweep

    ppo = shipped.MODULES["PPO"]()
    pbt = PBT(ppo, {"lr": (1e-4, 1e-2)}, population_size=4, ready_every_n_steps=1)
    sweep = Sweep(ppo, seeds=3)
    es = shipped.POPULATION["NeuroES"]()
    generation = GenerationModule(es, 4, ("devices",))
    stats = EpisodeStatistics(pbt)

    assert [isinstance(m, Members) for m in (pbt, sweep, ppo, generation)] == [True, True, False, False]
    assert [isinstance(m, RankedMembers) for m in (pbt, sweep)] == [True, False]
    assert [isinstance(m, Population) for m in (generation, ppo)] == [True, False]
    assert [counted_members(m) for m in (sweep, pbt, ppo, generation)] == [3, 1, 1, 1]
    assert unwrap(pbt) is ppo and unwrap(stats) is ppo and unwrap(ppo) is ppo
    assert unwrap(generation) is es and generation.population_module is es is generation.module
    assert pbt.member_module is ppo  # the old names stay readable
    assert members_of(stats) is pbt and members_of(generation) is None and members_of(ppo) is None
    assert unwrap(stats, Members) is pbt and unwrap(ppo, Members) is None
    assert isinstance(ppo.env, HostEnv) and ppo.env.host is False

    class HoldsANetwork(jt.Module):  # a ``module`` that is no jaxtrainer module is not followed
        def __init__(self):
            self.module = object()

    held = HoldsANetwork()
    assert unwrap(held) is held and members_of(held) is None


def test_the_base_classes_declare_what_modules_may_offer():
    """Lightning's style: the base class declares each optional hook and attribute
    with its default, and a subclass overrides it (no ``hasattr`` needed)."""
    import dataclasses

    class Bare(jt.PopulationModule):
        pass

    bare = Bare()
    assert (bare.population_size, bare.env_steps_per_generation, bare.env) == (None, 0, None)
    assert (bare.has_evaluation(), bare.has_policy(), bare.initial_hyperparams()) == (False, False, None)
    assert bare.validate(4) is None and bare.configure_population(8) is None
    with pytest.raises(NotImplementedError, match="^Bare does not define evaluation_step$"):
        bare.evaluation_step(None, jax.random.key(0))
    es = shipped.POPULATION["NeuroES"]()
    assert (es.has_evaluation(), es.has_policy()) == (True, True)

    module = jt.Module()
    assert (module.env, module.eval_episodes, module.config, module.num_envs) == (None, None, None, None)
    assert (module.TUNABLE, module.step_function_name, module.has_evaluation()) == ((), None, False)

    @dataclasses.dataclass
    class State:
        env_state: int
        params: int

        def replace(self, **kw):
            return dataclasses.replace(self, **kw)

    class Host:
        host = True

    class OnHost(jt.Module):
        env = Host()

    fresh = State(env_state=7, params=0)
    assert OnHost().resumed_state(State(1, 1), lambda: fresh) == State(7, 1)
    assert jt.Module().resumed_state(State(1, 1), lambda: fresh) == State(1, 1)
