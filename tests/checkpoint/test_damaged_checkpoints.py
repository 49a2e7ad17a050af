"""Damaged checkpoints: resuming, evaluating or loading one is one line naming the
checkpoint and the damaged file and listing the earlier steps, status 2, nothing
written; a checkpoint of another environment is one line as well."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jaxtrainer as jt
from jaxtrainer.commands import _eval_cli as eval_cli
from tests._support._xla import xla_flags
from tests._support.commands import ROOT, TINY_PPO

pytestmark = pytest.mark.timeout(300)



def run_ppo(*args: str) -> subprocess.CompletedProcess:
    """``python recipes/ppo.py TINY_PPO ARGS`` on one CPU device."""
    env = dict(os.environ, XLA_FLAGS=xla_flags(1), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "recipes/ppo.py", *TINY_PPO, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A PPO run with checkpoints at steps 2 and 4."""
    root = tmp_path_factory.mktemp("saved") / "runs"
    proc = run_ppo(f"trainer.default_root_dir={root}", "trainer.max_steps=4",
                   "callbacks.checkpoint.every_n_steps=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "version_0"


def copy_of(saved: Path, tmp_path: Path) -> tuple[Path, Path]:
    """``(root of runs, step 4)`` of a copy of the saved run."""
    root = tmp_path / "runs"
    shutil.copytree(saved, root / "version_0")
    return root, root / "version_0" / "checkpoints" / "4"


def data_files(step: Path) -> list[Path]:
    """The files of orbax's array store (OCDBT) in ``step``: B-tree nodes and
    data files (small arrays are kept inside the nodes)."""
    return [f for f in (step / "state").rglob("*") if f.parent.name == "d" and f.is_file()]


def stored(step: Path, kind: str) -> str:
    """A message part naming one of ``step``'s array store files and ``kind``."""
    return (rf"{re.escape(str(step / 'state'))}/(ocdbt\.process_0/)?d/[0-9a-f]+: {kind}"
            r"( \(it holds the stored array [\w.]+\))?")


def truncate_arrays(step: Path) -> str:
    """Cut every array store file of ``step`` to 20 bytes; the expected message part."""
    for f in data_files(step):
        f.write_bytes(f.read_bytes()[:20])
    return stored(step, r"truncated: 20 bytes of \d+")


def delete_array(step: Path) -> str:
    for f in data_files(step):
        f.unlink()
    return stored(step, "missing")


def garbage_meta(step: Path) -> str:
    (step / "meta" / "metadata").write_text("{garbage")
    return re.escape(f"{step / 'meta' / 'metadata'}: unreadable (Expecting property name "
                     "enclosed in double quotes: line 1 column 2 (char 1))")


DAMAGE = {"truncated array file": truncate_arrays, "deleted array file": delete_array,
          "garbage meta/metadata": garbage_meta}


def expected(step: Path, damaged_file: str) -> str:
    return (rf"checkpoint {re.escape(str(step))} is damaged: {damaged_file}; earlier steps to "
            rf"resume from: 2 \(e\.g\. {re.escape(str(step.parent / '2'))}\)")


def snapshot(directory: Path) -> dict[str, tuple[int, int] | None]:
    """Every file (size, mtime) and folder under ``directory``. A folder's own
    mtime is left out: the run's lock file, held while the command runs and
    removed when it ends, touches it."""
    return {os.fspath(p.relative_to(directory)):
            None if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*"))}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resuming_a_damaged_checkpoint_is_one_line_and_writes_nothing(saved, tmp_path, damage):
    root, step = copy_of(saved, tmp_path)
    damaged = DAMAGE[damage](step)
    before = snapshot(root)
    proc = run_ppo(f"trainer.default_root_dir={root}", "trainer.max_steps=6",
                   "trainer.ckpt_path=last")
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == errors[0]
    assert re.fullmatch(r"recipes/ppo\.py: error: " + expected(step, damaged), errors[0]), errors[0]
    assert snapshot(root) == before  # nothing written, nothing removed


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_evaluating_or_loading_a_damaged_checkpoint_is_the_same_line(saved, tmp_path, damage,
                                                                      capsys):
    root, step = copy_of(saved, tmp_path)
    damaged = DAMAGE[damage](step)
    assert eval_cli.main([str(step.parent.parent)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch("jaxtrainer eval: error: " + expected(step, damaged), err[-1]), err
    with pytest.raises(jt.checkpoint.DamagedCheckpointError) as info:
        jt.load_policy(step.parent.parent)
    assert re.fullmatch(expected(step, damaged), str(info.value))
    assert info.value.path == step and isinstance(info.value, ValueError)


def test_a_damaged_node_of_the_array_store_is_named(saved, tmp_path):
    """The B-tree node files of orbax's array store (state/d/*) are checked too."""
    _, step = copy_of(saved, tmp_path)
    node = next((step / "state" / "d").iterdir())
    node.write_bytes(node.read_bytes()[:20])
    with pytest.raises(jt.checkpoint.DamagedCheckpointError,
                       match=re.escape(f"is damaged: {node}: truncated: 20 bytes of ")):
        jt.load_policy(step)


@pytest.mark.slow
def test_resuming_with_another_environment_is_one_line(saved, tmp_path):
    """Confirmed with resume_overrides=apply, the checkpoint's arrays do not fit
    the other environment's state: one line listing them, status 2, and the
    run's config.yaml is not rewritten."""
    root, _ = copy_of(saved, tmp_path)
    before = snapshot(root)
    proc = run_ppo(f"trainer.default_root_dir={root}", "trainer.max_steps=6", "env.name=Acrobot-v1",
                   f"trainer.ckpt_path={root / 'version_0'}", "trainer.resume_overrides=apply")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"recipes/ppo.py: error: checkpoint {root / 'version_0' / 'checkpoints' / '4'}"
                           " does not match this module's state (")
    assert "was it written with another config, network or environment?" in line
    assert "module.env_state.env_state.theta: only in the checkpoint (float32[2])" in line
    assert snapshot(root) == before
