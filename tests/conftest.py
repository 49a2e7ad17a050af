"""Test setup: 4 fake CPU devices (set before jax is imported anywhere)."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import jax  # noqa: E402
import pytest  # noqa: E402

assert jax.device_count() == 4, "tests expect 4 fake CPU devices"


@pytest.fixture
def run_dir(tmp_path):
    """A fresh default_root_dir per test."""
    return tmp_path / "runs"
