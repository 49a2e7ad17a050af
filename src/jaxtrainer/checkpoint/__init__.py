"""Checkpoints: the files, and which checkpoint a path names.

* :mod:`~jaxtrainer.checkpoint._files`: what a checkpoint holds and how it is
  written and read (orbax-checkpoint, one logical copy, process 0 writes);
* :mod:`~jaxtrainer.checkpoint.resolve`: the one resolver of ``"last"``,
  ``"best"`` and a step, used by ``Trainer.fit``/``evaluate``, ``jaxtrainer
  eval``, :func:`jaxtrainer.load_policy` and the recipes.

Run directories (``version_<n>``), saved runs restored into their module and the
run lock are :mod:`jaxtrainer.rundir`'s.

The Trainer's side (what its checkpoint holds, saved and restored) is
:mod:`jaxtrainer.trainer._connectors.checkpoint_connector`, beside the Trainer.

The names below are the files' and the resolver's; import the other modules
by name.
"""

from jaxtrainer.checkpoint._files import (
    META,
    STATE,
    CheckpointMismatchError,
    CheckpointReadError,
    CheckpointWriteError,
    DamagedCheckpointError,
    Manager,
    check,
    decode_keys,
    encode_keys,
    host_copy,
    latest_step_dir,
    manager,
    read_meta,
    restore,
    save,
    steps,
    steps_of_other_runs,
)
from jaxtrainer.checkpoint.resolve import (
    CHECKPOINTS,
    NAMES,
    BestCheckpoint,
    NoBestCheckpoint,
    best,
    checkpoint_dirs,
    find_last,
    parse_which,
    resolve,
)

__all__ = [
    "CHECKPOINTS",
    "META",
    "NAMES",
    "STATE",
    "BestCheckpoint",
    "CheckpointMismatchError",
    "CheckpointReadError",
    "CheckpointWriteError",
    "DamagedCheckpointError",
    "Manager",
    "NoBestCheckpoint",
    "best",
    "check",
    "checkpoint_dirs",
    "decode_keys",
    "encode_keys",
    "find_last",
    "host_copy",
    "latest_step_dir",
    "manager",
    "parse_which",
    "read_meta",
    "resolve",
    "restore",
    "save",
    "steps",
    "steps_of_other_runs",
]
