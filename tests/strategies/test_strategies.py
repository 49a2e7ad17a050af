"""Strategies: keys, replication, collectives in every mode."""

from __future__ import annotations

import inspect
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import distributed as jd
from jaxtrainer.algorithms import PPO, PPOConfig
from tests._support.modules import Draws, Regression

QUIET = dict(compile_evaluation_ahead=False, enable_progress_bar=False, enable_checkpointing=False, logger=False)


def fit(module, run_dir, **kw):
    trainer = jt.Trainer(default_root_dir=run_dir, **{**QUIET, **kw})
    trainer.fit(module)
    return trainer


def test_every_device_draws_its_own_stream_and_reruns_reproduce_it(run_dir):
    """4 devices draw 4 different uniforms; the same seed draws the same 4."""
    a = fit(Draws(), run_dir, strategy="pmap", max_steps=3, seed=7)
    b = fit(Draws(), run_dir, strategy="pmap", max_steps=3, seed=7)
    c = fit(Draws(), run_dir, strategy="pmap", max_steps=3, seed=8)
    draws = np.asarray(a.state["draws"])
    assert draws.shape == (4,)
    assert len(set(draws.tolist())) == 4
    np.testing.assert_array_equal(draws, np.asarray(b.state["draws"]))
    assert not np.array_equal(draws, np.asarray(c.state["draws"]))


def test_split_key_to_devices_matches_fold_in_device():
    key = jax.random.key(3)
    keys = jd.device_keys(key, 4)
    data = jax.random.key_data(keys)
    assert len({tuple(row) for row in np.asarray(data).tolist()}) == 4
    np.testing.assert_array_equal(jax.random.key_data(keys[0]),
                                  jax.random.key_data(jd.fold_in_device(key)))


def _replica_buffers(x):
    return [np.asarray(s.data) for s in x.addressable_shards]


def test_replicas_stay_bitwise_equal_on_four_devices(run_dir):
    """Replicated parameters hold identical bits on every device after training."""
    trainer = fit(Regression(num_samples=8), run_dir, strategy="pmap", max_steps=20)
    for leaf in jax.tree.leaves(trainer.state["params"]):
        buffers = _replica_buffers(leaf)
        assert len(buffers) == 4
        for b in buffers[1:]:
            np.testing.assert_array_equal(buffers[0], b)


def test_unaveraged_statistic_is_rejected_naming_the_leaf(run_dir):
    """Replica drift caught at trace time: a replicated leaf that becomes device-dependent."""
    with pytest.raises(ValueError, match=r"\['x_mean'\].*differ between devices"):
        fit(Regression(average_stats=False), run_dir, strategy="pmap", max_steps=2)


class RandomWalk(jt.Module):
    """Adds noise from the step key to a replicated parameter (a random walk)."""

    def __init__(self, same_key: bool = False):
        self.step_key_per_device = not same_key

    def init_state(self, key):
        return {"w": jnp.zeros((3,))}

    def training_step(self, state, key):
        w = state["w"] + jax.random.normal(key, (3,))
        return {"w": w}, {"norm": jnp.linalg.norm(w)}


def test_noise_on_a_replicated_leaf_names_both_remedies(run_dir):
    """Per-device keys make the walk differ between devices: the error names
    pmean and step_key_per_device = False; with the latter the walk runs and
    stays replicated (the same key, so the same noise, on every device)."""
    with pytest.raises(ValueError) as err:
        fit(RandomWalk(), run_dir, strategy="pmap", max_steps=2)
    message = str(err.value)
    assert "state leaf ['w'] is replicated" in message
    assert "jaxtrainer.distributed.pmean" in message
    assert "step_key_per_device = False" in message
    trainer = fit(RandomWalk(same_key=True), run_dir, strategy="pmap", max_steps=2)
    w = trainer.state["w"]
    assert w.sharding.is_fully_replicated and float(jnp.linalg.norm(w)) > 0.0
    buffers = _replica_buffers(w)
    for b in buffers[1:]:
        np.testing.assert_array_equal(buffers[0], b)


def test_gradient_update_averages_rather_than_sums(run_dir):
    """With plain SGD the step size exposes a summed gradient: 4 devices must
    take exactly the single-device step."""
    one = fit(Regression(optimizer="sgd", lr=0.05), run_dir, strategy="single", max_steps=5)
    four = fit(Regression(optimizer="sgd", lr=0.05), run_dir, strategy="pmap", max_steps=5)
    np.testing.assert_allclose(np.asarray(four.state["params"]["w"]),
                               np.asarray(one.state["params"]["w"]), rtol=1e-5)


@pytest.mark.parametrize("strategy,devices", [("single", "auto"), ("pmap", 2), ("pmap", 4)])
def test_pmean_gives_the_same_loss_under_every_strategy(run_dir, strategy, devices):
    """The same training_step with pmean runs in every mode, same loss."""
    ref = fit(Regression(num_samples=8), run_dir, strategy="single", max_steps=10)
    other = fit(Regression(num_samples=8), run_dir, strategy=strategy, devices=devices,
                max_steps=10)
    np.testing.assert_allclose(other.callback_metrics["loss"], ref.callback_metrics["loss"],
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(other.state["params"]["w"]),
                               np.asarray(ref.state["params"]["w"]), rtol=1e-5, atol=1e-6)


def test_collectives_are_identity_outside_a_mapped_axis():
    x = {"a": jnp.arange(3.0)}
    for op in (jd.pmean, jd.psum, jd.pmax, jd.pmin):
        np.testing.assert_array_equal(op(x)["a"], x["a"])
        np.testing.assert_array_equal(jax.jit(op)(x)["a"], x["a"])
    assert jd.axis_size() == 1 and int(jd.axis_index()) == 0


def test_replication_uses_shardings_with_warnings_as_errors(run_dir):
    """No removed replication helper anywhere; a pmap run raises no warning."""
    src = pathlib.Path(inspect.getfile(jt)).parent
    for path in src.rglob("*.py"):
        text = path.read_text()
        for removed in ("device_put_replicated", "device_put_sharded", "jax.experimental.shard_map"):
            assert removed not in text, f"{path} uses {removed}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = fit(Regression(), run_dir, strategy="pmap", max_steps=2)
    sharding = trainer.state["params"]["w"].sharding
    assert isinstance(sharding, jax.sharding.NamedSharding)
    assert sharding.is_fully_replicated
    assert len(sharding.device_set) == 4


def test_auto_uses_every_local_device():
    assert isinstance(jt.Trainer(max_steps=1, **QUIET).strategy, jt.PmapStrategy)
    assert isinstance(jt.Trainer(max_steps=1, devices=1, **QUIET).strategy, jt.SingleDeviceStrategy)


def test_unknown_strategy_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown strategy 'ddp'; choose one of: .*pmap.*single"):
        jt.Trainer(strategy="ddp", max_steps=1)
    with pytest.raises(ValueError, match=r"unknown strategy 'pmapp'; did you mean 'pmap'\? "
                                         r"choose one of: multi_node, pmap, shard_map, single, auto$"):
        jt.Trainer(strategy="pmapp", max_steps=1)
    with pytest.raises(ValueError, match=r"unknown strategy 'PMAP'; did you mean 'pmap'\? "):
        jt.Trainer(strategy="PMAP", max_steps=1)  # suggestions ignore case


def test_state_layout_is_inferred_from_the_device_dependence_of_each_leaf():
    strategy = jt.PmapStrategy()
    layout = strategy.state_layout(Draws())
    assert layout["draws"].sharded
    layout = strategy.state_layout(Regression())
    assert not any(lay.sharded for lay in jax.tree.leaves(
        layout, is_leaf=lambda x: isinstance(x, jt.strategies.LeafLayout)))


@pytest.mark.parametrize("env,expected", [
    ({"JAX_NUM_PROCESSES": "2", "JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234"}, "multi_node"),
    ({"JAX_NUM_PROCESSES": "1"}, "pmap"),
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
      "SLURM_PROCID": "1"}, "multi_node"),  # one task of an srun step of 4
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, "pmap"),  # an allocation, not an srun step
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"}, "pmap"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "multi_node"),
])
def test_auto_picks_multi_node_when_a_cluster_launched_several_processes(monkeypatch, env, expected):
    from jaxtrainer.strategies._registry import auto_name

    for name in ("JAX_NUM_PROCESSES", "JAX_COORDINATOR_ADDRESS", "SLURM_JOB_ID", "SLURM_STEP_ID",
                 "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID",
                 "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert auto_name() == expected  # 4 fake local devices otherwise: pmap



class _CountedInit(PPO):
    """PPO (its traced hyperparameters an argument of ``init_state``) counting its
    ``init_state`` calls: each is a trace (the strategies jit it)."""

    calls = 0

    def init_state(self, key, hyperparams=None):
        type(self).calls += 1
        return super().init_state(key, hyperparams=hyperparams)


@pytest.mark.parametrize("strategy", ["single", "pmap"])
def test_a_fit_traces_init_state_twice_the_layouts_trace_serving_the_init_program(run_dir,
                                                                                  strategy):
    """Once as it is (the layout's dependence trace, reused by the init program) and
    once with a device count one larger (which leaves the device count sizes)."""
    _CountedInit.calls = 0
    fit(_CountedInit(PPOConfig(env="CartPole-v1", num_envs=4, num_steps=4)), run_dir,
        strategy=strategy, max_steps=1)
    assert _CountedInit.calls == 2
