"""Run-ahead: the next interval is enqueued before a boundary's metric-only callbacks."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from tests._support.toys import Regression

QUIET = dict(compile_evaluation_ahead=False, enable_progress_bar=False, enable_checkpointing=False, logger=False, seed=5,
             run_ahead=True)  # "auto" keeps it off on CPU


class Watch(jt.Callback):
    """Records, at every boundary, whether the state was already one interval ahead."""

    def __init__(self, needs_state: bool):
        self._needs = needs_state
        self.ahead, self.steps, self.losses = [], [], []

    def needs_state(self, trainer, module, step):
        return self._needs

    def on_train_steps_end(self, trainer, module, metrics):
        self.ahead.append(trainer.state_ahead)
        self.steps.append(trainer.global_step)
        self.losses.append(metrics["loss"])


def leaves(state):
    return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                       else x) for x in jax.tree.leaves(state)]


def test_run_ahead_gives_the_same_run_and_stops_at_evaluations_and_the_end(run_dir):
    runs = {}
    for needs in (True, False):
        watch = Watch(needs)
        trainer = jt.Trainer(strategy="pmap", max_steps=40, log_every_n_steps=5,
                             eval_every_n_steps=20, callbacks=[watch],
                             default_root_dir=run_dir / str(needs), **QUIET)
        trainer.fit(Regression())
        runs[needs] = (watch, leaves(jax.device_get(trainer.state)), trainer.global_step)
    blocking, ahead = runs[True][0], runs[False][0]
    assert blocking.ahead == [False] * 8
    # boundaries 20 (evaluation) and 40 (the end) wait for the state; the others run ahead
    assert ahead.ahead == [True, True, True, False, True, True, True, False]
    assert ahead.steps == blocking.steps == list(range(5, 45, 5))
    assert ahead.losses == blocking.losses  # the same metrics, bit for bit, at the same steps
    for a, b in zip(runs[True][1], runs[False][1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert runs[True][2] == runs[False][2] == 40


def test_auto_keeps_run_ahead_off_on_cpu_and_bad_values_are_errors(run_dir):
    watch = Watch(False)
    jt.Trainer(strategy="single", max_steps=10, log_every_n_steps=5, callbacks=[watch],
               default_root_dir=run_dir, enable_progress_bar=False, enable_checkpointing=False,
               logger=False).fit(Regression())
    assert watch.ahead == [False, False]
    with pytest.raises(ValueError, match="run_ahead='yes'"):
        jt.Trainer(max_steps=1, run_ahead="yes")


def test_checkpoints_are_taken_at_their_step_under_run_ahead(run_dir):
    """ModelCheckpoint(every_n_steps=10) holds the run at its save boundaries, so
    each checkpoint is the state of its own step (resume from 10 == the run)."""
    watch = Watch(False)
    ckpt = jt.ModelCheckpoint(every_n_steps=10, save_top_k=-1)
    trainer = jt.Trainer(strategy="single", max_steps=20, log_every_n_steps=5,
                         callbacks=[watch, ckpt], default_root_dir=run_dir,
                         enable_progress_bar=False, logger=False, seed=5, run_ahead=True)
    trainer.fit(Regression())
    assert watch.ahead == [True, False, True, False]
    final = leaves(jax.device_get(trainer.state))
    resumed = jt.Trainer(strategy="single", max_steps=20, log_every_n_steps=5,
                         default_root_dir=run_dir, enable_progress_bar=False, logger=False,
                         seed=5)
    resumed.fit(Regression(), ckpt_path=f"{trainer.log_dir}/checkpoints/10")
    for a, b in zip(final, leaves(jax.device_get(resumed.state)), strict=True):
        np.testing.assert_array_equal(a, b)
