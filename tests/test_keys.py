"""The key formula the README states, pinned against what the Trainer draws."""

import jax
import numpy as np

import jaxtrainer as jt
from jaxtrainer.distributed import keys
from tests import toys
from tests.modules import Draws


class EvalDraws(Draws):
    def evaluation_step(self, state, key):
        return {"eval/u": jt.Last.of(jax.random.uniform(key))}


def _readme_step_key(seed, step, device):
    """fold_in(fold_in(fold_in(key(seed), 1), s), d): TRAIN stream 1, step s, device d."""
    k = jax.random.fold_in(jax.random.key(seed), 1)
    return jax.random.fold_in(jax.random.fold_in(k, step), device)


def test_step_s_on_device_d_draws_from_the_readme_formula(run_dir):
    t = toys.trainer(run_dir, strategy="pmap", devices=4, max_steps=3, seed=7, callbacks=[])
    t.fit(Draws())
    got = np.asarray(t.state["draws"])  # the last step (s = 2) on each device
    want = [float(jax.random.uniform(_readme_step_key(7, 2, d), (1,))[0]) for d in range(4)]
    np.testing.assert_array_equal(got, np.float32(want))
    assert len(set(want)) == 4
    root = jax.random.key(7)
    for d in range(4):
        k = keys.step_key(keys.stream_key(root, keys.TRAIN_STREAM), 2, d)
        assert (jax.random.key_data(k) == jax.random.key_data(_readme_step_key(7, 2, d))).all()


def test_the_evaluation_key_at_step_t_on_device_d(run_dir):
    t = toys.trainer(run_dir, strategy="pmap", devices=4, max_steps=2, seed=3, callbacks=[])
    t.fit(EvalDraws())
    got = t.evaluate(EvalDraws())["eval/u"]
    eval_key = jax.random.fold_in(jax.random.fold_in(jax.random.key(3), 2), 2)  # EVAL stream, t=2
    draws = [float(jax.random.uniform(jax.random.fold_in(eval_key, d))) for d in range(4)]
    assert got == np.float32(np.mean(np.float32(draws)))  # Last: mean of the devices' values
