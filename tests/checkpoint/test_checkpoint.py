"""ModelCheckpoint and checkpoint files: one logical copy restoring on any device count,
typed keys, saves that later donating steps cannot corrupt, and a checkpoint at step N
that records step N's metrics, evaluation included."""

import dataclasses
import functools
import json
import os
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import checkpoint as ckpt
from tests._support import toys


def _steps(directory):
    return sorted(int(p) for p in os.listdir(directory) if p.isdigit())


class Snapshot(jt.Callback):
    """Host copies of the state at given steps (taken before ModelCheckpoint saves)."""

    def __init__(self, steps):
        self.steps, self.copies, self.deleted = set(steps), {}, {}

    def on_train_steps_end(self, trainer, module, metrics):
        if hasattr(self, "_live"):  # did the interval that just ran donate the buffers?
            self.deleted[trainer.global_step] = all(x.is_deleted() for x in self._live)
        self._live = jax.tree.leaves(trainer.peek_state())  # not the copy hooks get from .state
        if trainer.global_step in self.steps:
            self.copies[trainer.global_step] = toys.leaves(trainer.state)


def _restore(trainer_, module, path):
    trainer_._module = module
    trainer_.strategy.setup()
    trainer_.restore_checkpoint(module, path)
    return toys.leaves(trainer_.state)


@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 2)])
def test_async_save_is_not_corrupted_by_later_donating_steps(run_dir, strategy, devices):
    snap = Snapshot({2, 4})
    mc = jt.ModelCheckpoint(every_n_steps=2, async_save=True)
    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=7,
                     callbacks=[mc, snap], logger=False)
    module = toys.Regression(big=2_000_000)  # 8 MB buffer, still being written while training goes on
    t.fit(module)
    # Training donates its state buffers (while a save still reads them the
    # runtime may copy instead; either way the checkpoint must be intact).
    assert any(snap.deleted.values()), snap.deleted
    assert _steps(mc.dirpath) == [2, 4, 6, 7]
    for step in (2, 4):
        got = _restore(toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=7), module,
                       os.path.join(mc.dirpath, str(step)))
        want = snap.copies[step]
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(a, b)
        assert float(got["big"][0]) == step


def test_pmap_checkpoint_holds_one_logical_copy_and_restores_on_one_device(run_dir):
    t = toys.trainer(run_dir, strategy="pmap", devices=2, max_steps=3)
    t.fit(toys.Regression(per_device=False))
    path = ckpt.find_last(run_dir)
    meta = ckpt.read_meta(path)
    assert meta["num_devices"] == 2 and meta["global_step"] == 3 and meta["env_steps"] == 24
    got = _restore(toys.trainer(run_dir, strategy="single", devices=1, max_steps=3),
                   toys.Regression(per_device=False), path)
    want = toys.leaves(t.state)
    assert got["params"]["w"].shape == (3,)  # not (2, 3): no per-device replicas
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(a, b)


def test_checkpoint_files_are_arrays_and_json_only(run_dir):
    t = toys.trainer(run_dir, max_steps=2, callbacks=[jt.ModelCheckpoint(async_save=False)])
    t.fit(toys.Regression())
    path = ckpt.find_last(run_dir)
    names = [os.path.join(d, f) for d, _, files in os.walk(path) for f in files]
    assert names
    for name in names:
        with open(name, "rb") as f:
            data = f.read()
        assert not name.endswith((".pkl", ".pickle"))
        # pickle streams start with the PROTO opcode 0x80 and a protocol byte
        assert not (data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")), name
        assert b"cloudpickle" not in data and b"__reduce__" not in data
    with open(os.path.join(path, "meta", "metadata")) as f:
        meta = json.load(f)  # plain JSON
    assert meta["global_step"] == 2 and "key_impls" in meta
    # the array item is a tensorstore/OCDBT array store: restoring reads arrays, runs no code
    assert os.path.isdir(os.path.join(path, "state"))


def test_every_n_steps_top_k_by_monitor_keeps_best_and_newest(run_dir):
    mc = jt.ModelCheckpoint(every_n_steps=1, monitor="neg_step", mode="min", save_top_k=2,
                            async_save=False)

    class NegStep(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            metrics["neg_step"] = {1: 5.0, 2: 1.0, 3: 3.0, 4: 2.0, 5: 9.0}[trainer.global_step]

    t = toys.trainer(run_dir, max_steps=5, callbacks=[NegStep(), mc])
    t.fit(toys.Regression())
    assert _steps(mc.dirpath) == [2, 4, 5]  # best two (1.0, 2.0) and the newest
    assert mc.best_model_score == 1.0 and mc.best_model_path.endswith("/2")
    assert ckpt.find_last(run_dir).name == "5"


def test_top_k_without_monitor_keeps_newest(run_dir):
    mc = jt.ModelCheckpoint(every_n_steps=2, save_top_k=2, async_save=False)
    toys.trainer(run_dir, max_steps=9, callbacks=[mc]).fit(toys.Regression())
    assert _steps(mc.dirpath) == [8, 9]


@pytest.mark.slow
def test_every_n_seconds_saves_by_wall_time(run_dir):
    class Slow(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            time.sleep(0.3)

    mc = jt.ModelCheckpoint(every_n_seconds=0.5, save_last=False, async_save=False)
    toys.trainer(run_dir, max_steps=6, callbacks=[Slow(), mc]).fit(toys.Regression())
    saved = _steps(mc.dirpath)
    assert 2 <= len(saved) <= 3 and saved[0] == 2


def test_monitor_without_mode_warns():
    with pytest.warns(UserWarning, match="no mode"):
        mc = jt.ModelCheckpoint(monitor="eval/episode_return")
    assert mc.mode == "max"
    with pytest.raises(ValueError, match="save_top_k"):
        jt.ModelCheckpoint(save_top_k=0)
    with pytest.raises(ValueError, match="every_n_steps"):
        jt.ModelCheckpoint(every_n_steps=0)


def test_checkpoint_at_step_n_records_metrics_of_step_n_including_eval(run_dir):
    """Eval runs before on_train_steps_end; the checkpoint sees step N's values."""
    mc = jt.ModelCheckpoint(every_n_steps=2, monitor="eval/mse", mode="min", async_save=False)
    seen = {}

    class Record(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            seen[trainer.global_step] = (metrics["loss"], trainer.callback_metrics["eval/mse"])

    t = toys.trainer(run_dir, max_steps=6, log_every_n_steps=2, eval_every_n_steps=2,
                     callbacks=[mc, Record()])
    t.fit(toys.Regression())
    for step in (2, 4, 6):
        stored = ckpt.read_meta(os.path.join(mc.dirpath, str(step)))
        scores = stored["callbacks"][mc.state_key]["scores"]
        assert scores[str(step)] == seen[step][1]
    assert mc.best_model_score == min(v[1] for v in seen.values())


@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 4)])
def test_the_final_save_after_the_last_evaluation_is_not_ranked(run_dir, strategy, devices):
    """eval/mse was measured at step 2, not 3: step 3 (save_last) must not tie
    the best with step 2's value and delete it."""
    mc = jt.ModelCheckpoint(monitor="eval/mse", mode="min", save_top_k=1, every_n_steps=2,
                            async_save=False)
    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=3,
                     eval_every_n_steps=2, callbacks=[mc])
    t.fit(toys.Regression())
    assert _steps(mc.dirpath) == [2, 3]  # the best and the newest
    assert mc.best_model_path == os.path.join(mc.dirpath, "2")
    assert ckpt.resolve(t.log_dir, "best") == Path(mc.dirpath) / "2"
    scores = ckpt.read_meta(Path(mc.dirpath) / "3")["callbacks"][mc.state_key]["scores"]
    assert scores == {"2": mc.best_model_score, "3": None}


def test_saves_of_intervals_without_samples_are_not_ranked(run_dir):
    """Episodes end at steps 4 and 7 only; steps 5 and 6 log no return, and an
    equal return later (step 7) keeps the older best."""
    mc = jt.ModelCheckpoint(monitor="train/episode_return", mode="max", save_top_k=1,
                            every_n_steps=1, async_save=False)
    t = toys.trainer(run_dir, max_steps=7, callbacks=[mc])
    t.fit(toys.EnvCounter())
    assert _steps(mc.dirpath) == [4, 7]
    assert (mc.best_model_path, mc.best_model_score) == (os.path.join(mc.dirpath, "4"), 10.0)
    assert ckpt.resolve(t.log_dir, "best") == Path(mc.dirpath) / "4"


def _periodic_and_best(best_dir, every_n_steps=2):
    """The README's pattern: a periodic ModelCheckpoint and a best-k one (by ``score``)."""
    return [jt.ModelCheckpoint(every_n_steps=2, async_save=False),
            jt.ModelCheckpoint(dirpath=best_dir, monitor="score", mode="min", save_top_k=1,
                               every_n_steps=every_n_steps, async_save=False)]


@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 4)])
def test_the_best_checkpoint_survives_a_resume_from_the_periodic_one(
        run_dir, tmp_path, strategy, devices):
    """Step 4 is the best; the resume (from the periodic checkpoint of step 4)
    must still rank it, so step 6 (worse) does not replace it."""
    scores = toys.Scores({2: 5.0, 4: 1.0, 6: 3.0})
    best_dir = tmp_path / "best"
    toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=4,
                 callbacks=[scores, *_periodic_and_best(best_dir)]).fit(toys.Regression())
    resumed = _periodic_and_best(best_dir)
    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=6,
                     callbacks=[scores, *resumed])
    t.fit(toys.Regression(), ckpt_path="last")
    assert _steps(best_dir) == [4, 6]
    assert (resumed[1].best_model_path, resumed[1].best_model_score) == (
        os.fspath(best_dir / "4"), 1.0)
    assert ckpt.resolve(best_dir, "best") == best_dir / "4"
    assert ckpt.resolve(t.log_dir, "best") == best_dir / "4"


def test_a_resume_with_another_every_n_steps_keeps_the_ranking(run_dir, tmp_path):
    scores = toys.Scores({2: 1.0, 4: 5.0, 5: 4.0, 6: 3.0})
    best_dir = tmp_path / "best"
    toys.trainer(run_dir, max_steps=4, callbacks=[scores, *_periodic_and_best(best_dir)]).fit(
        toys.Regression())
    assert _steps(best_dir) == [2, 4]
    resumed = _periodic_and_best(best_dir, every_n_steps=1)
    toys.trainer(run_dir, max_steps=6, callbacks=[scores, *resumed]).fit(
        toys.Regression(), ckpt_path="last")
    assert _steps(best_dir) == [2, 6]
    assert resumed[1].best_model_path == os.fspath(best_dir / "2")


def test_save_on_exception_saves_the_last_state(run_dir):
    class Boom(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            if trainer.global_step == 3:
                raise RuntimeError("boom")

    mc = jt.ModelCheckpoint(save_on_exception=True)
    with pytest.raises(RuntimeError, match="boom"):
        toys.trainer(run_dir, max_steps=9, callbacks=[Boom(), mc]).fit(toys.Regression())
    assert _steps(mc.dirpath) == [3]
    assert ckpt.read_meta(ckpt.find_last(run_dir))["global_step"] == 3


def test_checkpoint_of_device_arrays_from_earlier_versions_restores(tmp_path):
    """Checkpoints written before saves went through host copies (orbax's default
    manager, global jax.Arrays with their 2-device sharding) restore on 1 device."""
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((2,), ("devices",), devices=jax.devices()[:2])
    state = {"module": {"rows": jax.device_put(np.arange(8.0, dtype=np.float32).reshape(4, 2),
                                               NamedSharding(mesh, PartitionSpec("devices"))),
                        "w": jax.device_put(np.float32([1.5, -2.0]), NamedSharding(mesh, PartitionSpec()))},
             "rng": jax.device_put(jax.random.key(3), NamedSharding(mesh, PartitionSpec()))}
    encoded, impls = ckpt.encode_keys(state)
    with ocp.CheckpointManager(tmp_path, options=ocp.CheckpointManagerOptions(create=True)) as mgr:
        mgr.save(3, args=ocp.args.Composite(state=ocp.args.StandardSave(encoded),
                                            meta=ocp.args.JsonSave({"key_impls": impls})))
    assert os.path.exists(tmp_path / "3/state/_sharding")  # device arrays, not host copies
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), state)
    got, meta = ckpt.restore(tmp_path / "3", abstract)
    assert meta["key_impls"] == impls and got["module"]["rows"].sharding == one
    np.testing.assert_array_equal(got["module"]["rows"], np.arange(8.0).reshape(4, 2))
    np.testing.assert_array_equal(got["module"]["w"], [1.5, -2.0])
    np.testing.assert_array_equal(jax.random.key_data(got["rng"]), jax.random.key_data(jax.random.key(3)))


def test_resuming_with_another_config_names_the_arrays_that_differ(run_dir):
    """A resume whose module state differs from the checkpoint's (another config)
    fails before training with one line per differing array, and leaves the run's
    checkpoints and logs as they were."""
    t = toys.trainer(run_dir, max_steps=2, callbacks=[jt.CSVLogger(), jt.ModelCheckpoint(async_save=False)])
    t.fit(toys.Regression(big=4))
    before = sorted(os.listdir(os.path.join(t.log_dir, "checkpoints")))
    metrics_csv = open(os.path.join(t.log_dir, "metrics.csv")).read()
    again = toys.trainer(run_dir, max_steps=4, callbacks=[jt.CSVLogger(), jt.ModelCheckpoint(async_save=False)])
    with pytest.raises(ValueError) as err:
        again.fit(toys.Regression(big=8, per_device=False), ckpt_path="last")
    message = str(err.value)
    assert "2 of " in message and "arrays differ" in message
    assert "module.big: checkpoint float32[4], this module float32[8]" in message
    assert "module.noise_key: only in the checkpoint (uint32[" in message
    assert sorted(os.listdir(os.path.join(t.log_dir, "checkpoints"))) == before
    assert open(os.path.join(t.log_dir, "metrics.csv")).read() == metrics_csv


def test_resuming_with_other_env_steps_per_step_is_refused_before_writing(run_dir):
    """Same state shapes, another batch: env_steps would jump back (and
    max_env_steps be overrun), so the resume is an error and nothing changes."""
    t = toys.trainer(run_dir, max_env_steps=32, callbacks=[jt.CSVLogger(), jt.ModelCheckpoint(async_save=False)])
    t.fit(toys.Regression(batch_size=8))
    files = {p: open(os.path.join(t.log_dir, p), "rb").read() for p in ("metrics.csv", "hparams.csv")}
    again = toys.trainer(run_dir, max_env_steps=64, callbacks=[jt.CSVLogger(), jt.ModelCheckpoint(async_save=False)])
    with pytest.raises(ValueError, match=r"counted 32 env steps in 4 training steps \(8 per step\), "
                                         r"but Regression.env_steps_per_step is 4"):
        again.fit(toys.Regression(batch_size=4), ckpt_path="last")
    assert {p: open(os.path.join(t.log_dir, p), "rb").read() for p in files} == files
    assert sorted(os.listdir(os.path.join(t.log_dir, "checkpoints"))) == ["4"]


@functools.partial(jax.tree_util.register_dataclass, data_fields=["dist", "keys"], meta_fields=[])
@dataclasses.dataclass
class Contacts:
    """A dataclass node (as a brax MJX ``Data`` is) whose arrays may have no elements."""

    dist: jax.Array
    keys: jax.Array


class EmptyLeaves(toys.Regression):
    """:class:`toys.Regression` whose state also carries zero-size leaves through
    training: ``jnp.zeros((0, 3))`` (``nested=False``), else int8[2,0] and a typed
    key[0] in a dataclass and an adam state of a bfloat16[0,2] parameter."""

    def __init__(self, nested=False):
        super().__init__()
        self.nested = nested

    def init_state(self, key):
        state = super().init_state(key)
        if not self.nested:
            return {**state, "empty": jax.numpy.zeros((0, 3))}
        return {**state, "contacts": Contacts(jax.numpy.zeros((2, 0), jax.numpy.int8),
                                              jax.random.split(key, 0)),
                "empty_opt": self.optimizer.init({"e": jax.numpy.zeros((0, 2), jax.numpy.bfloat16)})}

    def training_step(self, state, key):
        carried = {k: state.pop(k) for k in ("empty", "contacts", "empty_opt") if k in state}
        new, metrics = super().training_step(state, key)
        if "contacts" in carried:
            carried["contacts"] = dataclasses.replace(carried["contacts"],
                                                      dist=carried["contacts"].dist + 1)
        return {**new, **carried}, metrics


@pytest.mark.parametrize("nested", [False, True], ids=["zeros_0x3", "nested"])
@pytest.mark.parametrize("strategy", ["single", "pmap"])
def test_zero_size_leaves_are_saved_and_resume_equals_a_straight_run(tmp_path, strategy, nested):
    """orbax saves no array without elements: they are kept as shape and dtype."""
    straight = toys.trainer(tmp_path / "a", strategy=strategy, max_steps=4, callbacks=[])
    straight.fit(EmptyLeaves(nested))
    first = toys.trainer(tmp_path / "b", strategy=strategy, max_steps=4,
                         callbacks=[jt.ModelCheckpoint(async_save=False), toys.StopAt(2)])
    first.fit(EmptyLeaves(nested))
    assert ckpt.steps(f"{first.log_dir}/checkpoints") == [2]
    second = toys.trainer(tmp_path / "b", strategy=strategy, max_steps=4, callbacks=[])
    second.fit(EmptyLeaves(nested), ckpt_path="last")
    assert second.global_step == 4
    toys.assert_trees_equal(second.state, straight.state)
    if not nested:
        assert (second.state["empty"].shape, second.state["empty"].dtype) == ((0, 3), np.float32)
    else:
        contacts, opt = second.state["contacts"], second.state["empty_opt"]
        assert (contacts.dist.shape, contacts.dist.dtype) == ((2, 0), np.int8)
        assert contacts.keys.shape == (0,) and jax.dtypes.issubdtype(contacts.keys.dtype,
                                                                    jax.dtypes.prng_key)
        mu = opt.inner_state[0].mu["e"]
        assert (mu.shape, mu.dtype) == ((0, 2), jax.numpy.bfloat16)


def _in_threads(*jobs, timeout=120.0):
    """Run each job in its own thread at once; their results, or the first error.
    Fails (rather than hangs) when a job is still running after ``timeout`` seconds."""
    results, errors = {}, {}

    def run(i, job):
        try:
            results[i] = job()
        except BaseException as e:  # noqa: BLE001 - raised below
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i, job), daemon=True) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0))
    assert not any(t.is_alive() for t in threads), f"still running after {timeout} s: {results}"
    if errors:
        raise next(iter(errors.values()))
    return [results[i] for i in range(len(jobs))]


def _fit(root, steps=16, **kw):
    t = toys.trainer(root, strategy="single", max_steps=steps, callbacks=[
        jt.ModelCheckpoint(every_n_steps=1, **kw)])
    t.fit(toys.Regression())
    return t


@pytest.mark.timeout(300)
def test_fits_in_threads_save_their_checkpoints_into_their_roots(tmp_path):
    """orbax's save-time ids are per process: saves of two fits at once are serialised."""
    fits = _in_threads(lambda: _fit(tmp_path / "a"), lambda: _fit(tmp_path / "b"),
                       lambda: _fit(tmp_path / "c", async_save=False), timeout=60)
    for t in fits:
        directory = f"{t.log_dir}/checkpoints"
        assert t.global_step == 16 and ckpt.steps(directory) == list(range(1, 17))
        assert ckpt.read_meta(f"{directory}/16")["run_dir"] == os.path.abspath(t.log_dir)
        toys.assert_trees_equal(t.state, fits[0].state)  # one seed, one module: one result


@pytest.mark.timeout(300)
def test_a_fit_in_a_thread_and_evaluations_of_a_saved_run_at_once(tmp_path):
    saved = _fit(tmp_path / "saved", steps=3)
    alone = toys.trainer(tmp_path / "saved", strategy="single").evaluate(toys.Regression(), ckpt_path="last")

    def evaluations():
        return [toys.trainer(tmp_path / "saved", strategy="single").evaluate(toys.Regression(), ckpt_path="last")
                for _ in range(4)]

    fitted, evaluated = _in_threads(lambda: _fit(tmp_path / "fit"), evaluations)
    assert fitted.global_step == 16 and ckpt.steps(f"{fitted.log_dir}/checkpoints")[-1] == 16
    assert evaluated == [alone] * 4 and saved.global_step == 3
