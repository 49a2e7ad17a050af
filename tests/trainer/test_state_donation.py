"""What a callback takes from ``trainer.state`` stays readable after later
steps donate (delete) the state's buffers."""

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from tests._support import toys


class KeepState(jt.Callback):
    """Keeps the state's leaves (not copies) at step ``at``."""

    def __init__(self, at):
        self.at, self.kept = at, None

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step == self.at:
            self.kept = jax.tree.leaves(trainer.state)


@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 4)])
def test_state_kept_by_a_callback_is_readable_after_fit(run_dir, strategy, devices):
    keep = KeepState(at=2)
    t = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=6,
                     log_every_n_steps=1, callbacks=[keep])
    t.fit(toys.Regression())
    two = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=2, callbacks=[])
    two.fit(toys.Regression())
    kept = toys.leaves(keep.kept)  # raised "Array has been deleted" when the state was donated
    want = toys.leaves(jax.tree.leaves(two.state))
    for a, b in zip(kept, want, strict=True):
        np.testing.assert_array_equal(a, b)
    # the run itself is unchanged by the copy: 6 steps as without the callback
    plain = toys.trainer(run_dir, strategy=strategy, devices=devices, max_steps=6, callbacks=[])
    plain.fit(toys.Regression())
    toys.assert_trees_equal(t.state, plain.state)


def test_peek_state_is_the_donated_state_itself(run_dir):
    seen = {}

    class Peek(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            if trainer.global_step == 1:
                seen["peek"] = jax.tree.leaves(trainer.peek_state())[0]
                seen["copy"] = jax.tree.leaves(trainer.state)[0]

    toys.trainer(run_dir, max_steps=3, callbacks=[Peek()]).fit(toys.Regression())
    assert seen["peek"].is_deleted()  # donated to step 2's call
    assert not seen["copy"].is_deleted()
