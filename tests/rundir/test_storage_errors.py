"""Storage that refuses writes (a read-only root, a full disk mid-run) ends the
recipe command with one line naming the path and the OS error, status 2, nothing
half-written, and the metrics written so far intact."""

from __future__ import annotations

import csv
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxtrainer.loggers import csv_logger
from jaxtrainer.rundir import storage
from tests._support._xla import xla_flags
from tests._support.commands import ROOT, TINY_PPO

pytestmark = pytest.mark.timeout(300)


# The recipe command under a refusing storage: "fsize N" sets a file size limit
# of N bytes (RLIMIT_FSIZE, SIGXFSZ ignored: every write past it fails with EFBIG,
# as every write fails on a full disk); "rofs DIR" makes creating anything in
# DIR fail with EROFS (for root, whom a chmod does not stop). The compilation
# cache is read, never written (no entry is cut short).
WRAPPER = """
import errno, os, resource, runpy, signal, sys
from jax._src import compilation_cache
compilation_cache.put_executable_and_time = lambda *a, **k: None
mode, arg = sys.argv[1], sys.argv[2]
if mode == "fsize":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(arg), int(arg)))
elif mode == "rofs":
    read_only, mkdir = os.path.realpath(arg) + os.sep, os.mkdir
    def refused(path, *args, **kwargs):
        if (os.path.realpath(path) + os.sep).startswith(read_only):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return mkdir(path, *args, **kwargs)
    os.mkdir = refused
sys.argv = ["recipes/ppo.py", *sys.argv[3:]]
runpy.run_path("recipes/ppo.py", run_name="__main__")
"""


def run_ppo(mode: str, arg: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, XLA_FLAGS=xla_flags(1), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", WRAPPER, mode, arg, *TINY_PPO, *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The error line, after checking it is the only one, the last, with status 2."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == errors[0]
    return errors[0]


def half_written(directory: Path) -> list[str]:
    return [os.fspath(p) for p in directory.rglob("*") if "tmp" in p.name]


def complete_rows(path: Path) -> list[int]:
    """The steps of ``metrics.csv``, after checking every row has every column."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows and all(len(r) == len(rows[0]) for r in rows), rows
    return [int(r[0]) for r in rows[1:]]


@pytest.mark.slow
def test_a_read_only_root_is_one_line_and_creates_nothing(tmp_path):
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    if os.geteuid() == 0:  # root writes anyway: refuse it in the process
        mode, error = "rofs", errno.EROFS
    else:
        read_only.chmod(0o555)
        mode, error = "none", errno.EACCES
    try:
        proc = run_ppo(mode, str(read_only), f"trainer.default_root_dir={read_only / 'runs'}",
                       "trainer.max_steps=2")
    finally:
        read_only.chmod(0o755)
    assert one_error_line(proc) == (f"recipes/ppo.py: error: could not write the root of runs "
                                    f"{read_only / 'runs'}: [Errno {error}] {os.strerror(error)}")
    assert list(read_only.iterdir()) == []


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_is_one_line_and_leaves_no_temporary_directory(tmp_path):
    """The first checkpoint (step 2, written in the background) cannot be written
    (its array metadata is larger than the limit); the save of step 4 finds it."""
    proc = run_ppo("fsize", "6000", f"trainer.default_root_dir={tmp_path}", "trainer.max_steps=4",
                   "callbacks.checkpoint.every_n_steps=2")
    run = tmp_path / "version_0"
    assert one_error_line(proc) == (
        f"recipes/ppo.py: error: checkpoint of step 2 could not be written to {run / 'checkpoints'}:"
        f" [Errno {errno.EFBIG}] {os.strerror(errno.EFBIG)}; the newest complete checkpoint is none")
    assert half_written(tmp_path) == [] and os.listdir(run / "checkpoints") == []
    assert complete_rows(run / "metrics.csv") == [2, 4, 4]  # the last step's evaluation too


@pytest.mark.slow
def test_a_full_disk_for_the_event_file_keeps_the_metrics_written_so_far(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    # the event file passes 4350 bytes at the third row (the hyperparameters take 3.6 kB)
    proc = run_ppo("fsize", "4350", f"trainer.default_root_dir={tmp_path}", "trainer.max_steps=4",
                   "trainer.log_every_n_steps=1")
    run = tmp_path / "version_0"
    [events] = (run / "tensorboard").iterdir()
    assert one_error_line(proc) == (f"recipes/ppo.py: error: could not write the TensorBoard event "
                                    f"file {events}: [Errno {errno.EFBIG}] {os.strerror(errno.EFBIG)}")
    assert half_written(tmp_path) == []
    steps = complete_rows(run / "metrics.csv")  # fused intervals: the CSV row may come first
    assert steps == sorted(steps) and sorted(set(steps)) == list(range(1, max(steps) + 1))
    acc = event_accumulator.EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()  # the file ends with a complete record
    kept = [e.step for e in acc.Scalars(acc.Tags()["scalars"][0])]
    # the rows before the failed write, whole (how many fit depends on the
    # size of the hyperparameters record, which grows with the config)
    assert 1 <= len(kept) < 4 and kept == list(range(1, len(kept) + 1))


def test_a_metrics_row_cut_short_is_removed_whole(tmp_path, monkeypatch):
    """A write that stops half-way (the disk filled up meanwhile) leaves the file
    as it was: complete rows only; the error names the file and the OS error."""
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n2,0.5\n")
    real_open = open

    class HalfWritten:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            self.f.write(text[:len(text) // 2])
            self.f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(csv_logger, "open", lambda *a, **k: HalfWritten(real_open(*a, **k)),
                        raising=False)
    with pytest.raises(storage.StorageError) as info:
        csv_logger._append(str(path), "4,0.25\n6,0.125\n", "the metrics file")
    assert str(info.value) == (f"could not write the metrics file {path}: [Errno {errno.ENOSPC}] "
                               f"{os.strerror(errno.ENOSPC)}")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert path.read_text() == "step,loss\n2,0.5\n"


def test_check_writable_tries_a_file_where_permission_bits_do_not_tell(tmp_path):
    """``/proc`` takes no new file though root passes ``os.access`` on it; a folder
    that takes one is fine and keeps nothing of the try; with ``make_dirs`` the
    nearest existing folder is tried; a directory is no file name."""
    with pytest.raises(storage.StorageError, match=r"^could not write the figure /proc/x\.png: no "
                                                   r"file can be created in directory /proc "
                                                   r"\(\[Errno \d+\] [^)]+\)$") as refused:
        storage.check_writable("/proc/x.png", "the figure")
    assert refused.value.filename == "/proc/x.png" and refused.value.errno is not None
    storage.check_writable(tmp_path / "x.png", "the figure")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(storage.StorageError, match=r"directory .*/new does not exist"):
        storage.check_writable(tmp_path / "new" / "x.png", "the figure")
    storage.check_writable(tmp_path / "new" / "deeper" / "x.png", "the figure", make_dirs=True)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(storage.StorageError, match=r"/proc/sub/x.png: no file can be created in "
                                                   r"directory /proc "):
        storage.check_writable("/proc/sub/x.png", "the figure", make_dirs=True)
    with pytest.raises(storage.StorageError, match=r"it is a directory; expected a file name$"):
        storage.check_writable(tmp_path, "the figure")
