"""brax's default ('generalized') pipeline under every strategy.

Under ``shard_map(check_vma=True)`` brax's constraint solver (jaxopt's scan-based
loop: a ``lax.cond`` whose skip branch returns a literal ``False`` next to a
per-device flag) could not be traced. :meth:`Env.reset` and :meth:`Env.step` now
trace the simulator with the check relaxed where the check rejects it
(``without_vma_check``); these tests pin that it trains under each strategy,
computes the same physics as outside one, and keeps gradients through such a
region correct.

``multi_node`` runs over 2 processes x 2 fake devices (``jaxtrainer launch``; this
file is the program each rank runs).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxtrainer as jt
from jaxtrainer import envs
from jaxtrainer.algorithms import PPO, PPOConfig
from jaxtrainer.distributed._axis import AXIS_NAME, vary_like, varying_axes, without_vma_check

pytestmark = [pytest.mark.timeout(600),  # brax compiles slowly on 2 CPU cores
              pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")]

PPO_CONFIG = dict(num_envs=8, num_steps=5, num_minibatches=2, update_epochs=1, hidden_sizes=(8,))
QUIET = dict(compile_evaluation_ahead=False, enable_progress_bar=False,
             enable_checkpointing=False, logger=False)


@pytest.fixture(scope="module")
def pendulum():
    env = envs.make("brax/inverted_pendulum", episode_length=4)  # no backend argument
    assert env.env.backend == "generalized"
    return env


def _mesh():
    return jax.make_mesh((jax.device_count(),), (AXIS_NAME,))


# ---- the region on its own (no brax) ----------------------------------------------
def skip_when_negative(x):
    """jaxopt's loop in small: the skip branch returns a fresh constant."""
    return jax.lax.cond(x.sum() > 0, lambda v: (2 * v, v.sum() > 0), lambda v: (v, False), x)


def test_without_vma_check_types_values_and_gradients():
    def body(x, w):
        with pytest.raises(TypeError, match="manual axis types do not match"):
            skip_when_negative(x * w)
        y, flag = without_vma_check(skip_when_negative)(x * w)
        assert varying_axes(y) == varying_axes(flag) == {AXIS_NAME}
        dw = jax.grad(lambda w: without_vma_check(skip_when_negative)(x * w)[0].sum())(w)
        assert varying_axes(dw) == frozenset()  # summed over devices, as for any replicated input
        dx = jax.grad(lambda x: without_vma_check(skip_when_negative)(x * w)[0].sum())(x)
        # code the check accepts is traced as is: exact types, forward-mode too
        doubled, same = without_vma_check(lambda x, w: (2 * x, w + 1))(x, w)
        assert varying_axes(doubled) == {AXIS_NAME} and varying_axes(same) == frozenset()
        jax.jvp(without_vma_check(jnp.sin), (x,), (x,))
        return y, flag[None], dw, dx

    mesh = _mesh()
    x = jax.device_put(jnp.array([1.0, -1.0, 2.0, -2.0]), NamedSharding(mesh, P(AXIS_NAME)))
    run = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(AXIS_NAME), P()),
                                out_specs=(P(AXIS_NAME), P(AXIS_NAME), P(), P(AXIS_NAME))))
    y, flag, dw, dx = run(x, jnp.float32(3.0))
    np.testing.assert_array_equal(y, [6.0, -3.0, 12.0, -6.0])
    np.testing.assert_array_equal(flag, [True, False, True, False])
    assert float(dw) == 2.0 * 1.0 - 1.0 + 2.0 * 2.0 - 2.0  # d/dw of 2xw or of xw, per device
    np.testing.assert_array_equal(dx, [6.0, 3.0, 6.0, 3.0])
    # outside shard_map it is fn itself
    assert without_vma_check(skip_when_negative)(jnp.ones(2))[1]


# ---- brax ---------------------------------------------------------------------------
@pytest.mark.slow
def test_generalized_pipeline_steps_under_shard_map_as_outside_it(pendulum):
    """4 devices, 2 envs each, 5 steps with per-device actions (a time limit of 4:
    one auto-reset): observations, rewards and truncations equal those of the same
    8 envs stepped under plain jit, outside shard_map."""
    keys = jax.random.split(jax.random.key(0), jax.device_count())

    def rollout(key):  # one device's 2 envs
        k0, k1 = jax.random.split(key[0])
        state = vary_like(pendulum.reset_batch(k0, 2)[1], key)  # episode counters start at 0

        def body(state, k):
            action = jax.random.uniform(k, (2, 1), minval=-1.0, maxval=1.0)
            obs, state, info = pendulum.step_batch(k, state, action)
            return state, (obs, info.reward, info.truncated)

        return jax.tree.map(lambda x: x[None], jax.lax.scan(body, state, jax.random.split(k1, 5))[1])

    mesh = _mesh()
    sharded = jax.jit(jax.shard_map(rollout, mesh=mesh, in_specs=P(AXIS_NAME),
                                    out_specs=P(AXIS_NAME)))(
        jax.device_put(keys, NamedSharding(mesh, P(AXIS_NAME))))
    plain = jax.jit(jax.vmap(lambda k: jax.tree.map(lambda x: x[0], rollout(k[None]))))(keys)
    for a, b in zip(sharded, plain, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    obs, truncated = np.asarray(sharded[0]), np.asarray(sharded[2])
    assert np.isfinite(obs).all() and not np.allclose(obs[0], obs[1])  # devices' own envs
    assert truncated[:, 3].all() and not truncated[:, [0, 1, 2, 4]].any()


@pytest.mark.slow
def test_ppo_trains_on_the_generalized_pipeline(pendulum, run_dir):
    """On 4 devices under pmap. ``ShardMapStrategy``'s step (the same program builder,
    ``MultiNodeStrategy`` subclasses it) trains on 4 devices in
    :func:`test_ppo_trains_on_the_generalized_pipeline_over_two_processes`. On one device
    (no manual axes: ``without_vma_check`` is the function itself) the generalized
    pipeline trains in ``tests/algorithms/test_sac_td3.py::test_sac_runs_a_few_updates_on_a_brax_env``."""
    config = PPOConfig(env=pendulum.name, **PPO_CONFIG)
    trainer = jt.Trainer(
        strategy="pmap", max_steps=2, log_every_n_steps=1, default_root_dir=run_dir, **QUIET
    )
    trainer.fit(PPO(config, env=pendulum))
    assert trainer.strategy.num_devices == 4
    metrics = trainer.callback_metrics
    assert {"loss/total", "loss/value", "train/episode_return"} <= set(metrics)
    assert all(math.isfinite(float(v)) for v in metrics.values())
    assert pendulum.env.backend == "generalized"


@pytest.mark.slow
def test_ppo_trains_on_the_generalized_pipeline_over_two_processes(tmp_path):
    """multi_node: 2 processes x 2 devices. mjx puts brax's model on jax.devices()[0],
    process 0's device; process 1 makes its own copy (BraxEnv) and trains."""
    from tests._support._xla import xla_flags

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "JAXTRAINER_"))
           or k == "JAXTRAINER_COMPILATION_CACHE"}  # the run's cache, not the user's ~/.cache
    env["XLA_FLAGS"] = xla_flags(2)
    cmd = [sys.executable, "-m", "jaxtrainer.commands._cli", "launch", "--nproc-per-node", "2",
           "--timeout", "30", "--grace", "3", __file__, str(tmp_path)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]  # the same global metrics on every process
    assert ranks[0]["backend"] == "generalized" and ranks[0]["num_devices"] == 4
    assert all(math.isfinite(v) for v in ranks[0]["metrics"].values())
    assert {"loss/total", "train/episode_return"} <= set(ranks[0]["metrics"])


def _rank_main(out: str) -> None:
    """One rank of the two-process test."""
    import warnings

    warnings.simplefilter("ignore")
    trainer = jt.Trainer(strategy="multi_node", max_steps=2, log_every_n_steps=1,
                         default_root_dir=out, **QUIET)
    env = envs.make("brax/inverted_pendulum", episode_length=4)
    trainer.fit(PPO(PPOConfig(env=env.name, **PPO_CONFIG), env=env))
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()
               if k.startswith(("loss/", "train/"))}
    result = {"backend": env.env.backend, "num_devices": trainer.strategy.num_devices,
              "metrics": metrics}
    Path(out, f"rank{jax.process_index()}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    _rank_main(sys.argv[1])
