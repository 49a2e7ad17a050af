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
from jaxtrainer import envs
from jaxtrainer.distributed import averaged_update, fold_in_device
from tests._support._xla import xla_flags

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
      big: add a replicated ``float32[big]`` leaf that grows by 1 every step
        (a large buffer for asynchronous-save tests).
    """

    def __init__(self, batch_size: int = 8, lr: float = 0.05, per_device: bool = True,
                 nan_from_step: int | None = None, big: int = 0) -> None:
        self.batch_size = batch_size
        self.env_steps_per_step = batch_size
        self.lr = lr
        self.per_device = per_device
        self.nan_from_step = nan_from_step
        self.big = big
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
        if self.big:
            state["big"] = jnp.zeros((self.big,), jnp.float32)
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

        params, opt_state, loss, _ = averaged_update(loss_fn, state["params"], state["opt_state"],
                                                     self.optimizer, x, y)
        if self.nan_from_step is not None:
            bad = state["step"] >= self.nan_from_step
            loss = jnp.where(bad, jnp.nan, loss)
            params = jax.tree.map(lambda p: jnp.where(bad, jnp.nan, p), params)
        new_key, _ = jax.random.split(state["key"])
        new = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "key": new_key}
        if self.per_device:
            new["noise_key"] = noise_key
        if self.big:
            new["big"] = state["big"] + 1.0
        mets = {"loss": loss}
        if hasattr(opt_state, "hyperparams"):
            mets["lr"] = opt_state.hyperparams["learning_rate"]
        return new, mets

    def evaluation_step(self, state, key):
        x = jax.random.normal(key, (16, 3))
        err = jnp.mean((x @ state["params"]["w"] + state["params"]["b"] - x @ W_TRUE - 0.3) ** 2)
        return {"eval/mse": jt.distributed.pmean(err)}


class StepNumbers(Regression):
    """:class:`Regression` whose metric ``step_number`` is the number of the
    step (1, 2, ...): a log interval's mean is checkable by hand (steps 3 and 4
    log 3.5)."""

    def training_step(self, state, key):
        new, mets = super().training_step(state, key)
        return new, {**mets, "step_number": new["step"].astype(jnp.float32)}


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


def files_snapshot(root):
    """Every file under ``root``: relative path -> (bytes, mtime_ns), to assert
    that nothing was added, removed or rewritten."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (f.read(), os.stat(p).st_mtime_ns)
    return out


def trainer(run_dir, **kw):
    """A quiet Trainer for tests: no progress bar, CSV logging only unless given,
    the evaluation program compiled only when a test evaluates (CPU time)."""
    kw.setdefault("enable_progress_bar", False)
    kw.setdefault("compile_evaluation_ahead", False)
    kw.setdefault("log_every_n_steps", 1)
    if "callbacks" not in kw:
        kw["callbacks"] = [jt.CSVLogger()]
    if "logger" not in kw and any(isinstance(c, jt.loggers.Logger) for c in kw["callbacks"]):
        kw["logger"] = False  # only the loggers given (the Trainer would add the missing defaults)
    return jt.Trainer(default_root_dir=run_dir, **kw)


class Scores(jt.Callback):
    """Adds ``score`` to the log row of the steps in ``values`` (step -> value);
    give it before the callbacks that read it."""

    def __init__(self, values: dict[int, float]) -> None:
        self.values = values

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step in self.values:
            metrics["score"] = self.values[trainer.global_step]


class StopAt(jt.Callback):
    """Stops a fit after ``step`` training steps, as an interruption would: the
    run keeps its budget (schedules over it are unchanged)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def needs_state(self, trainer, module, step):
        return step == self.step

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def two_plus_two_on_four_devices(root, make) -> jt.Trainer:
    """Fit ``make()`` 4 steps straight and 2 + checkpoint + resume + 2 under pmap
    on 4 devices (metrics every step, no loggers), the first part a 4-step run
    stopped after 2; assert the two final states equal leaf for leaf and return
    the straight run's Trainer."""
    def run(where, steps, callbacks=()):
        return jt.Trainer(strategy="pmap", devices=4, max_steps=steps, log_every_n_steps=1,
                          default_root_dir=root / where, callbacks=list(callbacks),
                          logger=False, enable_progress_bar=False,
                          compile_evaluation_ahead=False)

    straight = run("straight", 4)
    straight.fit(make())
    first = run("resumed", 4, [jt.ModelCheckpoint(async_save=False), StopAt(2)])
    first.fit(make())
    assert first.global_step == 2
    second = run("resumed", 4)
    second.fit(make(), ckpt_path="last")
    assert_trees_equal(second.state, straight.state)
    return straight


def replicas_equal(tree) -> None:
    """Assert every leaf of ``tree`` has 4 device copies, all equal (typed keys
    compared by their key data)."""
    for leaf in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4 and all(np.array_equal(shards[0], s) for s in shards[1:])


def no_compile_trainer(monkeypatch, devices: int = 4) -> jt.Trainer:
    """A quiet pmap Trainer on ``devices`` devices whose training program must not
    compile: a test of errors raised before compiling fails if it does."""
    from jaxtrainer.strategies import PmapStrategy

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled before validating")

    monkeypatch.setattr(PmapStrategy, "compile_train", no_compile)
    return jt.Trainer(strategy=PmapStrategy(devices=devices), max_steps=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False)


def run_python(code: str, devices: int, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ``devices`` fake CPU devices."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = xla_flags(devices)
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("WANDB_MODE", "disabled")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=timeout, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, f"subprocess failed:\n{out.stdout}\n{out.stderr}"
    return out


class FixedLengthEnv(envs.Env):
    """Episodes of exactly ``length`` steps (truncated), reward 1 per step."""

    name = "FixedLength"
    observation_shape = (1,)
    observation_dtype = jnp.float32
    discrete = True
    num_actions = 2
    action_size = 1
    action_low = None
    action_high = None

    def __init__(self, length: int = 10) -> None:
        self.max_episode_steps = length

    def reset_env(self, key):
        return jnp.zeros((1,), jnp.float32), jnp.zeros((), jnp.int32)

    def step_env(self, key, t, action):
        t = t + 1
        final_obs = t.astype(jnp.float32)[None]
        done = t >= self.max_episode_steps
        t = jnp.where(done, 0, t)
        return t.astype(jnp.float32)[None], t, jnp.float32(1.0), jnp.bool_(False), done, final_obs


class EnvCounter(jt.Module):
    """Steps ``num_envs`` FixedLengthEnv envs ``rollout`` steps per training step
    (per-device env state kept in the training state) and evaluates on fresh
    episodes with :func:`jaxtrainer.envs.evaluate_policy`."""

    def __init__(self, num_envs: int = 4, rollout: int = 3, eval_episodes: int = 4,
                 eval_steps: int = 25) -> None:
        self.env = FixedLengthEnv()
        self.num_envs, self.rollout = num_envs, rollout
        self.eval_episodes, self.eval_steps = eval_episodes, eval_steps
        self.env_steps_per_step = num_envs * rollout

    def init_state(self, key):
        n = self.num_envs // jt.distributed.axis_size()
        _, env_state = self.env.reset_batch(fold_in_device(key), n)
        return {"env": env_state, "w": jnp.zeros(())}

    def training_step(self, state, key):
        env_state = state["env"]
        infos = []
        for i in range(self.rollout):
            actions = jnp.zeros(env_state.episode_length.shape, jnp.int32)
            _, env_state, info = self.env.step_batch(jax.random.fold_in(key, i), env_state, actions)
            infos.append(info)
        done = jnp.stack([i.done for i in infos])
        ret = jnp.stack([i.episode_return for i in infos])
        return ({"env": env_state, "w": state["w"] + 1.0},
                {"train/episode_return": jt.metrics.Mean.of(ret, mask=done)})

    def evaluation_step(self, state, key):
        out = envs.evaluate_policy(
            self.env, lambda p, obs, k: jnp.zeros(obs.shape[:1], jnp.int32), state["w"], key,
            self.eval_episodes, max_steps=self.eval_steps)
        return {"eval/episode_return": out["episode_return"], "eval/episode_length": out["episode_length"]}
