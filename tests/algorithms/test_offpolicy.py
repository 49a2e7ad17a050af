"""The off-policy loop's presampling: every update's batch drawn before the loop
of updates (one gather per field), the same batches as sampling inside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import ClosedJaxpr, Jaxpr

from jaxtrainer.algorithms.dqn import DQN, DQNConfig
from jaxtrainer.algorithms.sac import SAC, SACConfig
from jaxtrainer.algorithms.td3 import TD3
from jaxtrainer.strategies import SingleDeviceStrategy
from tests._support.commands import ROOT

TINY = dict(num_envs=4, buffer_size=64, batch_size=8, learning_starts=8, gradient_steps=4,
            hidden_sizes=(8,), eval_episodes=4)


class PresampledSAC(SAC):  # as on an accelerator
    _presample_on_cpu = True


class PresampledTD3(TD3):
    _presample_on_cpu = True


class PresampledDQN(DQN):
    _presample_on_cpu = True


def _buffer_gathers(module) -> list[tuple[bool, tuple[int, ...]]]:
    """``(inside the loop of updates, operand shape)`` of every gather from the
    replay's storage (operands ``[num_envs, slots, ...]``) in ``learn``'s program."""
    state = jax.device_get(SingleDeviceStrategy().init_state(module, jax.random.key(0)))
    jaxpr = jax.make_jaxpr(lambda s, k: module.learn(
        module.carry_of(s), s.buffer, getattr(s, "obs_stats", None), s.step, k))(
        state, jax.random.key(1))
    found = []

    def walk(jaxpr: Jaxpr, inside: bool) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "gather" and eqn.invars[0].aval.shape[:2] == (4, 16):
                found.append((inside, eqn.invars[0].aval.shape))
            loop = eqn.primitive.name == "scan" and eqn.params["length"] == 4
            for value in eqn.params.values():
                for sub in value if isinstance(value, tuple | list) else (value,):
                    if isinstance(sub, ClosedJaxpr | Jaxpr):
                        walk(getattr(sub, "jaxpr", sub), inside or loop)

    walk(jaxpr.jaxpr, False)
    return found


def test_presampling_gathers_each_field_once_before_the_updates():
    # Pendulum: obs float32[3], action float32[1]; fields obs, action, reward, next_obs, terminated
    fields = [(4, 16, 3), (4, 16, 1), (4, 16), (4, 16, 3), (4, 16)]
    sac = PresampledSAC(SACConfig(normalize_observations=True, reward_scaling=30.0, **TINY))
    assert sac.presamples
    assert _buffer_gathers(sac) == [(False, shape) for shape in fields]
    in_loop = SAC(SACConfig(normalize_observations=True, reward_scaling=30.0, **TINY))
    assert not in_loop.presamples  # on the CPU: sampled in the loop
    assert _buffer_gathers(in_loop) == [(True, shape) for shape in fields]


def test_prioritised_replay_samples_inside_the_loop():
    # its updates set the priorities the next update samples by
    assert not PresampledDQN(DQNConfig(env="CartPole-v1", prioritised=True, **TINY)).presamples
    assert PresampledDQN(DQNConfig(env="CartPole-v1", n_step=3,
                                   **{**TINY, "learning_starts": 16})).presamples


class OwnUpdateSAC(SAC):
    """A subclass written against ``update`` alone (its own loss, say)."""

    _presample_on_cpu = True  # as on an accelerator

    def update(self, carry, key, buffer, obs_stats=None):
        carry, losses = super().update(carry, key, buffer, obs_stats)
        return carry, {**losses, "critic": losses["critic"] * 0.0}


def test_a_subclass_that_overrides_update_alone_keeps_its_update():
    # its update is newer than the update_batch it inherits: the loop calls it per update
    module = OwnUpdateSAC(SACConfig(**TINY))
    assert not module.presamples
    assert _buffer_gathers(module) == [(True, shape) for shape in
                                       [(4, 16, 3), (4, 16, 1), (4, 16), (4, 16, 3), (4, 16)]]
    state = jax.device_get(SingleDeviceStrategy().init_state(module, jax.random.key(0)))
    _, losses = jax.jit(lambda s, k: module.learn(module.carry_of(s), s.buffer, None,
                                                  jnp.asarray(10), k))(state, jax.random.key(1))
    critic, actor = losses["loss/critic"], losses["loss/actor"]  # its own loss ran
    assert float(critic.count) > 0 and float(critic.total) == 0.0
    assert float(actor.count) > 0 and float(actor.total) != 0.0


def _trained(module, steps: int = 5):
    strategy = SingleDeviceStrategy()
    state = strategy.init_state(module, jax.random.key(0))
    train = strategy.compile_train(module, state, jax.random.key(1))
    return train.fn(state, jax.random.key(1), jnp.int32(0), jnp.int32(steps))


_CASES = {
    "sac": (PresampledSAC, SAC, dict(normalize_observations=True, reward_scaling=30.0)),
    "td3": (PresampledTD3, TD3, dict(normalize_observations=True, reward_scaling=5.0)),
    "dqn_n_step": (PresampledDQN, DQN, dict(env="CartPole-v1", n_step=3, learning_starts=16)),
}


def _compare_presampled_with_in_loop() -> None:
    """Print ``{case: [updates, differing elements of the state and metrics]}`` as
    JSON: five training steps of each :data:`_CASES` module, presampled and not."""
    result = {}
    for name, (presampled, in_loop, fields) in _CASES.items():
        config = presampled.config_class(**{**TINY, **fields})
        state, metrics = _trained(presampled(config))
        expected, expected_metrics = _trained(in_loop(config))
        differing = 0
        for got, want in zip(jax.tree.leaves((state, metrics)),
                             jax.tree.leaves((expected, expected_metrics)), strict=True):
            if jnp.issubdtype(got.dtype, jax.dtypes.prng_key):
                got, want = jax.random.key_data(got), jax.random.key_data(want)
            differing += int(np.sum(np.asarray(got) != np.asarray(want)))
        result[name] = [int(state.updates), differing]
    print(json.dumps(result))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_presampled_batches_learn_as_sampling_in_the_loop_bit_for_bit():
    # Two programs (the batches a scan input, or gathered in its body): equal bit for bit
    # as XLA:CPU compiles them for users. The test processes' backend optimisation level 0
    # (tests/_support/_xla.py) leaves them 1 ulp apart, so this runs in a process without it.
    env = dict(os.environ, XLA_FLAGS=os.environ.get("JAXTRAINER_TESTS_GIVEN_XLA_FLAGS", ""))
    proc = subprocess.run(
        [sys.executable, "-c", "from tests.algorithms.test_offpolicy import "
         "_compare_presampled_with_in_loop as c; c()"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # 5 steps of 4 env steps, 4 updates a step from step 1 (learning_starts=8) or 3 (16)
    assert json.loads(proc.stdout.splitlines()[-1]) == {
        "sac": [16, 0], "td3": [16, 0], "dqn_n_step": [8, 0]}
