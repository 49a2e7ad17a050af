"""A run's files that cannot be written: one line naming the path and the OS error.

A full disk, a quota, a file size limit, or a read-only or unwritable
directory ends a run with a :class:`StorageError` (an ``OSError``) raised by the
layer that writes: the run directory, the run's config, the loggers' files and
the checkpoints (:class:`jaxtrainer.checkpoint.CheckpointWriteError` is one).
Its message is one line; the recipe commands print it as
``<prog>: error: <message>`` and exit with status 2 (:func:`jaxtrainer.recipes._command.cli`).
What was written before stays whole: ``metrics.csv`` keeps complete rows,
TensorBoard event files complete records, checkpoints only complete steps.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
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


def as_storage_error(error: BaseException) -> StorageError | None:
    """``error`` as a :class:`StorageError` when it is one, or an ``OSError``
    of :data:`STORAGE_ERRNOS` naming a file (written by code that does not
    wrap its writes); else ``None``."""
    if isinstance(error, StorageError):
        return error
    if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS and error.filename:
        return StorageError(f"could not write {error.filename}: {describe(error)}", error)
    return None


def replace_file(path: str | os.PathLike, data: str | bytes, what: str) -> None:
    """Write ``data`` to ``path`` whole (a temporary file beside it, then
    ``os.replace``): a reader sees the old file or the new one, a crash or a full
    disk never leaves a half-written file, and no temporary file stays.

    Raises:
      StorageError: naming ``what``, ``path`` and the OS error (:func:`writing`).
    """
    tmp = f"{os.fspath(path)}.tmp-{os.getpid()}"
    with writing(what, path):
        try:
            if isinstance(data, bytes):
                Path(tmp).write_bytes(data)
            else:
                with open(tmp, "w", newline="", encoding="utf-8") as f:
                    f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def write_csv(path: str | os.PathLike, rows: list[dict]) -> None:
    """``rows`` (same keys) as a CSV file with a header, whole (:func:`replace_file`)."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    replace_file(path, text.getvalue(), "a CSV file")


def check_writable(path: str | os.PathLike, what: str, *, make_dirs: bool = False,
                   expected: str = "a file name") -> None:
    """Check, before any work, that a file can be written at ``path``: it is
    not a directory, its directory exists (``make_dirs``: its nearest existing
    ancestor, the rest to be made) and is a directory, and a file can be made
    there. The last is tried (a hidden file created and removed at once), as
    permission bits do not tell: root passes ``os.access`` on ``/proc`` or a
    read-only mount.

    Args:
      what: what is written there, e.g. ``"the video"`` (the message says it).
      expected: what a directory given as ``path`` is told to be instead.

    Raises:
      StorageError: ``could not write <what> <path>: <what is wrong>`` (one line).
    """
    target = Path(os.path.abspath(os.fspath(path)))

    def refuse(problem: str, cause: OSError | None = None) -> StorageError:
        return StorageError(f"could not write {what} {os.fspath(path)}: {problem}", cause, path)

    if target.is_dir():
        raise refuse(f"it is a directory; expected {expected}")
    directory = target.parent
    while make_dirs and not directory.exists() and directory != directory.parent:
        directory = directory.parent
    if not directory.exists():
        raise refuse(f"directory {directory} does not exist")
    if not directory.is_dir():
        raise refuse(f"{directory} is not a directory")
    probe = directory / f".jaxtrainer-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as error:
        raise refuse(f"no file can be created in directory {directory} ({describe(error)})",
                     error) from None
    with contextlib.suppress(OSError):
        probe.unlink()
