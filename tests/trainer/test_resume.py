"""Exact resume: save and resume equals a straight run, typed keys keep their type and
bits, and a checkpoint restores under another strategy and device count."""

import csv
import textwrap

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from tests._support import toys


def _steps_logged(log_dir):
    with open(f"{log_dir}/metrics.csv") as f:
        return [(int(r["step"]), int(r["env_steps"]), r["loss"]) for r in csv.DictReader(f)]


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2])
def test_eight_steps_straight_equal_four_save_resume_four(tmp_path, devices):
    strategy = "single" if devices == 1 else "pmap"
    straight = toys.trainer(tmp_path / "a", strategy=strategy, devices=devices, max_steps=8,
                            log_every_n_steps=2)
    straight.fit(toys.Regression())

    first = toys.trainer(tmp_path / "b", strategy=strategy, devices=devices, max_steps=4,
                         log_every_n_steps=2)
    first.fit(toys.Regression())
    second = toys.trainer(tmp_path / "b", strategy=strategy, devices=devices, max_steps=8,
                          log_every_n_steps=2)
    second.fit(toys.Regression(), ckpt_path="last")

    assert second.log_dir == first.log_dir  # same run directory, logs appended
    assert (second.global_step, second.env_steps) == (straight.global_step, straight.env_steps) == (8, 64)
    toys.assert_trees_equal(second.state, straight.state)  # params, opt state, keys, counters
    toys.assert_trees_equal(second.root_key, straight.root_key)
    assert _steps_logged(second.log_dir) == _steps_logged(straight.log_dir)
    assert [s for s, _, _ in _steps_logged(second.log_dir)] == [2, 4, 6, 8]


def test_typed_keys_round_trip_with_type_and_bits(tmp_path):
    t = toys.trainer(tmp_path, strategy="pmap", devices=2, max_steps=3)
    t.fit(toys.Regression())
    path = jt.checkpoint.find_last(tmp_path)
    again = toys.trainer(tmp_path, strategy="pmap", devices=2, max_steps=3)
    again._module = toys.Regression()
    again.strategy.setup()
    again.restore_checkpoint(again._module, path)
    for name in ("key", "noise_key"):
        assert jax.dtypes.issubdtype(again.state[name].dtype, jax.dtypes.prng_key)
        assert jax.random.key_impl(again.state[name]) == jax.random.key_impl(t.state[name])
        np.testing.assert_array_equal(jax.random.key_data(again.state[name]),
                                      jax.random.key_data(t.state[name]))
    # the next sample equals the uninterrupted run's
    np.testing.assert_array_equal(jax.random.uniform(again.state["key"]),
                                  jax.random.uniform(t.state["key"]))


_LOAD = """
import jax, numpy as np, jaxtrainer as jt
from tests._support import toys
assert jax.device_count() == {n}
t = toys.trainer({root!r}, strategy={strategy!r}, max_steps=5)
m = toys.Regression(per_device=False)
t._module = m
t.strategy.setup()
meta = t.restore_checkpoint(m, jt.checkpoint.resolve({root!r} + "/version_0/checkpoints/5"))
assert meta["num_devices"] == 4 and t.global_step == 5 and t.env_steps == 40
ref = np.load({ref!r})
got = {{jax.tree_util.keystr(p): np.asarray(x) for p, x in
        jax.tree_util.tree_leaves_with_path(toys.leaves(t.state))}}
assert sorted(got) == sorted(ref.files)
for k in got:
    np.testing.assert_array_equal(got[k], ref[k])
# and it keeps training from there
t2 = toys.trainer({root!r} + "/more{n}", strategy={strategy!r}, max_steps=7)
t2.fit(m, ckpt_path={root!r} + "/version_0/checkpoints/5")
assert t2.global_step == 7
print("OK", {n})
"""


@pytest.mark.slow
def test_pmap_on_4_restores_on_2_and_1_in_fresh_processes(tmp_path):
    # written here (this process has 4 devices), read in processes with 2 and 1
    root, ref = str(tmp_path / "runs"), str(tmp_path / "ref.npz")
    t = toys.trainer(root, strategy="pmap", max_steps=5)
    t.fit(toys.Regression(per_device=False))
    assert t.num_devices == 4
    np.savez(ref, **{jax.tree_util.keystr(p): np.asarray(x) for p, x in
                     jax.tree_util.tree_leaves_with_path(toys.leaves(t.state))})
    for n, strategy in ((2, "pmap"), (1, "single")):
        out = toys.run_python(textwrap.dedent(_LOAD.format(root=root, ref=ref, n=n, strategy=strategy)),
                              devices=n)
        assert f"OK {n}" in out.stdout


def test_single_device_checkpoint_resumes_under_pmap_on_4_and_continues_equal(tmp_path):
    """And back: a run saved on 1 device continues on 4 like a straight 1-device run
    would up to the save (state equal at restore; training then goes on)."""
    one = toys.trainer(tmp_path / "a", strategy="single", devices=1, max_steps=3)
    one.fit(toys.Regression(per_device=False))
    four = toys.trainer(tmp_path / "a", strategy="pmap", devices=4, max_steps=3)
    m = toys.Regression(per_device=False)
    four._module = m
    four.strategy.setup()
    four.restore_checkpoint(m, jt.checkpoint.find_last(tmp_path / "a"))
    toys.assert_trees_equal(four.state, one.state)
    assert len(four.state["params"]["w"].sharding.device_set) == 4
    cont = toys.trainer(tmp_path / "a", strategy="pmap", devices=4, max_steps=5)
    cont.fit(m, ckpt_path="last")
    assert cont.global_step == 5 and np.isfinite(toys.leaves(cont.state)["params"]["w"]).all()


class CountedInit(toys.Regression):
    """Counts its ``init_state`` traces (Python calls)."""

    def __init__(self):
        super().__init__(per_device=False)
        self.init_calls = 0

    def init_state(self, key):
        self.init_calls += 1
        return super().init_state(key)


def test_a_fresh_fit_and_a_resume_trace_init_state_as_often(tmp_path):
    """Twice each: the layout probe and the init program, whose trace gives the
    shapes for the compiles and then initialises (fresh) or restores (resume)."""
    fresh = CountedInit()
    toys.trainer(tmp_path, strategy="single", max_steps=2).fit(fresh)
    resumed = CountedInit()
    t = toys.trainer(tmp_path, strategy="single", max_steps=4)
    t.fit(resumed, ckpt_path="last")
    assert t.global_step == 4 and t.ckpt_path is not None
    assert (fresh.init_calls, resumed.init_calls) == (2, 2)


@pytest.mark.slow
def test_a_python_resume_says_which_hyperparameters_the_checkpoint_keeps(tmp_path, capsys):
    """``PPO(lr=1e-2)`` resuming a run trained at 2.5e-4 went on at 2.5e-4 without a word:
    the learning rate is part of the state (state.hyperparams), restored as the weights are."""
    from jaxtrainer.algorithms import PPO, PPOConfig

    def fit(lr, ckpt_path=None):
        module = PPO(PPOConfig(env="CartPole-v1", lr=lr, num_envs=4, num_steps=16,
                               num_minibatches=2, update_epochs=1, eval_episodes=2))
        trainer = toys.trainer(tmp_path, strategy="single", max_steps=4, logger=False)
        if ckpt_path is None:
            trainer.callbacks.append(StopAt(2))
        trainer.fit(module, ckpt_path=ckpt_path)
        return trainer

    fit(2.5e-4)
    capsys.readouterr()
    resumed = fit(1e-2, ckpt_path="last")
    assert resumed.global_step == 4
    assert float(resumed.state.hyperparams["lr"]) == pytest.approx(2.5e-4)
    assert ("jaxtrainer: resume: the checkpoint's lr=0.00025 (the module's 0.01) go on: "
            "hyperparameters kept in the state (state.hyperparams) come from the checkpoint"
            ) in capsys.readouterr().err
    fit(2.5e-4)  # a new run, stopped at 2, and resumed with the same rate: nothing said
    capsys.readouterr()
    fit(2.5e-4, ckpt_path="last")
    assert "the checkpoint's" not in capsys.readouterr().err


class StopAt(jt.Callback):
    def __init__(self, step):
        self.step = step

    def on_train_steps_end(self, trainer, module, metrics):
        trainer.should_stop = trainer.global_step >= self.step


def test_a_resume_goes_on_with_its_own_seed_and_says_so(tmp_path, capsys):
    """``Trainer(seed=7)`` resuming a run of seed 0 trained on with seed 0's keys while
    recording seed 7 (so ``jaxtrainer eval`` then named the wrong seed): it now says the
    run's seed goes on, and every record keeps it."""
    from jaxtrainer.checkpoint._files import read_meta

    straight = toys.trainer(tmp_path / "a", strategy="single", max_steps=4, logger=False)
    straight.fit(toys.Regression())
    first = toys.trainer(tmp_path / "b", strategy="single", max_steps=2, logger=False)
    first.fit(toys.Regression())
    capsys.readouterr()
    second = toys.trainer(tmp_path / "b", strategy="single", max_steps=4, logger=False, seed=7)
    second.fit(toys.Regression(), ckpt_path="last")
    assert ("jaxtrainer: resume: the run goes on with its seed 0 (the random keys are in the "
            "checkpoint), not seed=7: another seed is a new run") in capsys.readouterr().err
    assert second.seed == 0 and read_meta(f"{second.log_dir}/checkpoints/4")["seed"] == 0
    toys.assert_trees_equal(second.state, straight.state)
