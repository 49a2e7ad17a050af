"""A run's files that cannot be written: one line naming the path and the OS error.

A full disk, a quota, a file size limit, or a read-only or unwritable
directory ends a run with a :class:`StorageError` (an ``OSError``) raised by the
layer that writes: the run directory, the run's config, the loggers' files and
the checkpoints (:class:`jaxtrainer.checkpoint.CheckpointWriteError` is one).
Its message is one line; the recipe commands print it as
``<prog>: error: <message>`` and exit with status 2 (:func:`jaxtrainer.recipes.command.cli`).
What was written before stays whole: ``metrics.csv`` keeps complete rows,
TensorBoard event files complete records, checkpoints only complete steps.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
from collections.abc import Iterator
from pathlib import Path

STORAGE_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM", "EIO") if hasattr(errno, name))
"""OS error numbers that mean the storage refuses a write (full, over a quota or
a size limit, read-only, not permitted, failing)."""


class StorageError(OSError):
    """A file or directory of a run could not be written or created.

    ``str(error)`` is one line naming what was written, the path and the OS
    error; ``errno``, ``strerror`` and ``filename`` are the OS error's.
    """

    def __init__(self, message: str, cause: OSError | None = None,
                 path: str | os.PathLike | None = None) -> None:
        super().__init__(message)
        self.message = message
        if cause is not None:
            self.errno, self.strerror = cause.errno, cause.strerror
        self.filename = os.fspath(path) if path is not None else getattr(cause, "filename", None)

    def __str__(self) -> str:
        return self.message


def describe(error: OSError) -> str:
    """``error`` as ``[Errno 28] No space left on device`` (its own text when
    it has no error number)."""
    if error.errno is None:
        return " ".join(str(error).split()) or type(error).__name__
    return f"[Errno {error.errno}] {error.strerror or os.strerror(error.errno)}"


def storage_error(what: str, path: str | os.PathLike, error: OSError) -> StorageError:
    """``StorageError("could not write <what> <path>: <OS error>")``; a
    :class:`StorageError` passes unchanged."""
    if isinstance(error, StorageError):
        return error
    return StorageError(f"could not write {what} {os.fspath(path)}: {describe(error)}", error, path)


@contextlib.contextmanager
def writing(what: str, path: str | os.PathLike) -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into :func:`storage_error`
    (``what``: e.g. ``"the metrics file"``; ``path``: the file or directory written).

    Raises:
      StorageError: from the block's ``OSError``, chained to it.
    """
    try:
        yield
    except StorageError:
        raise
    except OSError as error:
        raise storage_error(what, path, error) from error


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Check, before anything runs, that a file can be written at ``path``: its
    directory exists, is a directory and is writable, and ``path`` is not a
    directory (``what``: e.g. ``"the video"``, for the message).

    Raises:
      StorageError: one line naming what, the path and what is wrong.
    """
    target = Path(path)
    directory = target.parent
    problem = None
    if target.is_dir():
        problem = "it is a directory"
    elif not directory.exists():
        problem = f"directory {directory} does not exist"
    elif not directory.is_dir():
        problem = f"{directory} is not a directory"
    elif not os.access(directory, os.W_OK | os.X_OK):
        problem = f"directory {directory} is not writable"
    if problem is not None:
        raise StorageError(f"could not write {what} {os.fspath(path)}: {problem}", path=path)


def as_storage_error(error: BaseException) -> StorageError | None:
    """``error`` as a :class:`StorageError` when it is one, or an ``OSError``
    of :data:`STORAGE_ERRNOS` naming a file (written by code that does not
    wrap its writes); else ``None``."""
    if isinstance(error, StorageError):
        return error
    if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS and error.filename:
        return StorageError(f"could not write {error.filename}: {describe(error)}", error)
    return None


def write_csv(path: str | os.PathLike, rows: list[dict]) -> None:
    """``rows`` (same keys) as a CSV file with a header, atomically (a reader sees
    the old file or the new one, never a part)."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
