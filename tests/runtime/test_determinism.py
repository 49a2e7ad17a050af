"""``trainer.deterministic=true`` / ``Trainer(deterministic=True)``: what it sets,
when it refuses, and two runs of one input giving identical ``metrics.csv`` files."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap

import jax
import pytest

import jaxtrainer as jt
from jaxtrainer.commands import fit
from jaxtrainer.runtime import _determinism as determinism
from tests._support.commands import ROOT, TINY_PPO

TIMING = ("steps_per_second", "env_steps_per_second")
"""``metrics.csv``'s wall-clock columns: the only ones two identical runs may differ in."""


@pytest.fixture
def restored(monkeypatch):
    """The process's matmul precision and ``XLA_FLAGS`` as they were, after the test."""
    before = jax.config.jax_default_matmul_precision
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    yield
    jax.config.update("jax_default_matmul_precision", before)


def _metrics(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


@pytest.mark.timeout(300)
def test_deterministic_twice_gives_identical_metrics_and_records_its_flags(tmp_path):
    """The issue's input, ``trainer.deterministic=true``, on ``jaxtrainer fit ppo`` twice:
    the same ``metrics.csv`` but its wall-clock columns; the run's ``config.yaml`` and
    ``hparams.csv`` hold the flags it set (the command adds the GPU flag before JAX starts)."""
    runs = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "jaxtrainer",
        "fit",
        "ppo",
        "trainer.deterministic=true",
        *TINY_PPO,
        "trainer.max_steps=4",
        "trainer.log_every_n_steps=1",
        f"trainer.default_root_dir={runs}",
    ]
    for _ in range(2):
        proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=280)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said = [line for line in proc.stderr.splitlines() if "deterministic:" in line]
        assert said == [
            "jaxtrainer: deterministic: XLA_FLAGS with --xla_gpu_deterministic_ops=true "
            "(used on a GPU; CPU and TPU programs are deterministic without it); set "
            "jax_default_matmul_precision=highest (float32 matmuls in full float32)"
        ]
    first, second = (_metrics(runs / f"version_{n}" / "metrics.csv") for n in (0, 1))
    assert [row["step"] for row in first] == ["1", "2", "3", "4", "4"]  # 4 logs, the evaluation
    assert first[0]["loss/total"] and first[-1]["eval/episode_return"]  # values, not blanks
    assert first == second
    for n in (0, 1):
        lines = (runs / f"version_{n}" / "config.yaml").read_text().splitlines()
        assert (
            "  deterministic: true  # set xla_flags=--xla_gpu_deterministic_ops=true "
            "jax_default_matmul_precision=highest" in lines
        )
        hparams = (runs / f"version_{n}" / "hparams.csv").read_text().splitlines()
        assert "trainer/deterministic/xla_flags,--xla_gpu_deterministic_ops=true" in hparams
        assert "trainer/deterministic/jax_default_matmul_precision,highest" in hparams


def test_the_command_reads_the_switch_before_jax_starts(tmp_path):
    """The command adds the GPU flag before importing the environment libraries (which
    start JAX's backend); it reads the recipe's YAML, a ``--config`` file, then overrides."""
    assert fit._asks_determinism("ppo", []) is False
    assert fit._asks_determinism("ppo", ["trainer.deterministic=true"]) is True
    assert (
        fit._asks_determinism("ppo", ["trainer.deterministic=flase"]) is False
    )  # the Trainer says why
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  deterministic: true\n")
    assert fit._asks_determinism("ppo", ["--config", str(mine)]) is True
    assert (
        fit._asks_determinism("ppo", [f"--config={mine}", "trainer.deterministic=false"]) is False
    )
    assert fit._asks_determinism("ppo", ["--config", str(tmp_path / "missing.yaml")]) is False


def test_before_the_backend_starts_it_adds_the_gpu_flag(tmp_path):
    """A fresh process: the backend reads as not started until the first JAX operation,
    and ``Trainer(deterministic=True)`` built before it adds the flag to ``XLA_FLAGS`` (after the
    user's ``=false``: the last mention wins) before it picks its devices (the backend starts)."""
    script = textwrap.dedent(f"""
        import os, jax, jaxtrainer as jt
        from jaxtrainer.runtime._determinism import backend_started
        print(backend_started())
        trainer = jt.Trainer(max_steps=1, deterministic=True, logger=False,
                             default_root_dir={str(tmp_path)!r})
        print(backend_started(), os.environ["XLA_FLAGS"].split()[-1])
        print(trainer.config["deterministic"], jax.config.jax_default_matmul_precision)
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_gpu_deterministic_ops=false")
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "False",
        "True --xla_gpu_deterministic_ops=true",  # started by the Trainer, after the flag
        "{'xla_flags': '--xla_gpu_deterministic_ops=true', 'jax_default_matmul_precision': "
        "'highest'} highest",
    ]


def test_a_gpu_backend_started_without_the_flag_is_refused(restored, capsys):
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    with pytest.raises(ValueError) as error:
        determinism.apply(started=True, platform="gpu")
    assert str(error.value) == (
        "deterministic=True cannot take effect: JAX's backend already started on gpu without "
        "--xla_gpu_deterministic_ops=true in XLA_FLAGS (XLA reads them once, at its start); set "
        "XLA_FLAGS=--xla_gpu_deterministic_ops=true before starting Python, or build the Trainer "
        "before any JAX operation"
    )
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"  # nothing changed
    assert jax.config.jax_default_matmul_precision != "highest"
    assert capsys.readouterr().err == ""
    # with the flag there since the start, a GPU run takes it
    os.environ["XLA_FLAGS"] = "--xla_gpu_deterministic_ops=true"
    assert determinism.apply(started=True, platform="gpu") == {
        "xla_flags": "--xla_gpu_deterministic_ops=true",
        "jax_default_matmul_precision": "highest",
    }


def test_on_a_started_cpu_backend_only_the_precision_is_set(restored, capsys, tmp_path):
    """The suite's backend (4 CPU devices) started long ago: the GPU flag would change
    nothing on CPU, so XLA_FLAGS stay as they are and the Trainer records that."""
    flags = os.environ["XLA_FLAGS"]
    assert determinism.backend_started()
    trainer = jt.Trainer(max_steps=1, deterministic=True, logger=False, default_root_dir=tmp_path)
    assert trainer.config["deterministic"] == {
        "xla_flags": "",
        "jax_default_matmul_precision": "highest",
    }
    assert jax.config.jax_default_matmul_precision == "highest"
    assert os.environ["XLA_FLAGS"] == flags
    assert capsys.readouterr().err.splitlines() == [
        "jaxtrainer: deterministic: left XLA_FLAGS as they are (cpu: --xla_gpu_deterministic_ops"
        "=true is for GPUs; cpu programs are deterministic without it); set "
        "jax_default_matmul_precision=highest (float32 matmuls in full float32)"
    ]


def test_off_records_nothing_and_a_non_bool_is_named(tmp_path):
    assert "deterministic" not in jt.Trainer(max_steps=1, default_root_dir=tmp_path).config
    with pytest.raises(ValueError, match=r"^deterministic='yes': expected True or False"):
        jt.Trainer(max_steps=1, deterministic="yes", default_root_dir=tmp_path)
