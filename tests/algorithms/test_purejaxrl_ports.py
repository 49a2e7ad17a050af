"""PureJaxRL's scripts ported as ``global_view`` modules (examples/purejaxrl):
they run under ``single`` and ``pmap``, and the pmap run is the same algorithm.

The same algorithm, checked two ways on 2 fake devices with tiny configs: every
network call of the step (rollout, advantage, each minibatch) sees the global
shapes the one-device run sees (PPO-RNN's 4 minibatches of one env sequence each,
with 2 envs per device), and the parameters after two updates equal the
one-device run's up to float32 summation order.
"""

import importlib
import pathlib
import sys

import jax
import numpy as np
import pytest

import jaxtrainer as jt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "purejaxrl"))

PPO_TINY = {"NUM_ENVS": 4, "NUM_STEPS": 4, "UPDATE_EPOCHS": 1, "NUM_MINIBATCHES": 2}
CASES = {
    "ppo": ("PPO", PPO_TINY, (8, 4)),  # a minibatch: 4 envs x 4 steps / 2 minibatches
    "ppo_rnn": ("PPORNN", {**PPO_TINY, "NUM_MINIBATCHES": 4}, (4, 1, 4)),  # one env's sequence
    "dqn": ("DQN", {"NUM_ENVS": 4, "BUFFER_SIZE": 32, "BUFFER_BATCH_SIZE": 8, "LEARNING_STARTS": 4,
                    "TRAINING_INTERVAL": 4, "TARGET_UPDATE_INTERVAL": 8}, (8, 4)),  # a sampled batch
}


class Recording:
    """A flax module's ``init``/``apply`` that records the shapes ``apply`` is traced with."""

    def __init__(self, net):
        self.net, self.shapes = net, []

    def init(self, *args, **kwargs):
        return self.net.init(*args, **kwargs)

    def apply(self, params, *inputs):
        self.shapes.append(jax.tree.map(np.shape, inputs))
        return self.net.apply(params, *inputs)


def flat(shapes):
    """Every shape (a tuple of ints) in a nest of tuples of shapes."""
    if all(isinstance(d, int) for d in shapes):
        return [shapes]
    return [s for part in shapes for s in flat(part)]


def run(script, strategy, run_dir, steps=2):
    mod = importlib.import_module(script)
    cls, tiny, _ = CASES[script]
    module = getattr(mod, cls)({**mod.CONFIG, **tiny, "TOTAL_TIMESTEPS": 1e3})
    module.network = Recording(module.network)
    trainer = jt.Trainer(strategy=strategy, devices=1 if strategy == "single" else 2,
                         max_steps=steps, log_every_n_steps=steps, enable_checkpointing=False,
                         enable_progress_bar=False, default_root_dir=run_dir)
    trainer.fit(module)
    return module.network.shapes, jax.device_get(trainer.state[0].params), trainer


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CASES))
def test_port_on_two_devices_is_the_one_device_algorithm(script, run_dir):
    shapes, params, single = run(script, "single", run_dir)
    pmap_shapes, pmap_params, pmapped = run(script, "pmap", run_dir)
    assert single.strategy.num_devices == 1 and pmapped.strategy.num_devices == 2
    assert pmap_shapes == shapes  # every traced network call, minibatches included, globally
    minibatch = CASES[script][2]
    assert any(minibatch in flat(s) for s in shapes), shapes
    assert single.global_step == pmapped.global_step == 2
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(pmap_params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_global_view_layout_splits_the_per_env_leaves_only():
    """Leaves with NUM_ENVS rows (env states, observations, done flags, GRU hidden
    states) are split over the devices; parameters and optimizer state are replicated."""
    from ppo_rnn import CONFIG, PPORNN

    # 8 envs: with 4 (CartPole's observation size) or 2 (its actions) a kernel or a
    # bias would have num_envs rows too and be split (values unchanged, only where it lives)
    module = PPORNN({**CONFIG, **CASES["ppo_rnn"][1], "NUM_ENVS": 8, "TOTAL_TIMESTEPS": 1e3})
    strategy = jt.strategies.PmapStrategy(devices=2)
    train_state, env_state, obs, done, hidden = strategy.state_layout(module)
    assert all(lay.sharded for lay in jax.tree.leaves((env_state, obs, done, hidden),
                                                      is_leaf=lambda x: hasattr(x, "sharded")))
    assert not any(lay.sharded for lay in jax.tree.leaves(
        (train_state.params, train_state.opt_state), is_leaf=lambda x: hasattr(x, "sharded")))
    state = strategy.abstract_state(module)
    assert state[4].shape == (8, 128) and state[4].sharding.spec == jax.sharding.PartitionSpec("devices")


def test_the_porting_guide_says_what_equal_under_pmap_means_for_returns():
    """Issue 68, 7: the guide said the pmap port equals the one-device run "up to
    the order of float32 sums" without a word that RL amplifies such differences."""
    guide = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides"
             / "porting-purejaxrl.md").read_text()
    assert "Equal up to the order of sums is not equal returns" in guide
    assert "RL amplifies such differences" in guide
    assert ("Bit for bit\n  across device counts are only runs that split no float sum over "
            "devices") in guide
