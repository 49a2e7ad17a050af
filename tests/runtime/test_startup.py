"""A command's first lines: a Ctrl-C at any moment of its start-up ends it at once
in one line, by SIGINT (status 130 in a shell), with nothing trained; a user's own
torso in the current directory imports without PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._support._xla import xla_flags
from tests._support.commands import ROOT, TINY_PPO


def _caught(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` of /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt")), 16)
    return bool(mask >> (signum - 1) & 1)


def _wait(proc: subprocess.Popen, ready, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command,when", [
    ("recipe", "first line"),  # its handler is in place: before any import of JAX
    ("recipe", "jax loaded"),  # where JAX's garbage-collection callback could swallow it
    ("jaxtrainer", "building"),  # half a second later: config, env, module, Trainer
])
def test_a_ctrl_c_while_starting_ends_the_command_in_one_line(tmp_path, command, when):
    root = tmp_path / "runs"
    args, prog = ([sys.executable, "recipes/ppo.py"], "recipes/ppo.py") if command == "recipe" \
        else ([sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo"], "jaxtrainer")
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1))
    proc = subprocess.Popen([*args, *TINY_PPO, "trainer.max_steps=4",
                             f"trainer.default_root_dir={root}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(proc, lambda: _caught(proc.pid, signal.SIGTERM))  # the command's first line ran
        if when != "first line":
            _wait(proc, lambda: "jaxlib" in Path(f"/proc/{proc.pid}/maps").read_text())
        if when == "building":
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGINT, err  # ended by the signal: 130 in a shell
    assert err == f"{prog}: received SIGINT while starting; stopping\n"
    assert out == "" and not root.exists()  # nothing trained, no run directory


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_users_torso_in_the_current_directory_imports_without_pythonpath(tmp_path):
    """The class imports (its constructor is checked against init_args): without
    the current directory on the path it would not ("does not import")."""
    (tmp_path / "my_torso.py").write_text((ROOT / "tests" / "_support" / "torsos.py").read_text())
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1), PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, str(ROOT / "recipes" / "ppo.py"), *TINY_PPO,
                          f"trainer.default_root_dir={tmp_path / 'runs'}",
                          "network.torso.class_path=my_torso.TinyTorso",
                          "network.torso.init_args.width=3"],  # checked before anything compiles
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert out.returncode == 2 and out.stderr.endswith(
        ": error: network.torso.init_args={'width': 3}: my_torso.TinyTorso rejects them "
        "(TinyTorso.__init__() got an unexpected keyword argument 'width')\n"), out.stderr
    assert not (tmp_path / "runs").exists()


def test_warnings_reach_a_piped_log_without_terminal_colour_codes(tmp_path):
    code = ("import sys, warnings\n"
            "from jaxtrainer import startup\n"
            "startup.plain_warnings()\n"
            "warnings.warn('\\x1b[1m\\x1b[33mslow\\x1b[0m path taken')\n")
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert "UserWarning: slow path taken" in piped.stderr and "\x1b" not in piped.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("recipe,needs", [("ppo", set()), ("openes", {"evosax"})])
def test_help_imports_only_what_it_documents(recipe, needs):
    """``jaxtrainer fit NAME --help`` documents the recipe's keys without loading
    the packages of saving (orbax), logging (wandb) or other algorithms (evosax):
    each costs a tenth of a second or more of every help and config error."""
    code = (f"import atexit, sys, runpy; sys.argv = ['jaxtrainer', 'fit', {recipe!r}, '--help']\n"
            "atexit.register(lambda: print('LOADED', sorted(m for m in ('orbax.checkpoint', "
            "'wandb', 'evosax', 'tensorboardX') if m in sys.modules)))  # the command ends the process\n"
            "runpy.run_module('jaxtrainer.commands._cli', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=100)
    assert done.returncode == 0, done.stderr
    assert "algorithm:" in done.stdout and "logger.wandb.<key>=..." in done.stdout
    loaded = eval(done.stdout.rsplit("LOADED", 1)[1])
    assert set(loaded) == needs, loaded


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_closed_pipe_and_an_unavailable_env_family_end_in_one_line_or_none():
    """``--print-config | head -1`` ends quietly (status 141, as a pipe's writer
    killed by SIGPIPE, or 0 when everything was in the pipe before ``head`` left);
    into a pipe already closed, status 141 always; a kinetix/ name, which the env
    list offers but no installable release supports, is one line and status 2."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    for reader, statuses, out in (("head -1", (0, 141), "# preset sac/Pendulum-v1"),
                                  ("true", (141,), "")):
        piped = subprocess.run(f"{sys.executable} -m jaxtrainer.commands._cli fit sac --print-config "
                               f"| {reader}; exit ${{PIPESTATUS[0]}}", shell=True,
                               executable="/bin/bash", cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=100)
        assert piped.returncode in statuses and piped.stderr == "", (reader, piped.stderr)
        assert piped.stdout.startswith(out) and piped.stdout.count("\n") == bool(out)
    done = subprocess.run([sys.executable, "-m", "jaxtrainer.commands._cli", "fit", "ppo",
                           "env.name=kinetix/foo"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=100)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "kinetix-env" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_script_beside_a_clone_named_jaxtrainer_imports_the_installed_package(tmp_path):
    """A clone is a folder named ``jaxtrainer`` without ``__init__.py``; a script in
    the folder that holds it found that folder first (an empty namespace package:
    ``module 'jaxtrainer' has no attribute 'load_policy'``)."""
    clone = tmp_path / "jaxtrainer"
    (clone / "recipes").mkdir(parents=True)
    (clone / "README.md").write_text("# jaxtrainer\n")
    (tmp_path / "script.py").write_text(
        "import jaxtrainer\n"
        "from jaxtrainer import load_policy\n"
        "print(jaxtrainer.__file__, callable(load_policy))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr[-2000:]
    path, is_callable = out.stdout.split()
    assert Path(path).name == "__init__.py" and not Path(path).is_relative_to(tmp_path)
    assert is_callable == "True"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_command_ends_quietly_into_a_closed_pipe_and_prints_warnings_in_one_line():
    """``jaxtrainer envs | head -20`` (a first-hour user's input) ended in a
    BrokenPipeError traceback: the command's end handles a closed pipe for every
    command (status 141 or 0, nothing on stderr). A warning is one line, without
    the source line Python prints after it (``return call(*args, **kwargs)``)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    command = "jaxtrainer" if shutil.which("jaxtrainer") else f"{sys.executable} -m jaxtrainer"
    for reader, statuses, lines in (("head -20", (0, 141), 20), ("head -3", (0, 141), 3),
                                    ("true", (141,), 0)):
        piped = subprocess.run(f"{command} envs | {reader}; exit ${{PIPESTATUS[0]}}", shell=True,
                               executable="/bin/bash", cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=100)
        assert piped.returncode in statuses and piped.stderr == "", (reader, piped.stderr)
        assert piped.stdout.count("\n") == lines
    done = subprocess.run([*command.split(), "fit", "ppo",
                           "callbacks.early_stopping.monitor=eval/episode_return"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "UserWarning: EarlyStopping(monitor='eval/episode_return') has no mode" \
        in lines[0] and lines[1].startswith("jaxtrainer fit ppo: error: EarlyStopping("), lines
