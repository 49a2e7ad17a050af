"""Tiny Modules shared by the foundation tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

import jaxtrainer as jt
from jaxtrainer import distributed as jd


class GenerationLog(jt.Callback):
    """Keeps the metrics of every ``on_generation_end`` in :attr:`metrics`, in order."""

    writes_run_dir = False

    def __init__(self) -> None:
        self.metrics: list[dict] = []

    def on_generation_end(self, trainer, module, metrics) -> None:
        self.metrics.append(metrics)


class Draws(jt.Module):
    """Each device stores the uniform it draws from its own step key."""

    def init_state(self, key):
        # built from the per-device key, so the leaf is sharded: global shape [num_devices]
        return {"draws": jax.random.uniform(jd.fold_in_device(key), (1,))}

    def training_step(self, state, key):
        u = jax.random.uniform(key, (1,))
        return {"draws": u}, {"u": u[0]}


class Regression(jt.Module):
    """Linear regression on data that does not depend on the device.

    Every device sees the same global batch split evenly, so the loss (pmean of
    per-device means) is the same under any strategy. ``num_samples`` is a
    global size; ``env_steps_per_step`` counts samples per step.
    """

    def __init__(self, num_samples: int = 8, lr: float = 0.1, average_stats: bool = True,
                 optimizer: str = "adam"):
        self.num_samples = num_samples
        self.env_steps_per_step = num_samples
        self.optimizer = optax.adam(lr) if optimizer == "adam" else optax.sgd(lr)
        self.average_stats = average_stats

    def validate(self, num_devices):
        jd.local_size(self.num_samples, "num_samples", num_devices)

    def _data(self, key):
        n = jd.local_size(self.num_samples, "num_samples")
        x = jax.random.normal(key, (self.num_samples, 3))  # same global batch everywhere
        y = x @ jnp.array([1.0, -2.0, 0.5]) + 0.3
        start = jd.axis_index() * n
        return (jax.lax.dynamic_slice_in_dim(x, start, n), jax.lax.dynamic_slice_in_dim(y, start, n))

    def init_state(self, key):
        params = {"w": jnp.zeros((3,)), "b": jnp.zeros(())}
        return {"params": params, "opt": self.optimizer.init(params), "x_mean": jnp.zeros((3,))}

    def training_step(self, state, key):
        x, y = self._data(jax.random.key(0))

        def loss_fn(p, x, y):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2), {}

        params, opt, loss, _ = jd.averaged_update(loss_fn, state["params"], state["opt"],
                                                  self.optimizer, x, y)
        # a running input statistic; without pmean the replicas drift apart
        x_mean = x.mean(0)
        x_mean = jd.pmean(x_mean) if self.average_stats else x_mean
        return {"params": params, "opt": opt, "x_mean": x_mean}, {"loss": loss}

    def evaluation_step(self, state, key):
        x, y = self._data(jax.random.key(0))
        err = (x @ state["params"]["w"] + state["params"]["b"] - y) ** 2
        return {"eval/mse": jt.Mean.of(err)}  # summed over devices by the strategy
