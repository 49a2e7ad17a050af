"""``JAX_PLATFORMS`` naming a platform JAX cannot start here (``cuda`` on a CPU-only
machine): one line naming the request and what is installed, status 2, before
anything runs or is written (JAX itself raises a bare AssertionError from inside
the first library that makes an array)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ("error: JAX_PLATFORMS='cuda': JAX cannot start cuda here; installed: cpu. Unset "
            "JAX_PLATFORMS (or set it to cpu) to run on the CPU; for NVIDIA GPUs install the "
            "CUDA build of JAX")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("command, prog", [
    ([sys.executable, str(ROOT / "recipes" / "ppo.py"), "trainer.max_env_steps=2048"],
     str(ROOT / "recipes" / "ppo.py")),
    ([sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo"], "jaxtrainer fit"),
    ([sys.executable, "-m", "jaxtrainer.commands._cli", "eval", "runs/ppo/version_0"], "jaxtrainer eval"),
])
def test_an_unavailable_platform_is_one_line_before_anything_runs(command, prog, tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cuda", "PYTHONPATH": str(ROOT / "src")}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: {EXPECTED}"), proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # nothing written
