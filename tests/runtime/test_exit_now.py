"""Commands and recipe scripts end without the interpreter's teardown, but as a normal
exit otherwise: atexit handlers run, buffered output is flushed, threads are waited for."""

import subprocess
import sys
import textwrap
import threading

import pytest

from jaxtrainer.runtime._signals import exit_now


def test_atexit_handlers_run_and_output_is_flushed(tmp_path):
    marker = tmp_path / "atexit.txt"
    script = textwrap.dedent(f"""
        import atexit, sys
        from jaxtrainer.runtime._signals import exit_now
        atexit.register(lambda: open({str(marker)!r}, "w").write("ran"))
        sys.stdout.write("no newline, still buffered")
        sys.stderr.write("and stderr")
        exit_now(3)
        print("never reached")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 3
    assert out.stdout == "no newline, still buffered"
    assert out.stderr == "and stderr"
    assert marker.read_text() == "ran"


def test_a_running_thread_gets_a_normal_exit():
    release = threading.Event()
    worker = threading.Thread(target=release.wait, daemon=False)
    worker.start()
    try:
        with pytest.raises(SystemExit) as exc:
            exit_now(4)  # would end this process if it did not see the thread
        assert exc.value.code == 4
    finally:
        release.set()
        worker.join()


@pytest.mark.timeout(120)
def test_a_command_freezes_its_imports_and_ends_with_its_status_and_in_process_calls_do_not():
    script = textwrap.dedent("""
        import gc
        from jaxtrainer.runtime._startup import freeze_imports, run_and_exit
        freeze_imports()  # in-process: nothing frozen
        print(gc.get_freeze_count())
        def body():
            import json  # the command's libraries
            freeze_imports()
            junk = [[]]
            junk[0].append(junk)  # a cycle made after the freeze stays collectable
            del junk
            print(gc.get_freeze_count(), gc.collect() > 0)
            return 5
        run_and_exit(body)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 5, out.stderr
    before, command = out.stdout.splitlines()
    assert before == "0"
    frozen, collected = command.split()
    assert int(frozen) > 1000 and collected == "True"


def test_ctrl_c_before_training_is_one_line_and_status_130(capsys):
    from jaxtrainer.recipes._command import cli

    def main(argv):
        raise KeyboardInterrupt  # e.g. while building the environment

    with pytest.raises(SystemExit) as exc:
        cli(main, [], prog="ppo.py")
    assert exc.value.code == 130
    assert capsys.readouterr().err == "ppo.py: interrupted (SIGINT) before training started\n"
