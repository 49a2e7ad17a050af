"""Slips a new user made in their first hour (a run directory given as a config,
a recipe script that is not there, a multi_node run resumed alone, a run
stopped before its first checkpoint): one clear error each, before anything runs."""

import os
import subprocess
import sys

import pytest

from jaxtrainer.checkpoint.resolve import resolve
from jaxtrainer.commands._launch import launch
from jaxtrainer.recipes import config as recipe_config
from tests._support._xla import xla_flags


def test_a_run_directory_given_as_config_names_its_config_yaml(tmp_path):
    run = tmp_path / "runs" / "ppo" / "version_0"
    run.mkdir(parents=True)
    with pytest.raises(ValueError, match=r"--config .*version_0 is a directory, expected a YAML file$"):
        recipe_config.load(run)
    (run / "config.yaml").write_text("trainer:\n  seed: 1\n")
    with pytest.raises(ValueError, match=r"is a directory, expected a YAML file: --config "
                                         r".*version_0/config\.yaml reruns that run's config"):
        recipe_config.load(run)


def test_launch_of_a_script_that_is_not_there_starts_no_process(tmp_path):
    with pytest.raises(ValueError, match=r"script '.*/recipes/ppo\.py': no such file \(the recipe "
                                         r"scripts are in the repository's recipes/ folder"):
        launch(2, str(tmp_path / "recipes" / "ppo.py"), ["trainer.strategy=multi_node"])
    with pytest.raises(ValueError, match=r"script '.*' is not a file"):
        launch(2, str(tmp_path), [])
    assert list(tmp_path.iterdir()) == []  # no coordinator, no rank, nothing written


def test_a_run_stopped_before_its_first_checkpoint_says_so(tmp_path):
    (tmp_path / "version_0" / "checkpoints").mkdir(parents=True)
    for path in (tmp_path / "version_0", tmp_path / "version_0" / "checkpoints"):
        with pytest.raises(FileNotFoundError, match=r"no checkpoint in .*: its checkpoints directory "
                                                    r"holds no saved step \(the run stopped before"):
            resolve(path)


@pytest.mark.slow
def test_multi_node_in_a_process_nobody_launched_is_one_line_naming_the_way_out(tmp_path):
    """``jaxtrainer fit ppo trainer.strategy=multi_node`` without ``jaxtrainer
    launch`` (or the resume of a multi_node run in one process, which keeps the
    saved strategy) ended in a traceback advising to initialise at the top of
    the script: one line, status 2, naming ``trainer.strategy=single or pmap``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COORDINATOR", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
                                "SLURM_", "OMPI_", "JOB_COMPLETION_INDEX"))}
    env.update(XLA_FLAGS=xla_flags(1), JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo", "trainer.strategy=multi_node",
         "trainer.max_env_steps=1000", f"trainer.default_root_dir={tmp_path / 'runs'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    error = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert len(error) == 1, proc.stderr[-3000:]
    assert "no coordinator address and no cluster detected" in error[0]
    assert "in one process choose another strategy (trainer.strategy=single or pmap" in error[0]
    assert "must be called before any JAX calls" not in error[0]
    assert "joining coordinator" not in proc.stderr  # issue 68, 8c: nothing names one


LAUNCH_PREFIXES = ("JAX_COORDINATOR", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "SLURM_", "OMPI_",
                   "JOB_COMPLETION_INDEX")


def test_a_process_no_launcher_started_claims_no_coordinator(monkeypatch, capsys):
    """Issue 68, 8c: resuming a multi-node run without the launcher first printed
    "joining coordinator found by JAX from the launcher's variables ... (none of ...
    is set)"; nothing names a coordinator there, so no such line. A launched
    process still says where it joins."""
    from jaxtrainer.distributed import _process as process

    for name in [k for k in os.environ if k.startswith(LAUNCH_PREFIXES)]:
        monkeypatch.delenv(name)
    with process._join_watchdog(None, None, None, 300):
        pass
    assert capsys.readouterr().err == ""
    with process._join_watchdog("127.0.0.1:1234", 2, 1, 300):
        pass
    assert capsys.readouterr().err.startswith(
        "jaxtrainer: process 1 of 2 joining coordinator 127.0.0.1:1234; waiting up to 300 s")


def test_a_trainer_that_writes_nothing_makes_no_run_directory(tmp_path, capsys):
    """Issue 68, 8b: ``Trainer(logger=False, enable_checkpointing=False)`` still wrote
    ``runs/version_N/module.yaml``; as Lightning without a logger, no ``version_N``.
    A callback that does not say it only reads metrics still gets its directory."""
    import jaxtrainer as jt
    from tests._support import toys

    root = tmp_path / "runs"
    jt.Trainer(logger=False, enable_checkpointing=False, max_steps=2, strategy="single",
               default_root_dir=root).fit(toys.EnvCounter())
    assert not root.exists()
    assert "; no run directory (no logger, checkpoint or other callback writes one)" in \
        capsys.readouterr().out
    trainer = jt.Trainer(logger=False, enable_checkpointing=False, max_steps=2, strategy="single",
                         default_root_dir=root, callbacks=[jt.Callback()])
    trainer.fit(toys.EnvCounter())
    assert sorted(os.listdir(trainer.log_dir)) == ["module.yaml"]
