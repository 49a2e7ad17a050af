"""How ``jaxtrainer COMMAND`` ends: the console command (``main()`` reading
``sys.argv``) ends the process with the command's status, whichever the command
(``exit_now``: no interpreter teardown); ``main([...])`` in a process that goes on
(a test, a notebook) returns it. Only the console command freezes the garbage
collector (``fit``, once its libraries are imported)."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from jaxtrainer.commands import _cli as cli
from jaxtrainer.runtime import _signals as signals
from jaxtrainer.runtime import _startup as startup

ROOT = Path(__file__).resolve().parents[2]


class _Ended(BaseException):
    """Raised by the patched ``exit_now`` in place of ending the test process."""


@pytest.fixture
def console(monkeypatch):
    """``console(*args)``: run ``jaxtrainer *args`` as the console command with the
    process's end recorded; returns ``(status it ended with, whether it began as a
    command, whether it froze the garbage collector)``. ``console.froze()``: whether
    anything froze it since the last call."""
    seen = {}

    def exit_now(status=0):
        raise _Ended(status)

    monkeypatch.setattr(signals, "exit_now", exit_now)
    monkeypatch.setattr(startup, "begin", lambda prog: seen.update(began=prog))
    monkeypatch.setattr(gc, "freeze", lambda: seen.update(froze=True))

    def run(*args):
        seen.clear()
        monkeypatch.setattr(sys, "argv", ["jaxtrainer", *args])
        with pytest.raises(_Ended) as ended:
            cli.main()
        return ended.value.args[0], seen.get("began"), seen.pop("froze", False)

    run.froze = lambda: seen.pop("froze", False)
    return run


def _fake_run(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "metrics.csv").write_text("step,env_steps,train/episode_return\n"
                                      "1,100,1.0\n2,200,2.0\n")
    return path


def test_envs_ends_with_its_status_and_returns_it_in_process(console, capsys):
    assert console("envs", "CartPole") == (0, "jaxtrainer", False)
    assert capsys.readouterr().out.startswith("CartPole-v1\n")
    assert cli.main(["envs", "CartPole"]) == 0
    assert capsys.readouterr().out.startswith("CartPole-v1\n")
    assert console("envs", "zzz") == (2, "jaxtrainer", False)  # an error returned as a status
    assert capsys.readouterr().err == "jaxtrainer envs: no name starts with 'zzz'\n"
    assert cli.main(["envs", "zzz"]) == 2


def test_plot_and_eval_end_with_their_status(console, capsys, tmp_path):
    run = _fake_run(tmp_path / "version_0")
    png = str(tmp_path / "c.png")
    assert console("plot", str(run), "-o", png) == (0, "jaxtrainer", False)
    assert "wrote" in capsys.readouterr().out
    assert cli.main(["plot", str(run), "-o", png]) == 0
    assert console("plot", str(run), "-o", png, "--metric", "nope") == (2, "jaxtrainer", False)
    assert "no column 'nope'; columns: " in capsys.readouterr().err
    assert console("eval", str(run)) == (2, "jaxtrainer", False)  # a run without checkpoints
    assert capsys.readouterr().err.startswith(f"jaxtrainer eval: error: no checkpoint in {run}: ")
    assert cli.main(["eval", str(run)]) == 2


def test_the_dispatchers_own_errors_and_help_end_with_their_status(console, capsys):
    assert console() == (2, "jaxtrainer", False)  # no command: the usage, status 2
    assert capsys.readouterr().out.startswith("usage: jaxtrainer COMMAND")
    assert console("--help") == (0, "jaxtrainer", False)
    assert console("FIT", "ppo") == (2, "jaxtrainer", False)
    assert "unknown command 'FIT'; did you mean 'fit'?" in capsys.readouterr().err
    assert cli.main(["FIT", "ppo"]) == 2


def test_launch_ends_with_its_status_and_does_not_begin_as_a_command(console, capsys):
    """The launcher returns its ranks' status (here: a bad argument before any starts);
    each process it starts begins for itself."""
    assert console("launch", "--nproc-per-node", "0", "x.py") == (2, None, False)
    assert "--nproc-per-node=0" in capsys.readouterr().err
    assert cli.main(["launch", "--nproc-per-node", "0", "x.py"]) == 2


def test_fit_ends_with_0_after_a_run_and_2_after_a_config_error(console, capsys, monkeypatch,
                                                                 tmp_path):
    """A finished run ends the console command with 0 and returns 0 in a process that
    goes on (``cli.main(["fit", ...])`` once ended pytest silently); a config error
    (``SystemExit(2)``) ends it with 2 and is raised in-process, as argparse does."""
    from jaxtrainer.recipes import config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "fit_and_report", lambda trainer, module, cfg: {})
    assert cli.main(["fit", "ppo", "trainer.max_env_steps=512"]) == 0 and not console.froze()
    assert console("fit", "ppo", "trainer.max_env_steps=512") == (0, "jaxtrainer", True)
    capsys.readouterr()
    assert console("fit", "ppo", "algorithm.lr=fast") == (2, "jaxtrainer", True)
    error = "jaxtrainer fit ppo: error: algorithm.lr='fast': expected a non-negative number\n"
    assert capsys.readouterr().err == error
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "ppo", "algorithm.lr=fast"])
    assert done.value.code == 2 and capsys.readouterr().err == error and not console.froze()
    assert console("fit", "--list") == (0, "jaxtrainer", False)


def test_a_message_in_place_of_a_status_is_printed_and_ends_with_1(monkeypatch, capsys):
    ended = []
    monkeypatch.setattr(signals, "exit_now", lambda status=0: ended.append(status))
    startup.run_and_exit(lambda: sys.exit("usage: x DIRECTORY"))
    startup.run_and_exit(lambda: None)
    startup.run_and_exit(lambda: 3)
    assert ended == [1, 0, 3] and capsys.readouterr().err == "usage: x DIRECTORY\n"


@pytest.mark.timeout(120)
def test_the_console_command_ends_with_a_commands_systemexit_status():
    """The one real process: ``python -m jaxtrainer envs --bogus`` (argparse's
    ``SystemExit(2)``) ends with status 2 and argparse's lines."""
    proc = subprocess.run([sys.executable, "-m", "jaxtrainer", "envs", "--bogus"],
                          capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == "jaxtrainer envs: error: unrecognized arguments: --bogus"
