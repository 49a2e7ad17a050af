"""ShardMapStrategy and the population sharding helpers: psum of per-device samples
under check_vma, gradients through an axis_index branch, nested maps refused."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import jaxtrainer as jt
from jaxtrainer import distributed as D
from jaxtrainer.strategies import ShardMapStrategy, resolve
from tests._support import toys

ROOT = Path(__file__).resolve().parents[2]

QUIET = dict(compile_evaluation_ahead=False, logger=False, enable_checkpointing=False, enable_progress_bar=False)
X = jnp.linspace(-1.0, 1.0, 24).reshape(8, 3)
Y = X @ jnp.array([1.0, -2.0, 0.5]) + 0.3
BOTH_AXES = ("hosts", D.AXIS_NAME)


def mesh(n, names=(D.AXIS_NAME,), shape=None):
    return jax.make_mesh(shape or (n,), names, axis_types=(jax.sharding.AxisType.Explicit,) * len(names),
                         devices=jax.devices()[:n])


class Regression(jt.Module):
    """Full-batch linear regression whose data does not depend on the device count:
    each device takes its rows of the global batch, gradients are averaged over
    every bound data axis (hosts and devices)."""

    optimizer = optax.sgd(0.1)

    def init_state(self, key):
        params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
        return {"params": params, "opt": self.optimizer.init(params)}

    def training_step(self, state, key):
        n = D.axis_size(BOTH_AXES)
        rows = D.local_size(X.shape[0], "batch", n)
        start = D.axis_index(BOTH_AXES) * rows
        x = jax.lax.dynamic_slice_in_dim(X, start, rows)
        y = jax.lax.dynamic_slice_in_dim(Y, start, rows)

        def loss_fn(p, x, y):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2), {}

        params, opt, loss, _ = D.averaged_update(loss_fn, state["params"], state["opt"],
                                                 self.optimizer, x, y, axis_name=BOTH_AXES)
        return {"params": params, "opt": opt}, {"loss": loss}


def fit(module, strategy, steps=20, log=5, **kw):
    trainer = jt.Trainer(strategy=strategy, max_steps=steps, log_every_n_steps=log, **QUIET, **kw)
    seen = []

    class Rec(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            seen.append(metrics)

    trainer.callbacks.append(Rec())
    trainer.fit(module)
    return trainer, seen


# ---------------------------------------------------------------- construction
def test_registered_by_name_with_one_data_axis_over_all_devices():
    strategy = resolve("shard_map")
    assert isinstance(strategy, ShardMapStrategy)
    assert "shard_map" in jt.strategies.available()
    assert strategy.num_devices == 4
    assert dict(strategy.mesh.shape) == {D.AXIS_NAME: 4}
    assert strategy.data_axes == (D.AXIS_NAME,)


def test_mesh_shape_mismatch_is_a_clear_error_before_compiling(run_dir):
    with pytest.raises(ValueError, match=r"mesh_shape=\(3,\) holds 3 device\(s\) but 4 were selected"):
        ShardMapStrategy(devices=4, mesh_shape=(3,))
    trainer = jt.Trainer(strategy=ShardMapStrategy(mesh_shape=(2, 3), axis_names=("a", "b")),
                         max_steps=1, default_root_dir=run_dir, **QUIET)
    with pytest.raises(ValueError, match=r"holds 6 device\(s\) but 4 were selected"):
        trainer.fit(Regression())
    assert trainer.compile_seconds == {}  # nothing compiled
    with pytest.raises(ValueError, match="name them with axis_names"):
        ShardMapStrategy(mesh_shape=(2, 2))
    with pytest.raises(ValueError, match="data_axes"):
        ShardMapStrategy(mesh_shape=(2, 2), axis_names=("a", "b"), data_axes=("c",))
    with pytest.raises(ValueError, match="at most one of them -1"):
        ShardMapStrategy(mesh_shape=(-1, -1), axis_names=("a", "b"))


def test_minus_one_infers_an_axis_and_data_axes_follow_mesh_order():
    s = ShardMapStrategy(mesh_shape=(2, -1), axis_names=("hosts", D.AXIS_NAME))
    s.setup()
    assert dict(s.mesh.shape) == {"hosts": 2, D.AXIS_NAME: 2}
    assert s.data_axes == ("hosts", D.AXIS_NAME) and s.num_devices == 4
    only = ShardMapStrategy(mesh_shape=(2, 2), axis_names=("hosts", D.AXIS_NAME),
                            data_axes=(D.AXIS_NAME,))
    assert only.num_devices == 2


# --------------------------------------------------------- same loss everywhere
def test_same_loss_and_params_as_single_and_pmap():
    runs = {
        "single": fit(Regression(), "single"),
        "pmap": fit(Regression(), "pmap"),
        "shard_map": fit(Regression(), "shard_map"),
        "shard_map_2x2": fit(Regression(), ShardMapStrategy(mesh_shape=(2, 2), axis_names=BOTH_AXES)),
    }
    ref_trainer, ref_seen = runs["single"]
    assert ref_seen[-1]["loss"] < ref_seen[0]["loss"]
    for name, (trainer, seen) in runs.items():
        assert [m["step"] for m in seen] == [5, 10, 15, 20], name
        assert set(seen[-1]) == set(ref_seen[-1]), name  # same metric names
        np.testing.assert_allclose([m["loss"] for m in seen], [m["loss"] for m in ref_seen],
                                   rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(trainer.state["params"]["w"], ref_trainer.state["params"]["w"],
                                   rtol=1e-5, atol=1e-6, err_msg=name)


def test_pmap_and_default_shard_map_are_bitwise_identical():
    (a, sa), (b, sb) = fit(Regression(), "pmap"), fit(Regression(), "shard_map")
    assert [m["loss"] for m in sa] == [m["loss"] for m in sb]
    for x, y in zip(jax.tree.leaves(a.state), jax.tree.leaves(b.state), strict=True):
        np.testing.assert_array_equal(x, y)


# ----------------------------------- psum of per-device normals under check_vma
class NormalFitness(jt.Module):
    """Samples normals per device and returns a psum-reduced scalar."""

    def init_state(self, key):
        return {"total": jnp.zeros(())}

    def training_step(self, state, key):
        noise = jax.random.normal(key, (5,))
        total = D.psum(jnp.sum(noise))  # invariant: fine for replicated state
        return {"total": state["total"] + total}, {"fitness": total}


def test_psum_of_normals_runs_with_check_vma_and_is_exact():
    trainer, seen = fit(NormalFitness(), "shard_map", steps=1, log=1, seed=3)
    root = jax.random.fold_in(jax.random.key(3), 1)  # TRAIN_STREAM
    step_key = jax.random.fold_in(root, 0)
    expected = sum(float(jnp.sum(jax.random.normal(jax.random.fold_in(step_key, d), (5,))))
                   for d in range(4))
    assert seen[0]["fitness"] == pytest.approx(expected, rel=1e-5)
    assert float(trainer.state["total"]) == pytest.approx(expected, rel=1e-5)

    def raw(key):  # the same by hand: raw shard_map, out_specs=P(), check_vma on
        k = jax.random.fold_in(key, jax.lax.axis_index(D.AXIS_NAME))
        return jax.lax.psum(jnp.sum(jax.random.normal(k, (5,))), D.AXIS_NAME)

    out = jax.jit(jax.shard_map(raw, mesh=mesh(4), in_specs=P(), out_specs=P(),
                                check_vma=True))(step_key)
    assert float(out) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------- gradient through an axis_index branch
def branchy(x, d):
    return jnp.where(d == 0, 2.0 * x, 3.0 * x) ** 2


def test_gradient_through_axis_index_branch_matches_vmap_reference():
    x = jnp.array(1.5)
    ref = jax.grad(lambda x: jnp.sum(jax.vmap(lambda d: branchy(x, d))(jnp.arange(2))))(x)
    assert float(ref) == pytest.approx(2 * 4 * 1.5 + 2 * 9 * 1.5)  # 39

    def per_device(x):
        def loss(x):
            return jax.lax.psum(branchy(x, jax.lax.axis_index(D.AXIS_NAME)), D.AXIS_NAME)

        return jax.grad(loss)(x)

    got = jax.jit(jax.shard_map(per_device, mesh=mesh(2), in_specs=P(), out_specs=P(),
                                check_vma=True))(x)
    assert float(got) == pytest.approx(float(ref))

    # Module code has jax.pmap's semantics: each device differentiates its own
    # term, and a collective of the per-device gradients gives the whole one.
    class Branch(jt.Module):
        def init_state(self, key):
            return {"x": jnp.array(1.5)}

        def training_step(self, state, key):
            g = D.psum(jax.grad(lambda x: branchy(x, D.axis_index()))(state["x"]))
            return {"x": state["x"] - 0.01 * g}, {"grad": g}

    trainer, seen = fit(Branch(), ShardMapStrategy(devices=2), steps=1, log=1)
    assert seen[0]["grad"] == pytest.approx(39.0)
    assert float(trainer.state["x"]) == pytest.approx(1.5 - 0.39)

    # Differentiating through the psum instead gives each device a different
    # gradient (as under jax.pmap): never silently, the replicated leaf is refused.
    class ThroughPsum(Branch):
        def training_step(self, state, key):
            g = jax.grad(lambda x: D.psum(branchy(x, D.axis_index())))(state["x"])
            return {"x": state["x"] - 0.01 * g}, {"grad": g}

    with pytest.raises(ValueError, match=r"state leaf \['x'\] is replicated .* makes it "
                                         r"differ between devices"):
        fit(ThroughPsum(), ShardMapStrategy(devices=2), steps=1, log=1)


# ------------------------------------------- nested map over another device set
def test_nested_map_over_another_device_set_fails_early():
    three = mesh(3)

    class Nested(jt.Module):
        def init_state(self, key):
            return {"x": jnp.zeros(())}

        def training_step(self, state, key):
            f = D.sharded_vmap(lambda v: v * 2.0, mesh=three)(jnp.arange(6.0))
            return state, {"f": jnp.sum(f)}

    with pytest.raises(ValueError, match=r"inside a shard_map already mapped over axes .*not supported"):
        fit(Nested(), "shard_map", steps=1, log=1)
    # The same call outside mapped code runs on its own 3-device mesh.
    np.testing.assert_array_equal(D.sharded_vmap(lambda v: v * 2.0, mesh=three)(jnp.arange(6.0)),
                                  jnp.arange(6.0) * 2.0)


def test_training_and_evaluation_share_one_mesh():
    class WithEval(Regression):
        def evaluation_step(self, state, key):
            return {"eval/devices": jnp.asarray(D.axis_size(), jnp.float32),
                    "eval/w0": state["params"]["w"][0]}

    trainer, _ = fit(WithEval(), "shard_map", steps=4, log=2, eval_every_n_steps=2)
    result = trainer.evaluate(WithEval())
    assert result["eval/devices"] == 4.0


# --------------------------------------------------------------- helpers
def noisy(x, key):
    return {"y": x * 2.0 + jax.random.normal(key), "neg": -x}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_shmap_vmap_and_map_equal_vmap_for_any_population_size(n):
    xs = jnp.linspace(-1.0, 1.0, 10)
    keys = jax.random.split(jax.random.key(0), 10)
    ref = jax.jit(jax.vmap(noisy))(xs, keys)
    for mapper in (D.sharded_vmap(noisy, mesh(n)), D.sharded_map(noisy, mesh(n), batch_size=2)):
        got = jax.jit(mapper)(xs, keys)
        np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-6)
        np.testing.assert_array_equal(got["neg"], ref["neg"])
    inside = jax.jit(jax.shard_map(lambda a, k: D.sharded_vmap(noisy)(a, k), mesh=mesh(n),
                                   in_specs=P(), out_specs=P(), check_vma=True))
    got = inside(xs, keys)
    assert got["y"].shape == (10,)
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-6)


def test_gather_members_moves_exact_bits():
    vals = jnp.array([-0.0, jnp.nan, 1e-45, -jnp.inf, 3.5, 0.0, 7.0, -2.0])

    def body(v):
        local = D.local_members(v)
        return D.gather_members({"f": local, "b": local > 0, "i": local.astype(jnp.int32)})

    got = jax.jit(jax.shard_map(body, mesh=mesh(4), in_specs=P(), out_specs=P(),
                                check_vma=True))(vals)
    np.testing.assert_array_equal(np.asarray(got["f"]).view(np.uint32), np.asarray(vals).view(np.uint32))
    np.testing.assert_array_equal(got["b"], vals > 0)


def test_pad_population_and_local_members_errors():
    padded, mask = D.pad_population({"a": jnp.arange(10.0)}, 4)
    np.testing.assert_array_equal(padded["a"], jnp.concatenate([jnp.arange(10.0), jnp.array([9.0, 9.0])]))
    np.testing.assert_array_equal(mask, jnp.arange(12) < 10)
    with pytest.raises(ValueError, match="does not split over 4 devices"):
        jax.jit(jax.shard_map(D.local_members, mesh=mesh(4), in_specs=P(), out_specs=P(D.AXIS_NAME)))(
            jnp.arange(10.0))
    with pytest.raises(ValueError, match="share a leading"):
        D.population_size({"a": jnp.zeros(3), "b": jnp.zeros(4)})


def test_tree_device_put_shards_or_replicates():
    m = mesh(4)
    tree = {"a": np.arange(8.0), "b": np.ones((4, 2))}
    sharded = D.shard_tree(tree, m, D.AXIS_NAME)
    assert sharded["a"].sharding.spec == P(D.AXIS_NAME)
    assert len(sharded["b"].addressable_shards) == 4 and sharded["b"].addressable_shards[0].data.shape == (1, 2)
    replicated = D.shard_tree(tree, m)
    assert replicated["a"].sharding.spec == P()
    np.testing.assert_array_equal(replicated["a"], tree["a"])
    with pytest.raises(ValueError, match=r"leaf \['a'\] with shape \(6,\) does not split over 4"):
        D.shard_tree({"a": np.zeros(6)}, m, D.AXIS_NAME)


@pytest.mark.parametrize("make", ["Mesh(devices, names)", "jax.make_mesh"])
def test_shmap_vmap_with_a_mesh_of_any_axis_type(make):
    """An ordinary ``Mesh(jax.devices(), ("gpu",))`` has Auto axes, ``jax.make_mesh``
    Explicit ones: jaxtrainer's form lays members out on either, eagerly and under jit,
    any population size."""
    from jax.sharding import Mesh

    m = Mesh(jax.devices(), ("gpu",)) if make != "jax.make_mesh" else jax.make_mesh((4,), ("gpu",))
    for size in (6, 8):
        pop = jnp.arange(size * 3.0).reshape(size, 3)
        for mapped in (D.sharded_vmap(lambda x: x.sum(-1), m, "gpu"),
                       D.sharded_map(lambda x: x.sum(-1), m, "gpu", 2)):
            np.testing.assert_array_equal(mapped(pop), pop.sum(-1))
            np.testing.assert_array_equal(jax.jit(mapped)(pop), pop.sum(-1))


@pytest.mark.slow
def test_the_architecture_guides_two_axis_mesh_trains_an_unchanged_recipe_module(run_dir):
    """The guide's mesh, as written there: a 'model' axis that replicates and the
    'devices' axis that ``pmean`` reduces over by default, so PPO runs unchanged."""
    from jaxtrainer.algorithms import PPO

    strategy = jt.strategies.ShardMapStrategy(mesh_shape=(2, 2), axis_names=("model", "devices"),
                                              data_axes=("devices",))
    trainer = toys.trainer(run_dir, strategy=strategy, max_steps=3)
    trainer.fit(PPO(env="CartPole-v1", num_envs=8, num_steps=8, num_minibatches=2))
    assert trainer.global_step == 3 and trainer.strategy.data_axes == ("devices",)
    guide = (ROOT / "docs" / "guides" / "architecture.md").read_text()
    assert ('ShardMapStrategy(mesh_shape=(2, 2), axis_names=("model", "devices"), '
            'data_axes=("devices",))') in guide
