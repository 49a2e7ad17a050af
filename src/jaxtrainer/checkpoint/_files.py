"""Checkpoint files: orbax-checkpoint, one logical copy, no pickle.

A checkpoint directory (``<log_dir>/checkpoints/<step>/``) holds two orbax items:

* ``state``: ``{"module": <module state>, "rng": <root key>}`` as arrays. Typed
  PRNG keys are stored as their ``uint32`` key data and rewrapped with their
  implementation on restore, so a resumed run draws the same keys.
* ``meta``: JSON with the trainer counters, the seed, the strategy and device
  count it was written under, every callback's ``state_dict()``, the key
  implementations and the shape and dtype of every zero-size array (orbax
  stores no array without elements: such a leaf is stored as ``None`` and
  rebuilt from its shape and dtype on restore, e.g. a brax MJX ``Data``'s
  empty contact arrays).

Arrays are global (one logical copy, never per-device replicas), so a
checkpoint written under any strategy restores under any other and on any device count;
restoring reads arrays and JSON only and runs no code.

Processes (``multi_node``): only process 0 writes checkpoint files. Saving is a
collective: every process takes part in gathering the state's sharded arrays
(an all-gather inside one small compiled identity per array), then process 0
alone copies them to host memory and writes them with an orbax
``CheckpointManager`` whose ``MultiprocessingOptions`` name process 0 as the
only active process (so orbax runs no barrier with the others and no other
process writes a shard, metadata or commit file). Every process then waits for
process 0 where a :class:`Manager` says so. Restoring is not a collective:
every process reads the files itself into host memory and places its own shards
on the global mesh. Several processes therefore need a checkpoint directory on a
filesystem that every process sees (shared), with a file written and closed on
one machine visible on the others once the writer's barrier has passed (NFS,
Lustre, GCS FUSE and the like; a machine-local ``/tmp`` is not).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import shutil
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer.distributed._process import broadcast_from_zero
from jaxtrainer.rundir import run_layout, storage

if TYPE_CHECKING:
    import orbax.checkpoint as ocp


def _ocp():
    """orbax.checkpoint, imported on the first save or restore (it takes 1/8 s to
    import: commands that only print or check a config never pay it)."""
    import orbax.checkpoint

    return orbax.checkpoint

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


EMPTY_ARRAYS = "empty_arrays"
"""The ``meta`` entry ``{leaf name: {"shape": [...], "dtype": name}}`` of the
zero-size arrays a checkpoint holds (stored as ``None`` leaves)."""


def _is_empty(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and math.prod(x.shape) == 0


def _drop_empty(tree: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    """``tree`` with its zero-size array leaves replaced by ``None`` (orbax
    refuses to save them), and ``{leaf name: {"shape": [...], "dtype": name}}`` of them."""
    empty: dict[str, dict[str, Any]] = {}

    def drop(path: tuple[Any, ...], x: Any) -> Any:
        if not _is_empty(x):
            return x
        empty[_leaf_name(path)] = {"shape": [int(d) for d in x.shape], "dtype": jnp.dtype(x.dtype).name}
        return None

    return jax.tree_util.tree_map_with_path(drop, tree), empty


def _refill_empty(host: Any, target: Any) -> Any:
    """``host`` (read with :func:`_drop_empty`'s ``None`` leaves) with every
    zero-size leaf of ``target`` rebuilt in its shape and dtype."""
    return jax.tree.map(lambda h, t: np.zeros(t.shape, t.dtype) if h is None and _is_empty(t) else h,
                        host, target, is_leaf=lambda x: x is None)


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


_ORBAX_CALLS = threading.RLock()
"""Held around every call into orbax that starts or reads a checkpoint (a
manager's creation, save, delete, listing and close, a handler's read): orbax
keeps per process, not per manager, the operation id and the signals its
asynchronous saves wait on (``OperationIdGenerator``), and reads them while a
save starts, so two fits saving at once in threads of one process took each
other's and failed ("File exists", "Directory not empty", a missing file) or
hung. The background writes run unlocked; each holds the ids it started with."""


def _only(process: int) -> ocp.options.MultiprocessingOptions:
    """orbax options for a manager that runs on ``process`` alone (no barrier
    with, and no files from, any other process)."""
    return _ocp().options.MultiprocessingOptions(primary_host=process, active_processes={process})


class CheckpointWriteError(storage.StorageError):
    """A checkpoint could not be written (disk full, a quota, a file size limit,
    a read-only directory, a killed writer): one line naming the step directory,
    the error and the newest complete checkpoint. Nothing of the failed step is
    left behind, and complete checkpoints are never removed for it."""


class CheckpointReadError(ValueError):
    """A checkpoint that cannot be restored: one line naming it (the recipe
    commands, ``jaxtrainer eval`` and :func:`jaxtrainer.load_policy` report it
    as it is, before anything is written)."""


class DamagedCheckpointError(CheckpointReadError):
    """A checkpoint's files are damaged (missing, truncated, not what was
    written): the message names the checkpoint, the damaged file and the
    earlier complete checkpoints to resume from instead.

    Attributes:
      path: the step directory.
      file: the damaged file (or the directory holding it).
    """

    def __init__(self, path: str | os.PathLike, file: str | os.PathLike, problem: str) -> None:
        self.path, self.file = Path(path), Path(file)
        super().__init__(f"checkpoint {self.path} is damaged: {self.file}: {problem}; "
                         f"{_earlier_steps(self.path)}")


class CheckpointMismatchError(CheckpointReadError):
    """A checkpoint's arrays do not match the module's state (names, shapes,
    dtypes): it was written with another config, network or environment."""


def _earlier_steps(path: Path) -> str:
    """The complete checkpoints before the step directory ``path``, newest first."""
    here = int(path.name) if path.name.isdigit() else None
    earlier = [s for s in reversed(steps(path.parent)) if here is None or s < here]
    if not earlier:
        return f"there is no earlier checkpoint in {path.parent}"
    more = ", ..." if len(earlier) > 8 else ""
    return (f"earlier steps to resume from: {', '.join(map(str, earlier[:8]))}{more} "
            f"(e.g. {path.parent / str(earlier[0])})")


class Manager:
    """A checkpoint directory that only process 0 writes (see the module
    docstring); in a single process, an orbax ``CheckpointManager`` with
    host-side copies of the arrays.

    Create it, and call :meth:`save`, :meth:`all_steps`,
    :meth:`wait_until_finished` and :meth:`close` on **every** process in the
    same order: they are collectives with several processes (a process that
    skips one hangs the others). Process 0
    creates ``directory`` and is the only process with an orbax manager; only
    :meth:`delete` runs on process 0 alone (other processes do nothing).
    Saves are atomic: orbax writes ``<step>.orbax-checkpoint-tmp*`` and renames
    it to ``<step>`` when complete (:func:`latest_step_dir` ignores the rest).

    Errors: an exception on process 0 while it writes or waits (e.g. disk
    full) is raised there unchanged, and on every other process as a
    ``RuntimeError`` naming it, so no process hangs on the others.
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = None,
                 best_fn=None, best_mode: str = "max", async_save: bool = True) -> None:
        self.directory = _absolute(directory)
        self.async_save = async_save
        self.is_writer = jax.process_index() == 0
        self._orbax: ocp.CheckpointManager | None = None
        self._pending: list[int] = []  # steps whose (asynchronous) write is not known done
        self._failed: list[int] = []  # steps whose write failed: no temporary directory stays

        def create(_: Any) -> None:
            with storage.writing("the checkpoint directory", self.directory):
                self.directory.mkdir(parents=True, exist_ok=True)
            options = _ocp().CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                best_fn=best_fn,
                best_mode=best_mode,
                keep_checkpoints_without_metrics=True,
                enable_async_checkpointing=async_save,
                create=False,  # made above: orbax cannot create it with active_processes set
                multiprocessing_options=_only(0),
            )
            with _ORBAX_CALLS:
                self._orbax = _ocp().CheckpointManager(
                    self.directory, options=options,
                    item_handlers=_handlers(0, _ocp().StandardCheckpointHandler))

        self._on_zero("setup", create, run=self.is_writer)
        _quiet_orbax_write_errors()
        _drop_closed_loop_reports()  # a failed write's other writers end late, as reads do

    def _on_zero(self, what: str, fn, run: bool | None = None) -> Any:
        """Run ``fn(orbax manager)`` on process 0 (where it is open), then tell
        every process whether it raised (a collective with several processes:
        the others also wait for process 0)."""
        result, error = None, None
        if self._orbax is not None if run is None else run:
            try:
                result = fn(self._orbax)
            except Exception as e:  # re-raised below, after the others know
                error = e
        if jax.process_count() > 1:
            message = broadcast_from_zero("" if error is None else f"{type(error).__name__}: {error}")
            if message and error is None:
                raise RuntimeError(f"jaxtrainer: checkpoint {what} in {self.directory} failed on "
                                   f"process 0 (the only writer): {message}")
        if error is not None:
            raise error
        return result

    def _written(self, what: str, fn) -> Any:
        """:meth:`_on_zero` of a call that may complete writes (a save, a wait):
        a write that fails is raised as :meth:`_write_error`."""
        pending, self._pending = self._pending, []
        try:
            return self._on_zero(what, fn)
        except Exception as error:
            raise self._write_error(pending, error) from error

    def _write_error(self, pending: list[int], error: Exception) -> CheckpointWriteError:
        """Remove the temporary directories of the ``pending`` steps (process
        0) and say what failed in one line: the step directory, the error and
        the newest complete checkpoint."""
        self._failed += pending
        self._remove_temporary(pending)
        steps = ", ".join(map(str, pending)) or "?"
        cause = _os_error(error) or _tensorstore_os_error(str(error))
        detail = storage.describe(cause) if cause is not None else \
            f"{type(error).__name__}: {_short(error)}"
        return CheckpointWriteError(
            f"checkpoint of step {steps} could not be written to {self.directory}: "
            f"{detail}; the newest complete "
            f"checkpoint is {latest_step_dir(self.directory) or 'none'}", cause, self.directory)

    def _remove_temporary(self, steps: list[int]) -> None:
        """Remove the temporary directories of ``steps`` (process 0), once
        orbax's writer threads have ended (a failed save's other writers may
        still be running when its error is raised: they would write again
        into a directory removed before them)."""
        if self.is_writer and steps:
            _join_writer_threads()
            for step in steps:
                for tmp in self.directory.glob(f"{step}{run_layout.ORBAX_TMP_MARK}*"):
                    shutil.rmtree(tmp, ignore_errors=True)

    def save(self, step: int, state: Any, meta: dict[str, Any],
             metrics: dict[str, float] | None = None, force: bool = True) -> bool:
        """Write ``state`` (global arrays, key data already encoded) and
        ``meta`` (JSON) at ``step``.

        Every process gathers the sharded arrays (collective); process 0 copies
        them to host memory before this returns, so later (donating) steps
        cannot change what is written, and writes them in the background
        (``async_save``) or before returning. A synchronous save returns on
        every process only once process 0 has written the files. Returns orbax's
        answer on process 0 (whether a save started) and True elsewhere.
        """
        host = host_copy(state, self.is_writer)

        def write(mgr: ocp.CheckpointManager) -> bool:
            with _ORBAX_CALLS:
                started = mgr.save(step, args=_ocp().args.Composite(
                    **{STATE: _ocp().args.StandardSave(host), META: _ocp().args.JsonSave(meta)}),
                    metrics=metrics, force=force)
            if not self.async_save:
                mgr.wait_until_finished()
            return bool(started)

        # orbax waits for the previous asynchronous write before starting this one
        self._pending.append(step)
        started = self._written("save", write)
        if self.async_save:
            self._pending = [step]
        return True if started is None else started

    def all_steps(self) -> list[int]:
        """Steps in the directory (started saves included), as process 0 sees
        them, on every process (a collective with several processes)."""
        with _ORBAX_CALLS:
            steps = sorted(int(s) for s in self._orbax.all_steps()) if self._orbax is not None else []
        if jax.process_count() > 1:
            n = broadcast_from_zero(len(steps))
            # padded to a power of two: few distinct shapes, so few compiled broadcasts
            padded = np.full(1 << max(n - 1, 0).bit_length(), -1, np.int32)
            padded[:len(steps)] = steps
            steps = [int(s) for s in broadcast_from_zero(padded)[:n]]
        return steps

    def delete(self, step: int) -> None:
        """Delete ``step`` (process 0 deletes the files; elsewhere nothing)."""
        if self._orbax is not None:
            with _ORBAX_CALLS:
                self._orbax.delete(step)

    def wait_until_finished(self, sync: bool = True, report: bool = True) -> None:
        """Block until process 0 has written every started save. With
        ``sync`` (default; a collective with several processes) every process
        waits for that, so the files are complete for all of them afterwards;
        ``sync=False`` waits on process 0 only (error paths, where another
        process may be gone): a write that failed as well is cleaned up and,
        with ``report``, said in one line on stderr instead of raised."""
        if sync:
            self._written("wait", lambda mgr: mgr.wait_until_finished())
        elif self._orbax is not None:
            # an error path (process 0 alone): the error being raised is the one to see
            pending, self._pending = self._pending, []
            try:
                self._orbax.wait_until_finished()
            except Exception as error:
                failed = self._write_error(pending, error)
                if report:
                    print(f"jaxtrainer: {failed}", file=sys.stderr, flush=True)

    def close(self, sync: bool = True, report: bool = True) -> None:
        """Wait as :meth:`wait_until_finished` (``sync`` and ``report``
        likewise), then close."""
        try:
            self.wait_until_finished(sync, report)
        finally:
            if self._orbax is not None:
                orbax, self._orbax = self._orbax, None
                try:
                    with _ORBAX_CALLS:
                        orbax.close()
                except Exception:
                    if not self._failed:
                        raise
                    # orbax raises a failed write's error again: reported already
            # a background writer of a failed step may have outlived the first cleanup
            self._remove_temporary(self._failed)

    def __enter__(self) -> Manager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(sync=exc[0] is None)


def _os_error(error: BaseException) -> OSError | None:
    """The first ``OSError`` with an error number in ``error``'s chain of
    causes (orbax wraps the write's own error), or ``None``."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno is not None:
            return error
        error = error.__cause__ or error.__context__
    return None


class _OrbaxWriteErrors(logging.Filter):
    """Drops orbax's error records (a traceback each, from its writer
    threads, or asyncio's "Task exception was never retrieved" for one of
    orbax's write tasks): a failed write reaches the caller as one
    :class:`CheckpointWriteError` line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        orbax = f"{os.sep}orbax{os.sep}"
        if orbax in (record.pathname or ""):
            return False
        error = record.exc_info[1] if record.exc_info else None
        frames = traceback.extract_tb(error.__traceback__) if error is not None else []
        return not any(orbax in frame.filename for frame in frames)


def _quiet_orbax_write_errors() -> None:
    """Add :class:`_OrbaxWriteErrors` to the loggers orbax's failures reach
    (``absl``, and ``asyncio`` for its write tasks), once each."""
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OrbaxWriteErrors) for f in logger.filters):
            logger.addFilter(_OrbaxWriteErrors())


def _tensorstore_os_error(message: str) -> OSError | None:
    """The OS error a tensorstore error ``message`` reports
    (``... Failed writing: "<file>": ... [os_error_code='28']``), or ``None``."""
    code = re.search(r"os_error_code='?(\d+)", message)
    if code is None:
        return None
    files = re.findall(r'Failed writing: "([^"]+)"', message)
    number = int(code.group(1))
    return OSError(number, os.strerror(number), files[-1] if files else None)


def _short(error: BaseException, limit: int = 400) -> str:
    """``error``'s message on one line, without the store specification
    tensorstore appends, at most ``limit`` characters."""
    text = " ".join(str(error).split()).split(" [tensorstore_spec=")[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _join_writer_threads(timeout: float = 60.0) -> None:
    """Wait (up to ``timeout`` seconds each) for the threads orbax started to
    write and finalize checkpoints (its own thread classes; never another
    library's threads)."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and thread.is_alive() \
                and type(thread).__module__.startswith("orbax."):
            try:
                thread.join(timeout)
            except Exception:  # noqa: BLE001 - orbax's join re-raises the thread's error: reported already
                pass


def _handlers(process: int, state_handler) -> dict[str, Any]:
    options = _only(process)
    return {STATE: state_handler(multiprocessing_options=options),
            META: _ocp().JsonCheckpointHandler(multiprocessing_options=options)}


@functools.lru_cache(maxsize=64)
def _gather_to(sharding: jax.sharding.Sharding):
    return jax.jit(lambda x: x, out_shardings=sharding)


def host_copy(tree: Any, keep: bool = True) -> Any:
    """Numpy copies of every leaf of ``tree`` (global arrays), or ``None``
    leaves when ``keep`` is False.

    A collective with several processes: an array sharded over other
    processes' devices is all-gathered (one small compiled identity per array,
    one array at a time to bound device memory), so every process must call it
    with the same tree. Replicated and local arrays are copied without
    communication; nothing is copied where ``keep`` is False.
    """

    def get(x: Any) -> Any:
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            if isinstance(x.sharding, jax.sharding.NamedSharding):
                full = _gather_to(x.sharding.update(spec=jax.sharding.PartitionSpec()))(x)
                x = full.addressable_data(0)
            else:  # not made by a jaxtrainer strategy: JAX's generic gather
                from jax.experimental import multihost_utils

                x = multihost_utils.process_allgather(x, tiled=True)
        elif isinstance(x, jax.Array) and not x.is_fully_addressable:
            x = x.addressable_data(0)  # replicated: this process holds the whole array
        # a copy, never a view of a device buffer that a later step may donate
        return np.array(x, copy=True) if keep else None

    return jax.tree.map(get, tree)


def manager(directory: str | os.PathLike, *, max_to_keep: int | None = None,
            best_fn=None, best_mode: str = "max", async_save: bool = True) -> Manager:
    """A :class:`Manager` for a Trainer's checkpoint directory (create it on
    every process; only process 0 creates the directory and writes)."""
    return Manager(directory, max_to_keep=max_to_keep, best_fn=best_fn, best_mode=best_mode,
                   async_save=async_save)


def save(mgr: Manager | ocp.CheckpointManager, step: int, state: Any, meta: dict[str, Any],
         metrics: dict[str, float] | None = None, force: bool = True) -> bool:
    """Write ``state`` (a pytree of global arrays) and ``meta`` (JSON) at ``step``.

    Every process must call it (see :meth:`Manager.save`): only process 0
    writes. The arrays are copied to host memory before this returns, so later
    (donating) steps cannot change what is written; with asynchronous
    saving the files appear atomically when the background write finishes.
    Zero-size arrays are kept as their shape and dtype in ``meta``
    (:data:`EMPTY_ARRAYS`) and rebuilt by :func:`restore`.

    ``mgr`` may also be a plain orbax ``CheckpointManager`` in a single process.

    Raises:
      TypeError: a plain orbax ``CheckpointManager`` with several processes
        (it would write from every process); use :func:`manager`.
    """
    encoded, impls = encode_keys(state)
    encoded, empty = _drop_empty(encoded)
    meta = {**meta, "key_impls": impls, **({EMPTY_ARRAYS: empty} if empty else {})}
    if isinstance(mgr, Manager):
        return mgr.save(step, encoded, meta, metrics=metrics, force=force)
    if jax.process_count() > 1:
        raise TypeError("jaxtrainer.checkpoint.save: with several processes pass a "
                        "jaxtrainer.checkpoint.manager(...), not an orbax CheckpointManager, "
                        "so that only process 0 writes")
    host = host_copy(encoded)
    with _ORBAX_CALLS:
        return mgr.save(step, args=_ocp().args.Composite(
            **{STATE: _ocp().args.StandardSave(host), META: _ocp().args.JsonSave(meta)}),
            metrics=metrics, force=force)


def _absolute(path: str | os.PathLike) -> Path:
    """``path`` absolute and without ``.`` or ``..`` parts (``os.path.abspath``):
    orbax and TensorStore take absolute paths and refuse one that holds ``..``
    (``Invalid file path``), which ``../runs/...`` given by a user would."""
    return Path(os.path.abspath(path))


def _read(path: Path, item: str, args: ocp.args.CheckpointArgs | None = None) -> Any:
    """Read ``item`` of the step directory ``path`` on this process alone (an
    orbax handler whose options make this process the only active one: no
    barrier with, and nothing written for, any other process)."""
    path = _absolute(path)
    only_me = _only(jax.process_index())
    if item == META:
        handler = _ocp().JsonCheckpointHandler(multiprocessing_options=only_me)
    else:
        handler = _ocp().PyTreeCheckpointHandler(multiprocessing_options=only_me)
    with _ORBAX_CALLS:
        try:
            return handler.restore(path / item, args=args)
        finally:
            handler.close()


META_FILE = "metadata"
"""The JSON file of the ``meta`` item (orbax's ``JsonCheckpointHandler``)."""


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON metadata of the checkpoint at ``path`` (a step directory).
    Reads on the calling process only (not a collective).

    Raises:
      FileNotFoundError: ``path`` has no ``meta`` directory (not a checkpoint).
      DamagedCheckpointError: its ``meta/metadata`` is missing or not a JSON
        object (a ValueError naming the file).
    """
    path = _absolute(path)
    if not (path / META).is_dir():
        raise FileNotFoundError(f"no checkpoint at {path} (expected a directory with '{META}/')")
    file = path / META / META_FILE
    try:
        meta = json.loads(file.read_bytes())
    except FileNotFoundError:
        raise DamagedCheckpointError(path, file, "missing") from None
    except (ValueError, OSError) as e:  # not JSON (UnicodeDecodeError is a ValueError), unreadable
        raise DamagedCheckpointError(path, file, f"unreadable ({_short(e)})") from None
    if not isinstance(meta, dict):
        raise DamagedCheckpointError(path, file, f"a JSON {type(meta).__name__}, not an object")
    return meta


def _location(state: Path, value: str) -> tuple[Path, int] | None:
    """``(file, bytes it must hold)`` of an OCDBT reference
    ``<kind>:<base>:<relative path>:<offset>:<length>`` in ``state``, or None."""
    kind, _, where = value.partition(":")
    if kind not in ("value", "btreenode") or where.count(":") < 3:
        return None
    rest, offset, length = where.rsplit(":", 2)
    base, _, relative = rest.partition(":")
    return state / base / relative, int(offset) + int(length)


def _ocdbt_references(state: Path) -> Iterator[tuple[str | None, Path, int]]:
    """``(stored key, file, bytes the file must hold)`` for every B-tree node
    (key ``None``, before the node is read) and every stored value kept
    outside the tree of the OCDBT database in ``state`` (orbax's array store),
    from its manifest and B-tree nodes.

    Raises:
      ValueError: tensorstore's error for a manifest or node it cannot read.
    """
    import tensorstore as ts

    store = ts.KvStore.open({"driver": "file", "path": f"{state}/"}).result()
    versions = ts.ocdbt.dump(store).result().get("versions") or []
    nodes = [versions[-1]["root"]["location"]] if versions and versions[-1].get("root") else []
    while nodes:
        node = nodes.pop()
        yield (None, *_location(state, node)) if _location(state, node) else (None, state, 0)
        for entry in ts.ocdbt.dump(store, node).result().get("entries", []):
            key = entry.get("key")
            key = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
            for value in map(str, entry.values()):
                if value.startswith("btreenode:"):
                    nodes.append(value)
                elif _location(state, value) is not None:
                    yield (key, *_location(state, value))


def _damage(path: Path) -> tuple[Path, str] | None:
    """``(damaged file, what is wrong)`` for a checkpoint whose files cannot
    all be read back (a JSON file orbax reads that is missing or not JSON, a
    manifest or B-tree node unreadable, a data file missing or shorter than
    its arrays need), or None when nothing is found. Reads metadata only."""
    state = path / STATE
    for file in (path / META / META_FILE, state / "_METADATA"):
        try:
            json.loads(file.read_bytes())
        except FileNotFoundError:
            return file, "missing"
        except (ValueError, OSError) as e:
            return file, f"unreadable ({_short(e)})"
    if not any(state.glob("ocdbt.process_*")):
        return None  # not orbax's array store (OCDBT): the read reports what it finds
    if not (state / "manifest.ocdbt").is_file():
        return state / "manifest.ocdbt", "missing"
    file = state / "manifest.ocdbt"
    try:
        for key, file, needed in _ocdbt_references(state):
            held = f" (it holds the stored array {key.rpartition('/')[0]})" if key else ""
            if not file.is_file():
                return file, "missing" + held
            if file.stat().st_size < needed:
                return file, f"truncated: {file.stat().st_size} bytes of {needed}{held}"
    except ValueError as e:  # tensorstore's error (a manifest or node it cannot read)
        named = [Path(f) for f in re.findall(r'local file "([^"]+)"', str(e)) if not f.endswith("/")]
        return (named[-1] if named else file), _short(e)
    except Exception:  # noqa: BLE001 - a layout this check does not know: the read reports
        return None
    return None


def _file_in(message: str, state: Path) -> Path:
    """The file a tensorstore error ``message`` names (a local file, or the
    data file of the stored array it names), else ``state``."""
    named = [Path(f) for f in re.findall(r'local file "([^"]+)"', message) if not f.endswith("/")]
    if named:
        return named[-1]
    key = re.search(r'Error reading "([^"]+)"', message)
    try:
        files = {k: f for k, f, _ in _ocdbt_references(state) if k} if key is not None else {}
    except Exception:  # noqa: BLE001 - the directory then
        files = {}
    return files.get(key.group(1), state) if key is not None else state


def _place(host: np.ndarray, like: jax.ShapeDtypeStruct) -> jax.Array:
    sharding = getattr(like, "sharding", None)
    if sharding is None:
        return jnp.asarray(host)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: np.asarray(host[idx]))


def _leaf_name(path: tuple[Any, ...]) -> str:
    """``module.params.Dense_0.kernel`` from a pytree key path of any node type
    (dict keys, dataclass attributes, sequence indices), as orbax stores it."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return ".".join(parts)


def _describe(shape: tuple[int, ...], dtype: Any) -> str:
    return f"{jnp.dtype(dtype).name}[{','.join(str(d) for d in shape)}]"


MemberRows = tuple[int, int, int]
"""``(size, stored, wanted)``: a population of ``size`` members stored padded to
``stored`` rows (copies of the last member), restored padded to ``wanted``."""


def _stored_shapes(path: Path) -> dict[str, tuple[tuple[int, ...], Any]] | None:
    """``{leaf name: (shape, dtype)}`` of the stored tree at ``path/state`` (its
    zero-size arrays from ``meta``), or None when its metadata cannot be read
    (the restore then reports what it finds)."""
    handler = _ocp().PyTreeCheckpointHandler(multiprocessing_options=_only(jax.process_index()))
    try:
        with _ORBAX_CALLS:
            stored_tree = handler.metadata(path / STATE).tree
        empty = read_meta(path).get(EMPTY_ARRAYS) or {}
        stored = {name: (tuple(e["shape"]), jnp.dtype(e["dtype"])) for name, e in empty.items()}
    except Exception:  # noqa: BLE001 - only an aid; restore still checks
        return None
    finally:
        with _ORBAX_CALLS:
            handler.close()
    return {**stored, **{_leaf_name(p): (tuple(leaf.shape), leaf.dtype)
                         for p, leaf in jax.tree_util.tree_flatten_with_path(stored_tree)[0]
                         if hasattr(leaf, "shape")}}


def _member_leaf(stored: tuple[int, ...], wanted: tuple[int, ...], rows: MemberRows | None) -> bool:
    """Whether a stored leaf of shape ``stored`` is a member leaf of ``rows``
    that restores into ``wanted`` by re-padding its leading (member) axis."""
    return (rows is not None and len(stored) == len(wanted) >= 1 and stored[0] == rows[1]
            and wanted[0] == rows[2] and stored[1:] == wanted[1:])


def _repad(host: np.ndarray, rows: MemberRows) -> np.ndarray:
    """The real members' rows of ``host``, padded with copies of the last to ``rows[2]``."""
    size, _, wanted = rows
    real = host[:size]
    return np.concatenate([real, np.repeat(real[-1:], wanted - size, axis=0)]) if wanted > size else real


def _mismatch(path: Path, target: Any, limit: int = 8, rows: MemberRows | None = None) -> str | None:
    """Leaf-by-leaf differences between the stored tree at ``path/state`` and
    ``target`` (names, shapes, dtypes), or None when they agree (member leaves of
    ``rows`` agreeing but for their padding) or the stored metadata cannot be read."""
    stored = _stored_shapes(path)
    if stored is None:
        return None
    wanted = {_leaf_name(p): (tuple(leaf.shape), leaf.dtype)
              for p, leaf in jax.tree_util.tree_flatten_with_path(target)[0]}
    lines = []
    for name in sorted(set(stored) | set(wanted)):
        if name not in stored:
            lines.append(f"{name}: not in the checkpoint (this module: {_describe(*wanted[name])})")
        elif name not in wanted:
            lines.append(f"{name}: only in the checkpoint ({_describe(*stored[name])})")
        elif jnp.dtype(stored[name][1]) == jnp.dtype(wanted[name][1]) \
                and _member_leaf(stored[name][0], wanted[name][0], rows):
            continue
        elif (stored[name][0], jnp.dtype(stored[name][1])) != (wanted[name][0], jnp.dtype(wanted[name][1])):
            lines.append(f"{name}: checkpoint {_describe(*stored[name])}, "
                         f"this module {_describe(*wanted[name])}")
    if not lines:
        return None
    more = f"; ... and {len(lines) - limit} more" if len(lines) > limit else ""
    return (f"checkpoint {path} does not match this module's state ({len(lines)} of "
            f"{len(set(stored) | set(wanted))} arrays differ; was it written with another "
            "config, network or environment?): " + "; ".join(lines[:limit]) + more)


def check(path: str | os.PathLike, abstract_state: Any, rows: MemberRows | None = None) -> None:
    """Check, reading metadata only (no array), that the checkpoint at ``path``
    (a step directory) can restore into ``abstract_state``: its files are all
    there and whole, and its arrays' names, shapes and dtypes are
    ``abstract_state``'s (``rows``: a population's member leaves may differ in
    their padding, see :func:`restore`). :func:`restore` checks this first; a
    caller with work to start before restoring (a compile) can fail before it.

    Raises:
      FileNotFoundError: ``path`` is not a checkpoint.
      DamagedCheckpointError: a file is missing, truncated or unreadable.
      CheckpointMismatchError: the arrays do not match ``abstract_state``.
    """
    path = _absolute(path)
    if not path.is_dir() or not (path / META).exists():
        raise FileNotFoundError(f"no checkpoint at {path} (expected a directory with '{META}/')")
    damage = _damage(path)
    if damage is not None:
        raise DamagedCheckpointError(path, *damage)
    problem = _mismatch(path, _abstract_encoded(abstract_state), rows=rows)
    if problem is not None:
        raise CheckpointMismatchError(problem)


def restore(path: str | os.PathLike, abstract_state: Any,
            rows: MemberRows | None = None) -> tuple[Any, dict[str, Any]]:
    """Restore the checkpoint at ``path`` (a step directory) into the shapes,
    dtypes and shardings of ``abstract_state`` (``jax.ShapeDtypeStruct`` leaves
    with ``sharding`` set). Returns ``(state, meta)``.

    ``rows`` (``(size, stored, wanted)``): the state holds a population of
    ``size`` members, stored padded to ``stored`` rows (a device count that does
    not divide it) and wanted padded to ``wanted`` (this device count): every
    leaf with ``stored`` leading rows where ``abstract_state`` has ``wanted`` is
    a member leaf; its real members are kept and padded again with copies of the
    last. Padding members never reach a metric or an update, so a population
    resumes on any device count.

    Every process reads the files itself (a checkpoint written by any number of
    processes; no collective while reading) into host memory and puts its own
    shards on the global mesh; only the rewrapping of typed PRNG keys runs a
    computation over the mesh, so with several processes every process calls
    this with the same arguments.

    Raises:
      FileNotFoundError: ``path`` is not a checkpoint (on this process).
      DamagedCheckpointError: a file of it is missing, truncated or not what
        was written (one line naming the file and the earlier checkpoints);
        checked on its metadata before any array is read.
      CheckpointMismatchError: the stored arrays do not match
        ``abstract_state``'s tree, shapes or dtypes (one line listing them).

    Both errors are ``ValueError`` subclasses.
    """
    path = _absolute(path)
    check(path, abstract_state, rows)
    meta = read_meta(path)
    target = _abstract_encoded(abstract_state)
    stored_target = _drop_empty(target)[0]  # zero-size leaves: None, as saved
    if rows is None or rows[1] == rows[2]:
        host = _read_arrays(path, stored_target)
    else:  # read the member leaves at their stored padding, then pad them for here
        stored = _stored_shapes(path) or {}
        names = jax.tree_util.tree_flatten_with_path(stored_target)[0]
        repadded = {_leaf_name(p) for p, leaf in names if _leaf_name(p) in stored
                    and _member_leaf(stored[_leaf_name(p)][0], tuple(leaf.shape), rows)}
        as_stored = jax.tree_util.tree_map_with_path(
            lambda p, x: jax.ShapeDtypeStruct(stored[_leaf_name(p)][0], x.dtype)
            if _leaf_name(p) in repadded else x, stored_target)
        host = jax.tree_util.tree_map_with_path(
            lambda p, h: _repad(np.asarray(h), rows) if _leaf_name(p) in repadded else h,
            _read_arrays(path, as_stored))
    host = _refill_empty(host, target)
    # compared leaf by leaf: a pytree node class need not define equality
    want = [(tuple(x.shape), jnp.dtype(x.dtype)) for x in jax.tree.leaves(target)]
    got = [(tuple(np.shape(x)), jnp.dtype(x.dtype)) for x in jax.tree.leaves(host)]
    if want != got:
        raise CheckpointMismatchError(f"checkpoint {path} does not match this module's state "
                                      f"shapes: expected {want}, found {got}")
    restored = jax.tree.map(lambda h, t: _place(np.asarray(h), t), host, target)
    return decode_keys(restored, meta.get("key_impls", {})), meta


def _read_arrays(path: Path, target: Any) -> Any:
    """The arrays of the checkpoint ``path`` as numpy arrays in ``target``'s
    tree (checked against it already).

    Raises:
      DamagedCheckpointError: a stored array cannot be read back (naming its file).
    """
    item = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), target)
    as_numpy = jax.tree.map(lambda x: _ocp().RestoreArgs(restore_type=np.ndarray), target)
    try:
        return _read(path, STATE, _ocp().args.PyTreeRestore(item=item, restore_args=as_numpy))
    except Exception as e:  # the tree matches (checked first): the files are damaged
        if "tree structures do not match" in str(e):
            try:  # unless the state gained a field that holds no array since it was written
                return _read_without_new_empty_fields(path, target)
            except Exception:  # noqa: S110 - the first error is the one to report
                pass
        _drop_closed_loop_reports()
        raise DamagedCheckpointError(path, _file_in(str(e), path / STATE), _short(e)) from e


def _read_without_new_empty_fields(path: Path, target: Any) -> Any:
    """:func:`_read_arrays` of a checkpoint written before the state gained fields
    that hold no array (an optional field left ``None``, as PPO's ``critic_obs_stats``
    without ``env.value_obs_key``): those fields are not read, and keep their value.

    Raises:
      ValueError: the stored tree lacks an entry that holds an array.
    """
    ocp = _ocp()
    handler = ocp.PyTreeCheckpointHandler()
    try:
        metadata = handler.metadata(path / STATE)
    finally:
        handler.close()
    stored = getattr(metadata, "tree", metadata)
    tree = ocp.tree.serialize_tree(target, keep_empty_nodes=True)
    present = _stored_part(tree, stored)
    item = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), present)
    as_numpy = jax.tree.map(lambda x: ocp.RestoreArgs(restore_type=np.ndarray), present)
    read = _read(path, STATE, ocp.args.PyTreeRestore(item=item, restore_args=as_numpy))
    return ocp.tree.deserialize_tree(_with_missing(tree, read), target, keep_empty_nodes=True)


def _stored_part(tree: Any, stored: Any) -> Any:
    """``tree`` (serialised: dicts and lists) without the dict entries ``stored`` lacks,
    each of which must hold no array."""
    if isinstance(tree, dict):
        missing = [k for k in tree if not isinstance(stored, dict) or k not in stored]
        if any(jax.tree.leaves(tree[k]) for k in missing):
            raise ValueError(f"the checkpoint lacks {missing}")
        return {k: _stored_part(v, stored[k]) for k, v in tree.items() if k not in missing}
    if isinstance(tree, list):
        return [_stored_part(v, w) for v, w in zip(tree, stored, strict=True)]
    return tree


def _with_missing(tree: Any, read: Any) -> Any:
    """``read`` (:func:`_stored_part` of ``tree``, read back) with the entries it left
    out back as ``tree`` has them."""
    if isinstance(tree, dict):
        return {k: _with_missing(v, read[k]) if k in read else v for k, v in tree.items()}
    if isinstance(tree, list):
        return [_with_missing(v, r) for v, r in zip(tree, read, strict=True)]
    return read


def _drop_closed_loop_reports() -> None:
    """Drop the ``RuntimeError: Event loop is closed`` reports that the reads
    and writes abandoned by a failed restore or save send to
    ``sys.unraisablehook`` when they end after orbax closed their event loop
    (a traceback each, harmless); every other report goes to the hook as
    before. Installed once per process."""
    previous = sys.unraisablehook
    if getattr(previous, "drops_closed_loop_reports", False):
        return

    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            previous(unraisable)

    hook.drops_closed_loop_reports = True
    sys.unraisablehook = hook


def steps_of_other_runs(directory: str | os.PathLike, run_dir: str | os.PathLike) -> list[int]:
    """Steps under a ``checkpoints`` directory that the run in ``run_dir`` did
    not write (their ``meta`` names another run directory, or none), as process
    0 sees them, on every process (a collective with several processes); ``[]``
    when there is no such directory."""
    directory, mine = Path(directory), os.path.realpath(run_dir)
    steps: list[int] = []
    if jax.process_index() == 0 and directory.is_dir():
        for s in sorted(int(s) for s in _ocp().utils.checkpoint_steps(directory)):
            try:
                owner = read_meta(directory / str(s)).get("run_dir")
            except (FileNotFoundError, ValueError, OSError):
                owner = None  # unfinished or unreadable: not provably this run's
            if owner is None or os.path.realpath(owner) != mine:
                steps.append(s)
    if jax.process_count() > 1:
        text = broadcast_from_zero(",".join(map(str, steps)))
        steps = [int(s) for s in text.split(",") if s]
    return steps


def steps(directory: str | os.PathLike) -> list[int]:
    """Complete checkpoint steps under a checkpoints directory, ascending
    (``[]`` when there is no such directory). A step is complete once its
    ``meta`` item is written: one being written, or cut off by a crash, is not."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir()
                  if p.name.isdigit() and (p / META).exists())


def latest_step_dir(directory: str | os.PathLike) -> Path | None:
    """The newest complete step directory under a checkpoints directory, or None."""
    found = steps(directory)
    return Path(directory) / str(found[-1]) if found else None
