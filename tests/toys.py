"""Tiny modules for the callback, logger, checkpoint and resume tests."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxtrainer as jt
from jaxtrainer.distributed import fold_in_device, gradient_update

W_TRUE = jnp.array([1.0, -2.0, 0.5])


class Regression(jt.Module):
    """Linear regression with adam (learning rate injected as a hyperparameter).

    State: ``params``, ``opt_state``, ``step`` (int32), ``key`` (a replicated typed
    key split every step) and, with ``per_device=True``, ``noise_key``: a typed
    key per device (sharded; its global shape depends on the device count).

    Args:
      batch_size: global samples per step (``env_steps_per_step``).
      lr: adam learning rate.
      per_device: add the sharded ``noise_key`` leaf.
      nan_from_step: from this step on (state counter), the loss and the
        parameters become NaN.
    """

    def __init__(self, batch_size: int = 8, lr: float = 0.05, per_device: bool = True,
                 nan_from_step: int | None = None) -> None:
        self.batch_size = batch_size
        self.env_steps_per_step = batch_size
        self.lr = lr
        self.per_device = per_device
        self.nan_from_step = nan_from_step
        self.optimizer = optax.inject_hyperparams(optax.adam)(learning_rate=lr)

    def hparams(self):
        return {"batch_size": self.batch_size, "lr": self.lr}

    def validate(self, num_devices: int) -> None:
        if self.batch_size % num_devices:
            raise ValueError(f"batch_size={self.batch_size} does not split over {num_devices} devices")

    def init_state(self, key):
        params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
        state = {"params": params, "opt_state": self.optimizer.init(params),
                 "step": jnp.zeros((), jnp.int32), "key": jax.random.fold_in(key, 7)}
        if self.per_device:
            state["noise_key"] = fold_in_device(key)
        return state

    def training_step(self, state, key):
        n = self.batch_size // jt.distributed.axis_size()
        x = jax.random.normal(key, (n, 3))
        if self.per_device:
            noise_key, sub = jax.random.split(state["noise_key"])
            x = x + 0.01 * jax.random.normal(sub, (n, 3))
        y = x @ W_TRUE + 0.3

        def loss_fn(p, x, y):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2), None

        params, opt_state, loss, _ = gradient_update(loss_fn, state["params"], state["opt_state"],
                                                     self.optimizer, x, y)
        if self.nan_from_step is not None:
            bad = state["step"] >= self.nan_from_step
            loss = jnp.where(bad, jnp.nan, loss)
            params = jax.tree.map(lambda p: jnp.where(bad, jnp.nan, p), params)
        new_key, _ = jax.random.split(state["key"])
        new = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "key": new_key}
        if self.per_device:
            new["noise_key"] = noise_key
        return new, {"loss": loss, "lr": opt_state.hyperparams["learning_rate"]}

    def evaluation_step(self, state, key):
        x = jax.random.normal(key, (16, 3))
        err = jnp.mean((x @ state["params"]["w"] + state["params"]["b"] - x @ W_TRUE - 0.3) ** 2)
        return {"eval/mse": jt.distributed.pmean(err)}


def leaves(tree):
    """Host copies of every leaf (typed keys as their key data)."""
    def host(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(jax.device_get(x))
    return jax.tree.map(host, tree)


def assert_trees_equal(a, b):
    la, lb = leaves(a), leaves(b)
    assert jax.tree.structure(la) == jax.tree.structure(lb)
    for x, y in zip(jax.tree.leaves(la), jax.tree.leaves(lb), strict=True):
        np.testing.assert_array_equal(x, y)


def trainer(run_dir, **kw):
    """A quiet Trainer for tests: no progress bar, CSV logging only unless given."""
    kw.setdefault("enable_progress_bar", False)
    kw.setdefault("log_every_n_steps", 1)
    if "callbacks" not in kw:
        kw["callbacks"] = [jt.CSVLogger()]
    return jt.Trainer(default_root_dir=run_dir, **kw)


def run_python(code: str, devices: int, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ``devices`` fake CPU devices."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("WANDB_MODE", "disabled")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=timeout, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, f"subprocess failed:\n{out.stdout}\n{out.stderr}"
    return out
