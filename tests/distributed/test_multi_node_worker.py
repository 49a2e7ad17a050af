"""The program every rank runs in the multi-process tests (no tests here).

    jaxtrainer launch --nproc-per-node 2 tests/distributed/test_multi_node_worker.py MODE OUT [ARGS]

MODE ``train``: a toy run with every built-in callback on every process,
a long rank-0-only pause between two intervals, results in ``OUT``.
MODE ``population``: PopulationTrainer fitness history to ``OUT``.
MODE ``all``: ``train``, then resume a one-process checkpoint (the newest run
under ``ROOT``, written by the test) in these two processes, then ``population``.
MODE ``forever``: trains until killed (failure tests); ``forever OUT N`` checkpoints
every N steps; ``forever OUT N S``: rank 0 stalls in a hook from step S on.
MODE ``resume``: ``resume OUT STEPS``: resumes ``OUT/runs`` (``ckpt_path="last"``) to
STEPS, then trains the same module from scratch to STEPS; both states to ``OUT``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtrainer as jt
from jaxtrainer import distributed as jd

ROWS = 8  # global rows of the sharded leaf


class Toy(jt.Module):
    """Linear regression (replicated params, pmean-ed gradients) plus a sharded
    leaf ``rows: float32[ROWS]`` whose row ``i`` grows by ``i`` per step on
    whichever device holds it, so every state is device-count independent."""

    env_steps_per_step = ROWS

    def __init__(self):
        import optax

        self.optimizer = optax.sgd(0.05)

    def validate(self, num_devices):
        jd.local_size(ROWS, "rows", num_devices)

    def _rows(self):
        n = jd.local_size(ROWS, "rows")
        return jd.axis_index() * n + jnp.arange(n, dtype=jnp.float32)

    def init_state(self, key):
        params = {"w": jnp.zeros((3,)), "b": jnp.zeros(())}
        return {"params": params, "opt": self.optimizer.init(params),
                "rows": jnp.zeros_like(self._rows())}

    def training_step(self, state, key):
        n = jd.local_size(ROWS, "rows")
        x = jax.random.normal(jax.random.key(1), (ROWS, 3))
        y = x @ jnp.array([1.0, -2.0, 0.5]) + 0.3
        start = jd.axis_index() * n
        x, y = jax.lax.dynamic_slice_in_dim(x, start, n), jax.lax.dynamic_slice_in_dim(y, start, n)

        def loss_fn(p, x, y):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2), {}

        params, opt, loss, _ = jd.averaged_update(loss_fn, state["params"], state["opt"],
                                                  self.optimizer, x, y)
        rows = state["rows"] + self._rows()
        return {"params": params, "opt": opt, "rows": rows}, {"loss": loss}

    def evaluation_step(self, state, key):
        return {"eval/rows": jt.Mean.of(state["rows"])}


class SlowRankZero(jt.Callback):
    """Rank 0 alone does ``seconds`` of host work once, between two collectives."""

    def __init__(self, seconds):
        self.seconds, self.done = seconds, False

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.is_global_zero and not self.done and trainer.global_step >= 10:
            self.done = True
            time.sleep(self.seconds)


def record_writes(root):
    """Python-level files opened for writing under ``root`` by this process."""
    seen = []

    def hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path, mode = os.fsdecode(args[0]), args[1]
            if isinstance(mode, str) and set(mode) & set("wax+") and \
                    os.path.abspath(path).startswith(root):
                seen.append(os.path.relpath(path, root))
        if event == "os.mkdir" and os.fsdecode(args[0]).startswith(root):
            seen.append(os.path.relpath(os.fsdecode(args[0]), root) + "/")

    sys.addaudithook(hook)
    return seen


def train(out, max_steps, slow_seconds):
    root = os.path.join(out, "runs")
    writes = record_writes(os.path.abspath(root))
    callbacks = [jt.callbacks.NaNGuard(check_state=True), jt.callbacks.EarlyStopping("loss", patience=1000),
                 jt.callbacks.LearningRateMonitor(), jt.callbacks.ThroughputMonitor(),
                 jt.callbacks.Timer(duration=3600.0), jt.CSVLogger(), jt.TensorBoardLogger(),
                 jt.callbacks.ModelCheckpoint(every_n_steps=5), SlowRankZero(slow_seconds)]
    trainer = jt.Trainer(strategy="multi_node", max_steps=max_steps, log_every_n_steps=5,
                         eval_every_n_steps=10, callbacks=callbacks, default_root_dir=root,
                         enable_progress_bar=True)
    trainer.fit(Toy())
    result = trainer.evaluate(Toy())
    save_state(trainer, os.path.join(out, "state.npz"))  # the state of the last checkpoint
    rank = jd.process_index()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "process_count": jd.process_count(),
                   "global_ranks": jd.global_ranks(), "log_dir": trainer.log_dir,
                   "loss": trainer.callback_metrics["loss"], "eval": result["eval/rows"],
                   "num_devices": trainer.num_devices, "writes": writes,
                   "broadcast": jd.broadcast_from_zero(f"from rank {rank}")}, f)
    jd.barrier("worker-done")


def save_state(trainer, path):
    """Every leaf of ``trainer.state`` (gathered over the processes) to ``path`` on rank 0."""
    from jaxtrainer import checkpoint as ckpt

    host = ckpt.host_copy(trainer.state)  # a collective: every rank takes part
    if jd.process_index() == 0:
        flat = jax.tree_util.tree_flatten_with_path(host)[0]
        np.savez(path, **{jax.tree_util.keystr(k): v for k, v in flat})


def resume(out, root, max_steps, name="resumed.npz", ckpt_path="last"):
    """Resume the newest checkpoint under ``root`` in every process (``ckpt_path=None``:
    train from scratch); the final state to ``out/name``."""
    trainer = jt.Trainer(strategy="multi_node", max_steps=max_steps, log_every_n_steps=5,
                         default_root_dir=root, logger=False, enable_progress_bar=False,
                         callbacks=[jt.callbacks.ModelCheckpoint(every_n_steps=10)])
    trainer.fit(Toy(), ckpt_path=ckpt_path)
    save_state(trainer, os.path.join(out, name))


def population(out):
    from jaxtrainer.population import PopulationTrainer
    from tests.population.test_population import GENERATIONS, Recording

    trainer = PopulationTrainer(10, strategy="multi_node", max_generations=GENERATIONS,
                                log_every_n_generations=3, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Recording())
    history = np.asarray(jax.device_get(trainer.state["history"]))  # replicated leaf
    if jd.process_index() == 0:
        np.save(os.path.join(out, "history.npy"), history)


class Stall(jt.Callback):
    """Rank 0 alone, from step ``at`` on (at an interval's end), sits in this hook
    (in no collective) until killed."""

    def __init__(self, at):
        self.at = at

    def on_train_steps_end(self, trainer, module, metrics):
        if trainer.is_global_zero and trainer.global_step >= self.at:
            print(f"pid {os.getpid()} stalling at step {trainer.global_step}", flush=True)
            time.sleep(600)


def forever(out, every=0, stall_at=0):
    callbacks = [jt.callbacks.ModelCheckpoint(every_n_steps=every)] if every else []
    callbacks += [Stall(stall_at)] if stall_at else []
    trainer = jt.Trainer(strategy="multi_node", max_steps=10**9, log_every_n_steps=50,
                         default_root_dir=os.path.join(out, "runs"), logger=False,
                         callbacks=callbacks, enable_checkpointing=bool(every),
                         enable_progress_bar=False)

    class Beat(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            print(f"pid {os.getpid()} step {trainer.global_step}", flush=True)

    trainer.callbacks.append(Beat())
    trainer.fit(Toy())


def late(out):
    """Rank 1 reaches the training program 35 s after rank 0: longer than XLA's
    CPU collectives (gloo) wait for a peer, shorter than the launch timeout."""
    class Late(jt.Callback):
        def on_fit_start(self, trainer, module):
            if jd.process_index() == 1:
                time.sleep(35)

    trainer = jt.Trainer(strategy="multi_node", max_steps=4, log_every_n_steps=2,
                         default_root_dir=os.path.join(out, "runs"), callbacks=[Late()],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Toy())
    print(f"done at step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    mode, out, *rest = sys.argv[1:]
    # What rank 1 creates is unreadable to others (mode 600/700, tensorstore's files
    # included): the tests tell who wrote a file by its permission bits.
    os.umask(0o077 if os.environ.get("JAX_PROCESS_ID", "0") != "0" else 0o022)
    if mode == "train":
        train(out, int(rest[0]), float(rest[1]))
    elif mode == "all":  # one launch for several tests: processes are expensive
        train(out, int(rest[0]), float(rest[1]))
        resume(out, rest[2], int(rest[0]))
        population(out)
    elif mode == "population":
        population(out)
    elif mode == "forever":
        forever(out, *map(int, rest))
    elif mode == "resume":
        resume(out, os.path.join(out, "runs"), int(rest[0]))
        resume(out, os.path.join(out, "whole"), int(rest[0]), "whole.npz", ckpt_path=None)
    elif mode == "late":
        late(out)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
