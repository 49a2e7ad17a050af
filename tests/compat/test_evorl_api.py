"""Code written against EvoRL's distributed API (``evorl.distributed``) runs from
``jaxtrainer.distributed`` with its import changed: the population example with
``shmap_vmap(fn, mesh, in_specs, out_specs)``, gradients ``pmean``-ed over
``PMAP_AXIS_NAME`` inside a step the Trainer maps over devices, and the process
helpers ``get_global_ranks``/``is_dist_initialized`` (2 processes x 2 fake CPU
devices on 127.0.0.1, a free port, a hard timeout).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxtrainer as jt
from jaxtrainer import distributed as jd
from jaxtrainer.distributed import (
    PMAP_AXIS_NAME,
    agent_gradient_update,
    get_global_ranks,
    get_process_id,
    gradient_update,
    is_dist_initialized,
    loss_and_pgrad,
    pmean,
    shmap_map,
    shmap_vmap,
    split_key_to_devices,
    tree_device_put,
)
from tests._support._xla import xla_flags

QUIET = dict(compile_evaluation_ahead=False, enable_progress_bar=False, enable_checkpointing=False,
             logger=False)
HARD_TIMEOUT = 120  # seconds, for the two-process launch
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------ population example
def population():
    """EvoRL's example population: [num_devices, members_per_device, dim] = [4, 10, 3]."""
    return jnp.arange(4 * 10 * 3).reshape(4, 10, 3)


def test_population_example_runs_with_only_the_import_changed():
    """A mesh named ``gpu`` over all devices, the population placed on it, fitness
    = the sum over the last axis: [4, 10], equal to ``pop.sum(-1)`` and sharded
    over ``gpu`` as ``out_specs`` says; ``shmap_map`` gives the same."""
    mesh = Mesh(jax.devices(), ("gpu",))
    pop = population()
    want = np.asarray(pop).sum(-1)
    placements = {
        "mesh (replicated)": jd.shard_tree(pop, mesh),
        "sharding (EvoRL's form)": tree_device_put(pop, NamedSharding(mesh, P("gpu"))),
    }
    assert placements["mesh (replicated)"].sharding.spec == P()
    assert placements["sharding (EvoRL's form)"].sharding.spec == P("gpu")
    for name, placed in placements.items():
        for mapper in (shmap_vmap, shmap_map):
            fitness = mapper(lambda x: x.sum(-1), mesh, P("gpu"), P("gpu"))(placed)
            assert fitness.shape == (4, 10), (name, mapper.__name__)
            np.testing.assert_array_equal(np.asarray(fitness), want)
            assert fitness.sharding.spec == P("gpu")
    # keyword specs and check_rep, as EvoRL's own workflows call it (check_rep is
    # the older experimental shard_map's name for check_vma); under jit too
    fitness = jax.jit(shmap_vmap(lambda x: x.sum(-1), mesh=mesh, in_specs=P("gpu"),
                                 out_specs=P("gpu"), check_rep=False))(population())
    np.testing.assert_array_equal(np.asarray(fitness), want)


def test_evorl_form_maps_fn_over_each_devices_block_and_takes_several_specs():
    """Each device's block is [2, 3] of a [8, 3] population on P("gpu"): fn runs
    per member; a replicated second argument (P()) is vmapped over its leading
    axis as well, as in EvoRL; outputs may be a pytree with one spec each."""
    mesh = Mesh(jax.devices(), ("gpu",))
    pop = jnp.arange(24.0).reshape(8, 3)
    scale = jnp.full((2,), 10.0)  # replicated; vmapped with the block's 2 members

    def fn(member, s):
        return {"f": member.sum() * s, "i": jnp.argmax(member)}

    for mapper in (shmap_vmap, shmap_map):
        out = mapper(fn, mesh, (P("gpu"), P()), {"f": P("gpu"), "i": P("gpu")})(pop, scale)
        np.testing.assert_array_equal(np.asarray(out["f"]), np.asarray(pop).sum(-1) * 10.0)
        np.testing.assert_array_equal(np.asarray(out["i"]), np.full(8, 2))
    batched = shmap_map(fn, mesh, (P("gpu"), P()), {"f": P("gpu"), "i": P("gpu")},
                        batch_size=1)(pop, scale)
    np.testing.assert_array_equal(np.asarray(batched["f"]), np.asarray(pop).sum(-1) * 10.0)


def test_our_old_form_of_evorls_names_still_runs_with_a_deprecation_warning():
    """jaxtrainer's form through EvoRL's names (0.2.0): flat [P, ...] members, P = 10
    not a multiple of 4, as jaxtrainer's own helpers give them, with a warning naming
    the helper; one name, one form from 0.3.0."""
    mesh = jax.make_mesh((4,), (jd.AXIS_NAME,), axis_types=(jax.sharding.AxisType.Explicit,))
    xs = jnp.arange(10.0)
    key = jax.random.key(3)
    calls = [
        (lambda: shmap_vmap(lambda v: v * 2.0, mesh)(xs), xs * 2.0, "sharded_vmap"),
        (lambda: shmap_vmap(lambda v: v * 2.0, mesh, jd.AXIS_NAME)(xs), xs * 2.0, "sharded_vmap"),
        (lambda: shmap_map(lambda v: v + 1.0, mesh, jd.AXIS_NAME, 2)(xs), xs + 1.0, "sharded_map"),
        (lambda: tree_device_put(xs, mesh), xs, "shard_tree"),
        (lambda: jax.random.key_data(split_key_to_devices(key, 4)),
         jax.random.key_data(jd.device_keys(key, 4)), "device_keys"),
    ]
    for call, want, new in calls:
        with pytest.warns(DeprecationWarning, match=rf"is now written jaxtrainer\.distributed\.{new}\("):
            np.testing.assert_array_equal(call(), want)
    optimizer, params = optax.sgd(0.1), {"w": jnp.ones(3)}

    def linear(p, x):
        return jnp.sum(p["w"] * x), None

    with pytest.warns(DeprecationWarning, match=r"is now written jaxtrainer\.distributed\.averaged_update\("):
        old = gradient_update(linear, params, optimizer.init(params), optimizer, xs[:3])
    new = jd.averaged_update(linear, params, optimizer.init(params), optimizer, xs[:3])
    np.testing.assert_array_equal(old[0]["w"], new[0]["w"])
    np.testing.assert_array_equal(new[0]["w"], 1.0 - 0.1 * xs[:3])
    np.testing.assert_array_equal(jd.sharded_vmap(lambda v: v * 2.0, mesh)(xs), xs * 2.0)
    np.testing.assert_array_equal(jd.sharded_map(lambda v: v + 1.0, mesh, jd.AXIS_NAME, 2)(xs),
                                  xs + 1.0)


@pytest.mark.parametrize("call,message", [
    (lambda m: shmap_vmap(abs, m, P("gpu")), r"out_specs missing"),
    (lambda m: shmap_vmap(abs, m, "gpu", out_specs=P("gpu")), r"mixes jaxtrainer's form"),
    (lambda m: shmap_vmap(abs, m, "gpu", P("gpu")), r"mixes jaxtrainer's form"),
    (lambda m: shmap_vmap(abs, m, axis_names="gpu", in_specs=P("gpu"), out_specs=P("gpu")),
     r"mixes jaxtrainer's form \(axis_names='gpu'\)"),
    (lambda m: shmap_vmap(abs, m, check_vma=False), r"in_specs and out_specs missing"),
    (lambda m: shmap_vmap(abs, None, P("gpu"), P("gpu")), r"mesh=None: EvoRL's form needs"),
    (lambda m: shmap_vmap(abs, m, P("gpu"), "gpu"), r"out_specs='gpu': expected a jax"),
    (lambda m: shmap_vmap(abs, m, P("gpu"), P("gpu"), auto=frozenset()),
     r"unexpected keyword argument\(s\) \['auto'\]"),
    (lambda m: shmap_vmap(abs, m, P("gpu"), P("gpu"), check_vma=True, check_rep=True),
     r"check_vma and check_rep"),
    (lambda m: shmap_map(abs, m, "gpu", 2, P()), r"5 positional arguments given, at most 4"),
    (lambda m: shmap_vmap(abs, m, 3), r"axis_names=3: expected a mesh axis name"),
])
def test_ambiguous_or_malformed_calls_show_both_forms(call, message):
    mesh = Mesh(jax.devices(), ("gpu",))
    with pytest.raises(ValueError, match=message) as err:
        call(mesh)
    text = str(err.value)
    assert "axis_names='devices'" in text and "mesh, in_specs, out_specs" in text


def test_tree_device_put_takes_a_device_or_sharding_as_evorl_does():
    mesh = Mesh(jax.devices(), ("gpu",))
    tree = {"pop": np.arange(8.0), "keys": jax.random.split(jax.random.key(0), 4)}
    on_one = tree_device_put(tree, jax.devices()[2])
    assert on_one["pop"].devices() == {jax.devices()[2]}
    sharded = tree_device_put(tree, NamedSharding(mesh, P("gpu")))
    assert [s.data.shape for s in sharded["pop"].addressable_shards] == [(2,)] * 4
    np.testing.assert_array_equal(jax.random.key_data(sharded["keys"]),
                                  jax.random.key_data(tree["keys"]))
    with pytest.raises(ValueError, match=r"axis_names='gpu' goes with a mesh"):
        tree_device_put(tree, NamedSharding(mesh, P()), "gpu")
    with pytest.warns(DeprecationWarning, match="shard_tree"), \
            pytest.raises(ValueError, match=r"mesh='gpu': expected a jax.sharding.Mesh"):
        tree_device_put(tree, "gpu")


# ------------------------------------------------------------ collectives and keys
def test_collectives_take_evorl_arguments():
    """``axis_name=None`` is no reduction (EvoRL's one-device case);
    ``axis_name=PMAP_AXIS_NAME`` reduces over the axis every strategy binds."""
    assert PMAP_AXIS_NAME == jd.AXIS_NAME
    x = jnp.arange(4.0)
    mesh = Mesh(jax.devices(), (PMAP_AXIS_NAME,))

    def body(v):
        return (jd.pmean(v, axis_name=PMAP_AXIS_NAME), jd.psum(v, axis_name=PMAP_AXIS_NAME),
                jd.pmax(v, axis_name=PMAP_AXIS_NAME), jd.pmin(v, axis_name=PMAP_AXIS_NAME),
                jd.psum(v, axis_name=None))

    mean, total, hi, lo, unreduced = jax.jit(jax.shard_map(
        body, mesh=mesh, in_specs=P(PMAP_AXIS_NAME), out_specs=P(PMAP_AXIS_NAME)))(x)
    np.testing.assert_array_equal(mean, np.full(4, 1.5))
    np.testing.assert_array_equal(total, np.full(4, 6.0))
    np.testing.assert_array_equal(hi, np.full(4, 3.0))
    np.testing.assert_array_equal(lo, np.zeros(4))
    np.testing.assert_array_equal(unreduced, x)
    with pytest.raises(ValueError, match=r"pmean: axis_name=0: expected a mesh axis name"):
        jd.pmean(x, 0)


def test_split_key_to_devices_takes_evorl_devices_argument():
    """``split_key_to_devices(key, devices)``: one key per device, row d placed
    on devices[d] and equal to what the Trainer's device d draws from."""
    devices = jax.devices()
    key = jax.random.key(3)
    keys = split_key_to_devices(key, devices)
    assert keys.shape == (4,)
    for shard in keys.addressable_shards:
        d = devices.index(shard.device)
        np.testing.assert_array_equal(jax.random.key_data(shard.data)[0],
                                      jax.random.key_data(jax.random.fold_in(key, d)))
    np.testing.assert_array_equal(jax.random.key_data(keys),
                                  jax.random.key_data(jd.device_keys(key, 4)))
    one = split_key_to_devices(key, devices[:1])  # EvoRL's one-device list
    assert one.shape == (1,) and one.devices() == {devices[0]}
    np.testing.assert_array_equal(jax.random.key_data(one)[0],
                                  jax.random.key_data(jax.random.fold_in(key, 0)))
    raw = split_key_to_devices(jax.random.PRNGKey(3), devices[:2])  # EvoRL's raw keys
    assert raw.shape == (2, 2) and raw.dtype == jnp.uint32
    with pytest.raises(ValueError, match=r"distinct jax.Device"):
        split_key_to_devices(key, [devices[0], devices[0]])
    with pytest.raises(ValueError, match=r"num_devices=0: expected a positive int"):
        jd.device_keys(key, 0)


# ------------------------------------------------------------ gradient synchronisation
NUM_SAMPLES = 8
X = jax.random.normal(jax.random.key(1), (NUM_SAMPLES, 3))
Y = X @ jnp.array([1.0, -2.0, 0.5]) + 0.3
LR = 0.05
FORMS = ("gradient_update", "agent_gradient_update", "loss_and_pgrad", "local_copy")
BOTH_FORMS = (r"gradient_update\(loss_fn, params, opt_state, optimizer, \*args",
              r"gradient_update\(loss_fn, optimizer, pmap_axis_name, has_aux=False\)")


@struct.dataclass
class AgentState:
    """An EvoRL-style agent state: ``params`` plus a field the loss reads but
    the optimizer leaves alone (``target_scale: float32[]``)."""
    params: dict
    target_scale: jax.Array


def loss_fn(params, sample_batch):
    """EvoRL's ``loss_fn(params, ...) -> (loss, aux)``: mean squared error of a
    linear model on ``sample_batch = (x: float32[n, 3], y: float32[n])``."""
    x, y = sample_batch
    err = x @ params["w"] + params["b"] - y
    return jnp.mean(err ** 2), {"abs_err": jnp.mean(jnp.abs(err))}


def agent_loss_fn(agent_state, sample_batch, key):
    """EvoRL's agent loss ``(agent_state, sample_batch, key) -> loss`` (the key
    is unused: the loss is deterministic)."""
    del key
    x, y = sample_batch
    p = agent_state.params
    return jnp.mean((x @ p["w"] + p["b"] - agent_state.target_scale * y) ** 2)


def device_rows():
    """This device's rows of the global batch: (x: float32[8 / D, 3], y: float32[8 / D])."""
    n = jd.local_size(NUM_SAMPLES, "num_samples")
    start = jd.axis_index() * n
    return (jax.lax.dynamic_slice_in_dim(X, start, n), jax.lax.dynamic_slice_in_dim(Y, start, n))


class EvoRLGradientStep(jt.Module):
    """EvoRL's gradient synchronisation written as a training_step: the loss and
    its gradient on this device's rows, the gradient ``pmean``-ed over
    ``PMAP_AXIS_NAME``, an optax update. Plain SGD, so a summed gradient would
    show in the step size.

    ``form`` picks how, each used as EvoRL code uses it:
    ``"gradient_update"``: ``gradient_update(loss_fn, optimizer, PMAP_AXIS_NAME,
    has_aux=True)`` built once, called as ``f(opt_state, params, batch)``;
    ``"agent_gradient_update"``: ``agent_gradient_update(loss_fn, optimizer,
    PMAP_AXIS_NAME)`` on an :class:`AgentState`, called as ``f(opt_state,
    agent_state, batch, key)``; ``"loss_and_pgrad"``: its ``(value, grads)`` and
    a hand-written optax update; ``"local_copy"``/``"raw"``: hand-written
    ``pmean(jax.value_and_grad(loss_fn)(params))``, with and without
    ``local_copy(params)``. Under ``jax.shard_map`` a gradient with respect to
    replicated parameters is already summed over devices (``jax.pmap``, which
    EvoRL uses, has no replicated values, so there it is this device's own);
    the helpers and ``local_copy`` make it this device's own.
    """

    def __init__(self, form: str = "gradient_update"):
        self.form = form
        self.optimizer = optax.sgd(LR)
        if form == "gradient_update":
            self.update = gradient_update(loss_fn, self.optimizer, PMAP_AXIS_NAME, has_aux=True)
        elif form == "agent_gradient_update":
            self.update = agent_gradient_update(agent_loss_fn, self.optimizer, PMAP_AXIS_NAME)
        elif form == "loss_and_pgrad":
            self.pgrad = loss_and_pgrad(loss_fn, PMAP_AXIS_NAME, has_aux=True)

    def validate(self, num_devices):
        jd.local_size(NUM_SAMPLES, "num_samples", num_devices)

    def init_state(self, key):
        params = {"w": jnp.zeros((3,)), "b": jnp.zeros(())}
        if self.form == "agent_gradient_update":
            return {"agent": AgentState(params, jnp.ones(())), "opt": self.optimizer.init(params)}
        return {"params": params, "opt": self.optimizer.init(params)}

    def training_step(self, state, key):
        batch = device_rows()
        if self.form == "gradient_update":
            (loss, _), params, opt = self.update(state["opt"], state["params"], batch)
            new = {"params": params, "opt": opt}
        elif self.form == "agent_gradient_update":
            loss, agent, opt = self.update(state["opt"], state["agent"], batch, key)
            new = {"agent": agent, "opt": opt}
        else:
            params = state["params"]
            if self.form == "loss_and_pgrad":
                (loss, _), grads = self.pgrad(params, batch)
            else:
                local = jd.local_copy(params) if self.form == "local_copy" else params
                (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(local, batch)
                grads = pmean(grads, axis_name=PMAP_AXIS_NAME)
            updates, opt = self.optimizer.update(grads, state["opt"], params)
            new = {"params": optax.apply_updates(params, updates), "opt": opt}
        # EvoRL's helpers return this device's loss, as EvoRL's do: pmean it
        return new, {"loss": pmean(loss, axis_name=PMAP_AXIS_NAME)}


def params_of(state):
    return state["agent"].params if "agent" in state else state["params"]


def fit(module, run_dir, strategy, steps):
    trainer = jt.Trainer(default_root_dir=run_dir, strategy=strategy, max_steps=steps,
                         log_every_n_steps=steps, **QUIET)
    trainer.fit(module)
    return trainer


@pytest.fixture(scope="module")
def single_device_run(tmp_path_factory):
    """The reference: 10 SGD steps on one device, on all 8 rows."""
    return fit(EvoRLGradientStep("local_copy"), tmp_path_factory.mktemp("single"), "single", 10)


@pytest.mark.parametrize("strategy", ["pmap", "shard_map"])
@pytest.mark.parametrize("form", FORMS)
def test_pmean_of_gradients_under_pmap_gives_bitwise_replicas_and_the_single_device_loss(
        run_dir, single_device_run, form, strategy):
    """EvoRL's helpers used unchanged inside training_step (and the hand-written
    pattern with ``local_copy``), on 4 devices with 2 rows each: every replica
    of every parameter is bitwise equal, and loss and parameters are the
    single-device ones (not 4 steps' worth: plain SGD would show a summed
    gradient)."""
    one = single_device_run
    four = fit(EvoRLGradientStep(form), run_dir, strategy, 10)
    leaves = jax.tree.leaves(four.state)
    assert leaves
    for leaf in leaves:
        replicas = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(replicas) == 4
        for r in replicas[1:]:
            np.testing.assert_array_equal(replicas[0], r)
    # it trained: from 4.19 (zero params) to 2.18 at step 10
    assert float(one.callback_metrics["loss"]) < 0.6 * float(jnp.mean(Y ** 2))
    np.testing.assert_allclose(float(four.callback_metrics["loss"]),
                               float(one.callback_metrics["loss"]), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(params_of(four.state)),
                    jax.tree.leaves(params_of(one.state)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    if form == "agent_gradient_update":  # the agent state's other field is kept
        assert isinstance(four.state["agent"], AgentState)
        np.testing.assert_array_equal(np.asarray(four.state["agent"].target_scale), 1.0)


def test_hand_written_pmean_of_gradients_is_the_average_over_devices(run_dir):
    """``pmean(jax.grad(loss)(params))`` written by hand, without ``local_copy``,
    takes the single-device step on 4 devices, as under ``jax.pmap``: each
    device's gradient is its own and ``pmean`` averages them."""
    one = fit(EvoRLGradientStep("local_copy"), run_dir, "single", 1)
    four = fit(EvoRLGradientStep("raw"), run_dir, "pmap", 1)
    np.testing.assert_allclose(np.asarray(four.state["params"]["w"]),
                               np.asarray(one.state["params"]["w"]), rtol=1e-5)


def data_parallel(fn, *args):
    """``fn(x_rows, y_rows, *args)`` in ``jax.shard_map`` over the 4 devices,
    each with 2 of the 8 rows; the other arguments and the outputs replicated."""
    mesh = Mesh(jax.devices(), (PMAP_AXIS_NAME,))
    spec = P(PMAP_AXIS_NAME)
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(spec, spec) + (P(),) * len(args),
                                 out_specs=P()))(X, Y, *args)


def test_evorl_form_steps_bitwise_as_jaxtrainers_form_on_four_devices():
    """One Adam step inside ``jax.shard_map`` over 4 devices: EvoRL's form and
    jaxtrainer's form give bitwise-equal params and optimizer state, and both
    the single-device step (up to float rounding of the averaging)."""
    optimizer = optax.adam(0.1)
    params = {"w": jnp.array([0.5, 0.1, -0.3]), "b": jnp.array(0.2)}
    opt_state = optimizer.init(params)
    evorl_step = gradient_update(loss_fn, optimizer, PMAP_AXIS_NAME, has_aux=True)

    def both(x, y, params, opt_state):
        (_, _), p1, o1 = evorl_step(opt_state, params, (x, y))
        p2, o2, _, _ = jd.averaged_update(lambda p, b: loss_fn(p, b), params, opt_state,
                                          optimizer, (x, y))
        return (p1, o1), (p2, o2)

    evorl, ours = data_parallel(both, params, opt_state)
    for a, b in zip(jax.tree.leaves(evorl), jax.tree.leaves(ours), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    _, single, _ = evorl_step(opt_state, params, (X, Y))  # outside shard_map: plain
    for a, b in zip(jax.tree.leaves(evorl[0]), jax.tree.leaves(single), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert float(jnp.abs(single["w"] - params["w"]).min()) > 0.09  # Adam moved each by ~lr


def test_loss_and_pgrad_value_is_this_devices_and_grads_the_global_mean():
    """As in EvoRL: ``value`` (loss, aux) is computed on the device's 2 rows and
    not averaged; ``grads`` is the gradient of the loss on all 8 rows."""
    params = {"w": jnp.array([0.5, 0.1, -0.3]), "b": jnp.array(0.2)}
    pgrad = loss_and_pgrad(loss_fn, PMAP_AXIS_NAME, has_aux=True)

    def per_device(x, y, params):
        (loss, aux), grads = pgrad(params, (x, y))
        assert aux["abs_err"].shape == ()
        return jd.psum(jnp.zeros(4).at[jd.axis_index()].set(loss)), grads  # [4], per device

    losses, grads = data_parallel(per_device, params)
    want_losses = [float(loss_fn(params, (X[i:i + 2], Y[i:i + 2]))[0]) for i in range(0, 8, 2)]
    np.testing.assert_allclose(np.asarray(losses), want_losses, rtol=1e-6)
    (_, _), want = jax.value_and_grad(loss_fn, has_aux=True)(params, (X, Y))
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


def test_helpers_run_under_jax_pmap_as_evorl_calls_them():
    """EvoRL's own setting: ``jax.pmap`` over 4 devices, 2 rows each, params
    broadcast (``in_axes=None``): the same averaged step on every device."""
    optimizer = optax.sgd(LR)
    params = {"w": jnp.zeros((3,)), "b": jnp.zeros(())}
    step = gradient_update(loss_fn, optimizer, PMAP_AXIS_NAME, has_aux=True)
    run = jax.pmap(lambda x, y, p, o: step(o, p, (x, y))[1], axis_name=PMAP_AXIS_NAME,
                   in_axes=(0, 0, None, None))
    new = run(X.reshape(4, 2, 3), Y.reshape(4, 2), params, optimizer.init(params))
    _, want, _ = step(optimizer.init(params), params, (X, Y))
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(want), strict=True):
        assert a.shape == (4, *b.shape)
        for d in range(4):
            np.testing.assert_allclose(np.asarray(a[d]), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_outside_a_mapped_axis_or_with_no_axis_the_helpers_are_plain_value_and_grad():
    """No device axis bound (eager code, ``jax.jit``) or ``pmap_axis_name=None``
    (EvoRL's one-device case): exactly ``jax.value_and_grad`` and one optax step."""
    optimizer = optax.sgd(LR)
    params = {"w": jnp.array([0.5, 0.1, -0.3]), "b": jnp.array(0.2)}
    opt_state = optimizer.init(params)
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, (X, Y))
    want = optax.apply_updates(params, optimizer.update(grads, opt_state)[0])
    for axis in (PMAP_AXIS_NAME, None):
        (l2, a2), g2 = loss_and_pgrad(loss_fn, axis, has_aux=True)(params, (X, Y))
        assert float(l2) == float(loss) and float(a2["abs_err"]) == float(aux["abs_err"])
        for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(grads), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        step = gradient_update(loss_fn, optimizer=optimizer, pmap_axis_name=axis, has_aux=True)
        for run in (step, jax.jit(step)):
            (l3, _), new, _ = run(opt_state, params, (X, Y))
            assert float(l3) == float(loss)
            for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(want), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # loss without aux (has_aux left at False): a scalar value
    value, _ = loss_and_pgrad(lambda p, b: loss_fn(p, b)[0], None)(params, (X, Y))
    assert value.shape == () and float(value) == float(loss)


def test_agent_gradient_update_attaches_params_to_dataclasses_dicts_or_custom_fields():
    """Default: ``agent_state.params`` / ``replace(params=...)`` (a dict's
    ``"params"`` entry); ``attach_fn``/``detach_fn`` for another field. Other
    fields are kept; the new params are one SGD step on the agent loss."""
    optimizer = optax.sgd(LR)
    params = {"w": jnp.array([0.5, 0.1, -0.3]), "b": jnp.array(0.2)}
    key = jax.random.key(0)
    scale = jnp.array(2.0)
    grads = jax.grad(agent_loss_fn)(AgentState(params, scale), (X, Y), key).params
    want = jax.tree.map(lambda p, g: p - LR * g, params, grads)

    step = agent_gradient_update(agent_loss_fn, optimizer, PMAP_AXIS_NAME)
    loss, agent, _ = step(optimizer.init(params), AgentState(params, scale), (X, Y), key)
    assert float(loss) == float(agent_loss_fn(AgentState(params, scale), (X, Y), key))
    assert isinstance(agent, AgentState) and float(agent.target_scale) == 2.0

    as_dict = agent_gradient_update(
        lambda s, b, k: agent_loss_fn(AgentState(s["params"], s["target_scale"]), b, k),
        optimizer, None)
    _, agent_dict, _ = as_dict(optimizer.init(params), {"params": params, "target_scale": scale},
                               (X, Y), key)
    assert set(agent_dict) == {"params", "target_scale"}

    custom = agent_gradient_update(
        lambda s, b, k: agent_loss_fn(AgentState(s["actor"], s["target_scale"]), b, k),
        optimizer, None, attach_fn=lambda s, p: {**s, "actor": p}, detach_fn=lambda s: s["actor"])
    _, agent_custom, _ = custom(optimizer.init(params), {"actor": params, "target_scale": scale},
                                (X, Y), key)
    for got in (agent.params, agent_dict["params"], agent_custom["actor"]):
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    with pytest.raises(ValueError, match=r"agent_state of type tuple has no params field"):
        step(optimizer.init(params), (params,), (X, Y), key)


@pytest.mark.parametrize("call,message", [
    (lambda o, p: gradient_update(loss_fn, p, o, pmap_axis_name=PMAP_AXIS_NAME),
     r"mixes jaxtrainer's form \(params \(dict\) as second argument\) with EvoRL's "
     r"\(pmap_axis_name=\)"),
    (lambda o, p: gradient_update(loss_fn, o, PMAP_AXIS_NAME, axis_name=PMAP_AXIS_NAME),
     r"mixes jaxtrainer's form \(axis_name=\) with EvoRL's \(an optimizer as second argument\)"),
    (lambda o, p: gradient_update(loss_fn, p, has_aux=True), r"mixes jaxtrainer's form"),
    (lambda o, p: gradient_update(loss_fn, o), r"pmap_axis_name missing"),
    (lambda o, p: gradient_update(loss_fn, o, PMAP_AXIS_NAME, pmap_axis_name=PMAP_AXIS_NAME),
     r"pmap_axis_name given twice"),
    (lambda o, p: gradient_update(loss_fn, o, 0), r"pmap_axis_name=0: expected a mesh axis"),
    (lambda o, p: gradient_update(loss_fn, o, None, "yes"), r"has_aux='yes': expected True"),
    (lambda o, p: gradient_update(loss_fn, o, None, False, 1), r"5 positional arguments given"),
    (lambda o, p: gradient_update(loss_fn, optimizer="sgd", pmap_axis_name=None),
     r"optimizer='sgd': expected an optax.GradientTransformation"),
    (lambda o, p: gradient_update(loss_fn, p), r"2 positional argument\(s\) given"),
    (lambda o, p: gradient_update(loss_fn, p, p, 3), r"optimizer=3: expected an optax"),
    (lambda o, p: gradient_update("loss", o, None), r"loss_fn='loss' is not callable"),
])
def test_gradient_update_calls_that_fit_neither_form_show_both(call, message):
    """Rejected when called, before anything is traced or compiled."""
    optimizer = optax.sgd(LR)
    params = {"w": jnp.zeros((3,))}
    with pytest.raises(ValueError, match=message) as err:
        call(optimizer, params)
    for form in BOTH_FORMS:
        assert re.search(form, str(err.value)), form


def test_helper_arguments_are_checked_when_built():
    optimizer = optax.sgd(LR)
    with pytest.raises(ValueError, match=r"loss_and_pgrad: pmap_axis_name=\['gpu', 1\]"):
        loss_and_pgrad(loss_fn, ["gpu", 1])
    with pytest.raises(ValueError, match=r"loss_and_pgrad has_aux=1: expected True or False"):
        loss_and_pgrad(loss_fn, None, 1)
    with pytest.raises(ValueError, match=r"agent_gradient_update: optimizer=None: expected"):
        agent_gradient_update(agent_loss_fn, None, None)
    with pytest.raises(ValueError, match=r"agent_gradient_update: detach_fn='params' is not"):
        agent_gradient_update(agent_loss_fn, optimizer, None, detach_fn="params")


def test_an_axis_name_that_is_not_bound_inside_shard_map_is_an_error_not_a_summed_gradient():
    """Inside ``shard_map`` over ``devices``, EvoRL's own axis-name string (or any
    unbound name) would leave the gradient summed over 4 devices and never
    averaged; it is a ValueError when traced (EvoRL's ``lax.pmean`` fails too)."""
    pgrad = loss_and_pgrad(loss_fn, "gpu", has_aux=True)
    with pytest.raises(ValueError, match=r"pmap_axis_name='gpu' is not bound here; the mapped "
                                         r"axes are \('devices',\)"):
        data_parallel(lambda x, y, p: pgrad(p, (x, y))[1], {"w": jnp.zeros(3), "b": jnp.zeros(())})


# ------------------------------------------------------------ processes
RANK_SCRIPT = """
import json, sys
import jax
import numpy as np
import jaxtrainer.distributed

core_only = "jaxtrainer.compat.evorl" not in sys.modules  # EvoRL's names load on first use
from jaxtrainer.distributed import (PMAP_AXIS_NAME, get_global_ranks, get_process_id,
                                    is_dist_initialized)

ranks = get_global_ranks()
out = {"process": jax.process_index(), "initialized": is_dist_initialized(),
       "process_id": get_process_id(), "core_only": core_only,
       "first": int(ranks[0]), "ranks": np.asarray(ranks).tolist(), "dtype": str(ranks.dtype),
       "on_local_devices": sorted(d.id for d in ranks.sharding.device_set)
       == sorted(d.id for d in jax.local_devices()),
       "axis": PMAP_AXIS_NAME}
with open(f"{sys.argv[1]}/rank{jax.process_index()}.json", "w") as f:
    json.dump(out, f)
"""


def test_process_helpers_in_one_process():
    assert is_dist_initialized() is False
    assert get_process_id() == jax.process_index() == 0
    ranks = get_global_ranks()
    assert ranks.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(ranks), np.arange(4))
    assert [s.device for s in ranks.addressable_shards] == jax.devices()


@pytest.mark.slow
@pytest.mark.timeout(HARD_TIMEOUT + 60)
def test_global_ranks_under_launch_with_two_processes_of_two_devices(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "JAXTRAINER_"))}
    env["XLA_FLAGS"] = xla_flags(2)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])  # this checkout
    cmd = [sys.executable, "-m", "jaxtrainer.commands._cli", "launch", "--nproc-per-node", "2",
           "--timeout", "20", "--grace", "2", str(script), str(tmp_path)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=HARD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["process"], r1["process"]) == (0, 1)
    assert (r0["first"], r1["first"]) == (0, 2)
    assert (r0["ranks"], r1["ranks"]) == ([0, 1], [2, 3])
    assert r0["initialized"] is r1["initialized"] is True
    assert r0["dtype"] == r1["dtype"] == "int32"
    assert r0["on_local_devices"] and r1["on_local_devices"]
    assert r0["axis"] == r1["axis"] == jd.AXIS_NAME
    assert (r0["process_id"], r1["process_id"]) == (0, 1)
    assert r0["core_only"] and r1["core_only"]


def test_evorls_documented_population_example_with_a_tuple_of_out_specs():
    """EvoRL's documentation passes out_specs as a one-element tuple for a function
    that returns one array; the call runs as written on 4 devices."""
    from jax.sharding import PartitionSpec

    mesh = Mesh(jax.devices(), ("gpu",))
    pop = tree_device_put(jnp.arange(4 * 10 * 3, dtype=jnp.float32).reshape(4, 10, 3),
                          NamedSharding(mesh, PartitionSpec("gpu",)))
    fitness = shmap_vmap(lambda x: x.sum(-1), mesh=mesh, in_specs=(PartitionSpec("gpu",),),
                         out_specs=(PartitionSpec("gpu",),), check_rep=False)(pop)
    assert fitness.shape == (4, 10)
    np.testing.assert_array_equal(np.asarray(fitness), np.asarray(pop).sum(-1))


# ------------------------------------------------------------ EvoRL's whole namespace
# What EvoRL's evorl/distributed defines, module by module (EMI-Group/evorl, read
# from its package): each name must be importable from the same path here.
EVORL_NAMES = {
    "": ["PMAP_AXIS_NAME", "POP_AXIS_NAME", "agent_gradient_update", "all_gather",
         "get_global_ranks", "get_process_id", "gradient_update", "is_dist_initialized", "pmax",
         "pmean", "pmin", "psum", "shmap_map", "shmap_vmap", "split_key_to_devices",
         "tree_device_put", "unpmap"],
    ".comm": ["all_gather", "get_global_ranks", "get_process_id", "is_dist_initialized", "pmax",
              "pmean", "pmin", "psum", "split_key_to_devices", "unpmap"],
    ".gradients": ["agent_gradient_update", "gradient_update", "loss_and_pgrad"],
    ".sharding": ["shmap_map", "shmap_vmap", "tree_device_put"],
}


def test_every_evorl_name_is_at_evorls_path_and_is_one_function():
    import importlib

    from jaxtrainer.compat import evorl

    for sub, names in EVORL_NAMES.items():
        module = importlib.import_module("jaxtrainer.distributed" + sub)
        for name in names:
            assert getattr(module, name) is getattr(evorl, name), (sub, name)
    assert jd.POP_AXIS_NAME == "POP"  # EvoRL's value
    assert jd.PMAP_AXIS_NAME == jd.AXIS_NAME
    assert set(EVORL_NAMES[""]) <= set(jd.__all__) and set(EVORL_NAMES[""]) <= set(dir(jd))
    with pytest.raises(AttributeError, match=r"has no attribute 'nope'"):
        jd.nope  # noqa: B018


def _pmap(fn, n):
    return jax.pmap(fn, axis_name=PMAP_AXIS_NAME, devices=jax.devices()[:n])


@pytest.mark.parametrize("n", [1, 4])
def test_unpmap_is_the_first_replica_of_a_pmap_output(n):
    """EvoRL's ``unpmap(tree, axis_name)`` after ``jax.pmap``: device 0's values
    (here its own row and the psum every device holds); ``None`` is the tree."""
    from jaxtrainer.distributed import unpmap

    xs = jnp.arange(n * 3.0).reshape(n, 3)
    out = _pmap(lambda x: {"own": x * 2.0, "sum": jax.lax.psum(x, PMAP_AXIS_NAME),
                           "step": jnp.int32(7)}, n)(xs)
    got = unpmap(out, PMAP_AXIS_NAME)
    np.testing.assert_array_equal(got["own"], np.arange(3.0) * 2.0)
    np.testing.assert_array_equal(got["sum"], np.asarray(xs).sum(0))
    assert got["step"].shape == () and int(got["step"]) == 7
    assert unpmap(out, None) is out
    with pytest.raises(ValueError, match=r"unpmap: a leaf of shape \(\)"):
        unpmap({"s": jnp.zeros(())}, PMAP_AXIS_NAME)
    with pytest.raises(ValueError, match=r"unpmap: axis_name=3: expected"):
        unpmap(out, 3)


@pytest.mark.parametrize("n", [1, 4])
def test_all_gather_is_lax_all_gather_under_pmap_and_shard_map(n):
    """EvoRL's ``all_gather(x, axis_name, axis=0, tiled=True)`` (its EC workflow's
    call) and the other keywords equal ``jax.lax.all_gather`` written by hand."""
    from jaxtrainer.distributed import all_gather

    xs = jnp.arange(n * 2 * 3.0).reshape(n, 2, 3)
    forms = ({}, {"axis": 1}, {"axis": 0, "tiled": True})

    def both(x):
        return ([all_gather(x, PMAP_AXIS_NAME, **kw) for kw in forms],
                [jax.lax.all_gather(x, PMAP_AXIS_NAME, **kw) for kw in forms])

    mesh = Mesh(jax.devices()[:n], (PMAP_AXIS_NAME,))
    shard_mapped = jax.jit(jax.shard_map(lambda x: both(x[0]), mesh=mesh, in_specs=P(PMAP_AXIS_NAME),
                                         out_specs=P(PMAP_AXIS_NAME)))
    for ours, theirs in (_pmap(both, n)(xs), shard_mapped(xs)):
        for a, b in zip(ours, theirs, strict=True):
            assert a.shape == b.shape
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # one device without a mapped axis: the shapes one device gets inside jax.pmap
    x = xs[0]
    assert all_gather(x, None) is x
    np.testing.assert_array_equal(all_gather(x, PMAP_AXIS_NAME), x[None])
    assert all_gather(x, PMAP_AXIS_NAME, axis=1).shape == (2, 1, 3)
    assert all_gather(x, PMAP_AXIS_NAME, tiled=True) is x
    with pytest.raises(ValueError, match=r"unexpected keyword argument\(s\) \['axes'\]"):
        all_gather(x, PMAP_AXIS_NAME, axes=0)

    def hidden(v):  # one population member's code: the axis counts as one device
        with jd.member_scope(PMAP_AXIS_NAME):
            return all_gather(v, PMAP_AXIS_NAME)

    np.testing.assert_array_equal(_pmap(hidden, n)(xs), np.asarray(xs)[:, None])


@pytest.mark.parametrize("n", [1, 4])
def test_evorl_keyword_forms_under_jax_pmap_match_a_hand_written_pmean(n):
    """As EvoRL's algorithms call them (``from ...distributed.gradients import``):
    ``gradient_update(loss, optimizer, pmap_axis_name=..., has_aux=True)`` and
    ``agent_gradient_update(loss, optimizer, pmap_axis_name=..., has_aux=True,
    attach_fn=..., detach_fn=...)`` on ``n`` devices equal one SGD step on
    ``pmean(grad)`` written by hand in the same ``jax.pmap``."""
    from jaxtrainer.distributed.gradients import agent_gradient_update, gradient_update

    optimizer = optax.sgd(LR)
    params = {"w": jnp.array([0.5, 0.1, -0.3]), "b": jnp.array(0.2)}
    opt_state = optimizer.init(params)
    step = gradient_update(loss_fn, optimizer, pmap_axis_name=PMAP_AXIS_NAME, has_aux=True)
    agent_step = agent_gradient_update(
        lambda s, batch, key: loss_fn(s["actor"], batch), optimizer,
        pmap_axis_name=PMAP_AXIS_NAME, has_aux=True,
        attach_fn=lambda s, p: {**s, "actor": p}, detach_fn=lambda s: s["actor"])

    def body(x, y):
        grads = jax.lax.pmean(jax.grad(lambda p: loss_fn(p, (x, y))[0])(params), PMAP_AXIS_NAME)
        by_hand = jax.tree.map(lambda p, g: p - LR * g, params, grads)
        _, new, _ = step(opt_state, params, (x, y))
        _, agent, _ = agent_step(opt_state, {"actor": params, "other": 1.0}, (x, y),
                                 jax.random.key(0))
        return by_hand, new, agent["actor"]

    rows = NUM_SAMPLES // n
    by_hand, new, agent = _pmap(body, n)(X.reshape(n, rows, 3), Y.reshape(n, rows))
    for a, b, c in zip(*(jax.tree.leaves(t) for t in (by_hand, new, agent)), strict=True):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
        np.testing.assert_array_equal(np.asarray(c), np.asarray(a))
