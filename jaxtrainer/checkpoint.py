"""Checkpoint files: orbax-checkpoint, one logical copy, no pickle.

A checkpoint directory (``<log_dir>/checkpoints/<step>/``) holds two orbax items:

* ``state``: ``{"module": <module state>, "rng": <root key>}`` as arrays. Typed
  PRNG keys are stored as their ``uint32`` key data and rewrapped with their
  implementation on restore (FIELD_REPORTS F14).
* ``meta``: JSON with the trainer counters, the seed, the strategy and device
  count it was written under, every callback's ``state_dict()`` and the key
  implementations.

Arrays are global (one logical copy, never per-device replicas), so a
checkpoint written under any strategy restores under any other (F12, F13);
restoring reads arrays and JSON only and runs no code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

STATE, META = "state", "meta"


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def encode_keys(tree: Any) -> tuple[Any, dict[str, str]]:
    """Replace typed key leaves by their key data; return the tree and
    ``{leaf path: key implementation name}``."""
    impls: dict[str, str] = {}

    def enc(path, x):
        if _is_key(x):
            impls[jax.tree_util.keystr(path)] = str(jax.random.key_impl(x))
            return jax.random.key_data(x)
        return x

    return jax.tree_util.tree_map_with_path(enc, tree), impls


def _abstract_encoded(abstract: Any) -> Any:
    """Abstract (ShapeDtypeStruct) tree of :func:`encode_keys`' output."""

    def enc(x):
        if _is_key(x):
            data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(x.shape, x.dtype))
            return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=x.sharding)
        return x

    return jax.tree.map(enc, abstract)


def decode_keys(tree: Any, impls: dict[str, str]) -> Any:
    def dec(path, x):
        impl = impls.get(jax.tree_util.keystr(path))
        return jax.random.wrap_key_data(x, impl=impl) if impl else x

    return jax.tree_util.tree_map_with_path(dec, tree)


def manager(directory: str | os.PathLike, *, max_to_keep: int | None = None,
            best_fn=None, best_mode: str = "max", async_save: bool = True) -> ocp.CheckpointManager:
    """An orbax CheckpointManager for a Trainer's checkpoint directory."""
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        best_fn=best_fn,
        best_mode=best_mode,
        keep_checkpoints_without_metrics=True,
        enable_async_checkpointing=async_save,
        create=True,
    )
    return ocp.CheckpointManager(os.path.abspath(directory), options=options)


def save(mgr: ocp.CheckpointManager, step: int, state: Any, meta: dict[str, Any],
         metrics: dict[str, float] | None = None, force: bool = True) -> bool:
    """Write ``state`` (a pytree of global arrays) and ``meta`` (JSON) at ``step``.

    With asynchronous saving the arrays are copied off the devices before this
    returns, so later (donating) steps cannot change what is written (F15); the
    files appear atomically when the background write finishes.
    """
    encoded, impls = encode_keys(state)
    meta = {**meta, "key_impls": impls}
    return mgr.save(
        step,
        args=ocp.args.Composite(
            **{STATE: ocp.args.StandardSave(encoded), META: ocp.args.JsonSave(meta)}
        ),
        metrics=metrics,
        force=force,
    )


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON metadata of the checkpoint at ``path`` (a step directory)."""
    path = Path(path).absolute()  # orbax requires absolute paths
    with ocp.CheckpointManager(path.parent) as mgr:
        return mgr.restore(int(path.name), args=ocp.args.Composite(
            **{META: ocp.args.JsonRestore()}))[META]


def restore(path: str | os.PathLike, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
    """Restore the checkpoint at ``path`` (a step directory) into the shapes,
    dtypes and shardings of ``abstract_state`` (``jax.ShapeDtypeStruct`` leaves
    with ``sharding`` set). Returns ``(state, meta)``.

    Raises:
      FileNotFoundError: ``path`` is not a checkpoint.
      ValueError: the stored arrays do not match ``abstract_state``'s shapes.
    """
    path = Path(path).absolute()  # orbax requires absolute paths
    if not path.is_dir() or not (path / META).exists():
        raise FileNotFoundError(f"no checkpoint at {path} (expected a directory with '{META}/')")
    meta = read_meta(path)
    target = _abstract_encoded(abstract_state)
    with ocp.CheckpointManager(path.parent) as mgr:
        try:
            restored = mgr.restore(int(path.name), args=ocp.args.Composite(
                **{STATE: ocp.args.StandardRestore(target)}))[STATE]
        except ValueError as e:
            raise ValueError(f"checkpoint {path} does not match this module's state: {e}") from e
    want = jax.tree.map(lambda x: (tuple(x.shape), jnp.dtype(x.dtype)), target)
    got = jax.tree.map(lambda x: (tuple(x.shape), jnp.dtype(x.dtype)), restored)
    if want != got:
        raise ValueError(f"checkpoint {path} does not match this module's state shapes:\n"
                         f"  expected {want}\n  found    {got}")
    return decode_keys(restored, meta.get("key_impls", {})), meta


def latest_step_dir(directory: str | os.PathLike) -> Path | None:
    """The newest complete step directory under a ``checkpoints`` directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    steps = ocp.utils.checkpoint_steps(directory)
    steps = [s for s in steps if (directory / str(s) / META).exists()]
    return directory / str(max(steps)) if steps else None


def find_last(default_root_dir: str | os.PathLike) -> Path | None:
    """The newest checkpoint of the newest run under ``default_root_dir``
    (``version_*/checkpoints/<step>``), or None."""
    root = Path(default_root_dir)
    versions = sorted(
        (p for p in root.glob("version_*") if p.name[8:].isdigit()),
        key=lambda p: int(p.name[8:]), reverse=True)
    for v in versions:
        found = latest_step_dir(v / "checkpoints")
        if found is not None:
            return found
    return None


def resolve(ckpt_path: str | os.PathLike, default_root_dir: str | os.PathLike) -> Path:
    """A ``ckpt_path`` argument (``"last"``, a run's ``checkpoints`` dir or a
    step dir) as a step directory.

    Raises:
      FileNotFoundError: nothing to resume from, naming where it looked.
    """
    if str(ckpt_path) == "last":
        found = find_last(default_root_dir)
        if found is None:
            raise FileNotFoundError(
                f"ckpt_path='last': no checkpoint under {os.path.abspath(default_root_dir)}/version_*/checkpoints")
        return found
    path = Path(ckpt_path)
    if (path / META).exists():
        return path
    found = latest_step_dir(path) or latest_step_dir(path / "checkpoints")
    if found is None:
        raise FileNotFoundError(f"ckpt_path={os.fspath(ckpt_path)!r}: no checkpoint found there")
    return found
