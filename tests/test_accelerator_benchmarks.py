"""The accelerator table's scripts (benchmarks/accelerator/) at tiny budgets on the CPU:
the env-only limit, our side of the seeds row through the documented command, the
summary line's arithmetic, and the offline install from a wheel folder."""

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "accelerator"))

import env_limit  # noqa: E402
import seeds  # noqa: E402


def test_the_env_limit_steps_every_env_of_the_batch_every_step():
    rate, reward = env_limit.limit("CartPole-v1", batch=8, length=20, repeats=1)
    assert reward == 8 * 20  # CartPole pays 1 a step, reset steps included
    assert 0 < rate < float("inf")


@pytest.mark.slow
def test_our_side_of_the_seeds_row_runs_the_documented_command_for_every_member():
    row = seeds.ours(2, 2048, str(ROOT / "src"), timeout=600)  # 4 updates of 512 env steps
    assert row["side"] == "ours" and row["n"] == 2
    assert row["env_steps_per_s"] > 0 and row["compile_s"] > 0
    assert len(row["returns"]) == 2 and all(0 < r <= 500 for r in row["returns"])


def test_the_summary_line_gives_the_ratio_and_both_fractions_of_the_limit():
    rows = {"ours": {"env_steps_per_s": 300.0, "returns": [490.0, 500.0]},
            "purejaxrl": {"env_steps_per_s": 200.0, "returns": [480.0, 500.0]},
            "env_only": {"env_steps_per_s": 1000.0}}
    line = seeds.summary(64, rows)
    assert line == ("N=64 ours=300 purejaxrl=200 ratio=1.500 limit=1,000 ours_fraction=0.300 "
                    "purejaxrl_fraction=0.200 return ours=495.0 purejaxrl=490.0+-10.0")


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel of a package ``name`` holding ``VERSION``."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


def test_the_offline_install_takes_the_pinned_release_from_the_wheel_folder(tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    _wheel(wheels, "offline_pkg", "1.0")
    _wheel(wheels, "offline_pkg", "2.0")
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("offline_pkg==1.0\n")
    script = ROOT / "benchmarks" / "accelerator" / "wheels.sh"
    proc = subprocess.run(["bash", str(script), "install", str(wheels), str(target), str(reqs)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"installed reqs.txt into {target}" in proc.stdout
    env = dict(os.environ, PYTHONPATH=str(target))
    version = subprocess.run([sys.executable, "-c", "import offline_pkg; print(offline_pkg.VERSION)"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == "1.0", version.stderr
