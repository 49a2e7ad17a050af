"""Population-based training (issue 7): exploit, explore, padding, layout independence."""

from __future__ import annotations

import csv
import pathlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import jaxtrainer as jt
import jaxtrainer.distributed as jd
from jaxtrainer.algorithms import PPO
from jaxtrainer.population import PBT, Hyperparam

W_TRUE = jnp.array([1.0, -2.0, 0.5])


class Regression(jt.Module):
    """A data-parallel module (local_size, fold_in_device, averaged_update's pmean)
    with its learning rate in ``state["hyperparams"]``; fitness ``score = -loss``."""

    env_steps_per_step = 8

    def __init__(self, batch_size: int = 8) -> None:
        self.batch_size = batch_size
        self.optimizer = optax.inject_hyperparams(optax.adam)(learning_rate=0.1)

    def init_state(self, key):
        params = {"w": jax.random.normal(key, (3,))}
        return {"params": params, "opt_state": self.optimizer.init(params),
                "noise_key": jd.fold_in_device(key), "step": jnp.zeros((), jnp.int32),
                "hyperparams": {"lr": jnp.float32(0.05), "noise": jnp.float32(0.0)}}

    def training_step(self, state, key):
        n = jd.local_size(self.batch_size, "batch_size")
        x = jax.random.normal(key, (n, 3))
        noise_key, sub = jax.random.split(state["noise_key"])
        y = x @ W_TRUE + state["hyperparams"]["noise"] * jax.random.normal(sub, (n,))

        def loss_fn(p, x, y):
            return jnp.mean((x @ p["w"] - y) ** 2), None

        opt_state = state["opt_state"]._replace(hyperparams={
            **state["opt_state"].hyperparams, "learning_rate": state["hyperparams"]["lr"]})
        params, opt_state, loss, _ = jd.averaged_update(loss_fn, state["params"], opt_state,
                                                        self.optimizer, x, y)
        new = {**state, "params": params, "opt_state": opt_state, "noise_key": noise_key,
               "step": state["step"] + 1}
        return new, {"score": -loss, "loss": loss}

    def evaluation_step(self, state, key):
        return {"eval/distance": jnp.sum((state["params"]["w"] - W_TRUE) ** 2)}


def pbt(size=4, ready=3, **kw):
    kw.setdefault("hyperparams", {"lr": (1e-3, 0.3)})
    kw.setdefault("fitness_metric", "score")
    kw.setdefault("member_metrics", ("score",))
    return PBT(Regression(), population_size=size, ready_every_n_steps=ready, **kw)


def fit(module, run_dir, steps, devices=4, log=None, callbacks=()):
    trainer = jt.Trainer(strategy="pmap" if devices > 1 else "single", devices=devices,
                         max_steps=steps, log_every_n_steps=log or steps, seed=3,
                         default_root_dir=run_dir, enable_progress_bar=False, logger=False,
                         enable_checkpointing=False, callbacks=list(callbacks),
                         compile_evaluation_ahead=False)
    trainer.fit(module)
    return trainer, jax.device_get(trainer.state)


class Record(jt.Callback):
    def __init__(self):
        self.metrics = []

    def on_train_steps_end(self, trainer, module, metrics):
        self.metrics.append(dict(metrics))


def test_member_scope_makes_collectives_local():
    mesh = jax.make_mesh((4,), (jd.AXIS_NAME,), axis_types=(jax.sharding.AxisType.Explicit,))

    def body(x):
        outside = jd.pmean(x)
        with jd.member_scope():
            inside = jd.pmean(x)
            size = jd.axis_size()
            index = jd.axis_index()
            local = jd.local_size(8)
        return outside, inside, jnp.full((1,), size * 100 + index * 10 + local)

    x = jax.device_put(jnp.arange(4.0), jax.sharding.NamedSharding(mesh, P(jd.AXIS_NAME)))
    outside, inside, info = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(jd.AXIS_NAME),
                                                  out_specs=P(jd.AXIS_NAME)))(x)
    np.testing.assert_array_equal(outside, np.full(4, 1.5))
    np.testing.assert_array_equal(inside, np.arange(4.0))  # each device keeps its own member
    np.testing.assert_array_equal(info, np.full(4, 100 + 0 + 8))


@pytest.mark.slow
def test_exploit_copies_the_whole_member_state_across_devices(run_dir):
    """4 members on 4 devices: every copy crosses devices. Compare the state right
    after the first ready step with the same run without exploit (identical keys)."""
    ready = 4
    _, before = fit(pbt(ready=10**6), run_dir / "a", ready)
    trainer, after = fit(pbt(ready=ready, resample_probability=0.0), run_dir / "b", ready)
    fitness = before.window_total / before.window_count
    order = np.argsort(fitness, kind="stable")
    loser, best = order[0], order[-1]  # truncation 0.25 of 4 members: one copy
    assert after.parent[loser] == best and after.exploits == 1
    np.testing.assert_array_equal(after.parent[order[1:]], order[1:])
    b_leaves = jax.tree_util.tree_leaves_with_path(before.members)
    a_leaves = jax.tree_util.tree_leaves(after.members)
    for (path, b), a in zip(b_leaves, a_leaves, strict=True):
        b, a = _data(b), _data(a)
        name = jax.tree_util.keystr(path)
        if name == "['hyperparams']['lr']":
            continue
        # weights, optimizer state (moments, count, inner lr), keys, counters
        np.testing.assert_array_equal(a[loser], b[best], err_msg=name)
        np.testing.assert_array_equal(a[order[1:]], b[order[1:]], err_msg=name)
    lr_b, lr_a = before.members["hyperparams"]["lr"], after.members["hyperparams"]["lr"]
    np.testing.assert_array_equal(lr_a[order[1:]], lr_b[order[1:]])
    # the winner's learning rate times 0.8 or 1.2, clipped to the space
    candidates = [np.clip(np.float32(lr_b[best]) * np.float32(f), 1e-3, 0.3) for f in (0.8, 1.2)]
    assert any(np.isclose(lr_a[loser], c, rtol=1e-6) for c in candidates), (lr_a, lr_b)
    np.testing.assert_array_equal(after.fitness[loser], fitness[best])
    assert trainer.global_step == ready


def _data(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def test_explore_keeps_hyperparameters_in_their_bounds():
    spaces = {"lr": Hyperparam(1e-4, 1e-2), "clip": (0.1, 0.3), "ent": (0.0, 0.05)}
    module = PBT(Regression(), {"lr": spaces["lr"]}, population_size=4)
    module.spaces = {n: Hyperparam.of(s) for n, s in spaces.items()}
    for explore in ("perturb", "resample"):
        module.explore = explore
        start = {"lr": jnp.float32(1e-2), "clip": jnp.float32(0.1), "ent": jnp.float32(0.05)}
        keys = jax.random.split(jax.random.key(0), 2000)
        out = jax.jit(jax.vmap(lambda k, s=start: module.explore_hyperparams(s, k)))(keys)
        for name, space in module.spaces.items():
            values = np.asarray(out[name])
            assert values.min() >= space.low and values.max() <= space.high, (explore, name)
        if explore == "perturb":  # at the upper bound x1.2 is clipped, x0.8 moves down
            lr = np.asarray(out["lr"])
            assert np.isclose(lr, 1e-2).mean() > 0.3 and np.isclose(lr, 8e-3).mean() > 0.3
    prior = jax.vmap(Hyperparam(1e-4, 1e-2).sample)(jax.random.split(jax.random.key(1), 4000))
    logs = np.log10(np.asarray(prior))
    assert -4 <= logs.min() and logs.max() <= -2 and abs(np.median(logs) + 3) < 0.1  # log-uniform


@pytest.mark.slow
def test_padding_members_are_never_ranked_copied_or_logged(run_dir):
    """6 members on 4 devices: 2 padding members (ids 6, 7)."""
    record = Record()
    trainer, state = fit(pbt(size=6, ready=2), run_dir, 8, log=1,
                         callbacks=[jt.LearningRateMonitor(), record])
    assert state.parent.shape == (8,)
    np.testing.assert_array_equal(state.parent[6:], [6, 7])
    assert (state.parent[:6] < 6).all() and state.exploits == 4  # int(0.25 * 6) = 1 per round
    assert trainer.env_steps == 8 * 6 * 8  # real members only
    last = record.metrics[-1]
    members = {k.split("/")[1] for k in last if k.startswith("member/")}
    assert members == {str(i) for i in range(6)}
    # aggregated metrics average the 6 real members only
    np.testing.assert_allclose(
        last["fitness/max"], max(last[f"member/{i}/fitness"] for i in range(6)), rtol=1e-6)
    np.testing.assert_allclose(
        last["fitness/mean"], np.mean([last[f"member/{i}/fitness"] for i in range(6)]),
        rtol=1e-5)
    np.testing.assert_allclose(
        last["score"], np.mean([last[f"member/{i}/score"] for i in range(6)]), rtol=1e-5)
    # each real member's learning rate (of its last update), and the population's
    lrs = np.asarray(state.members["opt_state"].hyperparams["learning_rate"], np.float64)[:6]
    assert [last[f"lr/member/{i}/learning_rate"] for i in range(6)] == lrs.tolist()
    assert len(set(lrs.tolist())) > 1 and "lr/member/6/learning_rate" not in last
    assert (last["lr/learning_rate"], last["lr/learning_rate_min"], last["lr/learning_rate_max"]) \
        == (lrs.mean(), lrs.min(), lrs.max())


@pytest.mark.slow
def test_same_population_on_1_and_4_devices(run_dir):
    """Member i's keys depend on (seed, step, i) only: bitwise equal states."""
    states = [fit(pbt(size=6, ready=2), run_dir / str(n), 6, devices=n)[1] for n in (1, 4)]
    for other in states[1:]:
        for a, b in zip(jax.tree.leaves(states[0]), jax.tree.leaves(other), strict=True):
            a, b = _data(a), _data(b)
            if a.ndim and a.shape[0] in (6, 8):
                a, b = a[:6], b[:6]
            np.testing.assert_array_equal(a, b)


class CountCompiles(jt.Callback):
    """Backend compiles of the main thread between on_train_start and
    on_train_end (the evaluation program compiles meanwhile in the Trainer's
    background thread, by design)."""

    def __init__(self):
        self.events, self.counting = [], False
        jax.monitoring.register_event_duration_secs_listener(self.listen)

    def listen(self, event, seconds, **kwargs):
        if self.counting and event == "/jax/core/compile/backend_compile_duration" \
                and threading.current_thread() is threading.main_thread():
            self.events.append(event)

    def on_train_start(self, trainer, module):
        self.counting = True

    def on_train_end(self, trainer, module):
        self.counting = False


@pytest.mark.slow
def test_pbt_ppo_tunes_lr_without_recompiling(run_dir):
    """Tiny PPO members: logged learning rates move within their space,
    per-member columns in metrics.csv, and 6 exploit rounds in 3 intervals
    compile nothing after the first step."""
    ppo = PPO(num_envs=2, num_steps=16, update_epochs=1, num_minibatches=1, anneal_lr=False,
              eval_episodes=2)
    module = PBT(ppo, {"lr": (1e-4, 1e-2)}, population_size=4, ready_every_n_steps=2)
    compiles = CountCompiles()
    trainer = jt.Trainer(strategy="pmap", max_steps=12, log_every_n_steps=4,
                         default_root_dir=run_dir, enable_progress_bar=False,
                         enable_checkpointing=False, callbacks=[compiles],
                         compile_evaluation_ahead=False)
    trainer.fit(module)
    rows = list(csv.DictReader(open(pathlib.Path(trainer.log_dir) / "metrics.csv")))
    lrs = [[float(r[f"member/{i}/lr"]) for i in range(4)] for r in rows if r.get("member/0/lr")]
    assert len(lrs) == 3 and lrs[0] != lrs[-1]
    assert all(1e-4 <= v <= 1e-2 for row in lrs for v in row)
    assert int(trainer.state.exploits) == 6  # one copy per ready step
    exploits = [float(r["pbt/exploits"]) for r in rows if r.get("pbt/exploits")]
    assert exploits == sorted(exploits) and 0 < exploits[-1] <= 6
    assert compiles.events == []


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["pmap", "shard_map"])
def test_a_live_sharded_state_gives_the_params_of_its_host_copy(run_dir, strategy):
    """The state ``fit`` leaves (members sharded over 4 devices) gives each
    member's params and policy as its ``device_get`` copy does (it raised
    ShardingTypeError: a member's slice of a sharded axis)."""
    from jaxtrainer.policy import Policy, params_of

    ppo = PPO(num_envs=2, num_steps=16, update_epochs=1, num_minibatches=1, anneal_lr=False,
              eval_episodes=2)
    module = PBT(ppo, {"lr": (1e-4, 1e-2)}, population_size=4, ready_every_n_steps=2)
    trainer = jt.Trainer(strategy=strategy, max_steps=2, log_every_n_steps=2,
                         default_root_dir=run_dir, enable_progress_bar=False, logger=False,
                         enable_checkpointing=False, compile_evaluation_ahead=False)
    trainer.fit(module)
    live = trainer.state
    # one member per device: the members' axis of every weight is sharded
    assert all(x.sharding.spec[0] == jd.AXIS_NAME for x in jax.tree.leaves(live.members.params))
    host = jax.device_get(live)
    obs = np.linspace(-0.2, 0.2, 3 * 4, dtype=np.float32).reshape(3, 4)
    for member in (None, 0, 1, 2, 3):
        spec, got = params_of(module, live, member)
        _, want = params_of(module, host, member)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(Policy(spec, got)(obs), Policy(spec, want)(obs))
        np.testing.assert_array_equal(module.policy(live, member)(obs),
                                      module.policy(host, member)(obs))


@pytest.mark.parametrize("kwargs,match", [
    ({"hyperparams": {"learning_rate": (1e-4, 1e-2)}}, r"\['learning_rate'\].*choose from \['lr', 'noise'\]"),
    ({"fitness_metric": "return"}, r"'return' is not a training metric.*\['loss', 'score'\]"),
    ({"size": 1}, r"population_size=1"),
    ({"exploit": "tournament"}, r"exploit='tournament'.*truncation"),
    ({"explore": "mutate"}, r"explore='mutate'.*perturb"),
    ({"hyperparams": {"lr": (0.3, 0.1)}}, r"low=0.3, high=0.1"),
    ({"hyperparams": {"lr": (0.0, 0.1, 5)}}, r"expected \(low, high\)"),
    ({"truncation_fraction": 0.8}, r"truncation_fraction=0.8"),
])
def test_bad_input_is_a_clear_error_before_compiling(run_dir, kwargs, match):
    with pytest.raises(ValueError, match=match):
        module = pbt(**kwargs)
        fit(module, run_dir, 2)
    assert not list(run_dir.glob("**/checkpoints/*"))


def test_a_module_without_hyperparams_is_rejected(run_dir):
    from tests._support.toys import Regression as Plain  # noqa: PLC0415

    with pytest.raises(ValueError, match="no `hyperparams` dict"):
        fit(PBT(Plain(), {"lr": (1e-3, 1e-1)}, population_size=4), run_dir, 2)
