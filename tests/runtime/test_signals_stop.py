"""Signals through real processes: the first SIGINT names what is running, a
second ends the process within about 2 s keeping the last complete checkpoint
and leaving nothing half-written, a third is never ignored, and ``jaxtrainer
eval --video`` stops on the first."""

import os
import queue
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import jaxtrainer as jt
from jaxtrainer import checkpoint as ckpt
from jaxtrainer.recipes import config
from jaxtrainer.runtime import _signals as signals
from tests._support import toys
from tests._support._xla import xla_flags
from tests.commands.test_eval_cli import PPO_SIZES, RECIPES, init_only_run

REPO = Path(__file__).resolve().parents[2]
SECOND_SIGNAL_SECONDS = 3.0  # the process ends within ~2 s; slack for a loaded 2-core machine


class Child:
    """A subprocess whose stderr lines are read as they come (non-TTY pipes)."""

    def __init__(self, args, env=None):
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1), **(env or {}))
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.stdout: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._queue), daemon=True).start()
        threading.Thread(target=lambda: self.stdout.extend(self.proc.stdout), daemon=True).start()

    @staticmethod
    def _pump(stream, q):
        for line in stream:
            q.put(line)
        q.put(None)

    def wait_for(self, text, timeout=120.0):
        """The first stderr line (from now on) containing ``text``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.kill()
                raise AssertionError(f"no line with {text!r} in {timeout} s:\n{self.err}") from None
            if line is None:
                raise AssertionError(f"ended before a line with {text!r}:\n{self.err}")
            self.lines.append(line)
            if text in line:
                return line

    def signal_and_time_exit(self, signum=signal.SIGINT, timeout=30.0, again=True):
        """Send ``signum``; the seconds until the process ended. ``again``: a signal
        after another, sent ``signals.REPEAT_SECONDS`` later or more, so that it is a
        new request and not the last one delivered twice."""
        if again:
            time.sleep(2 * signals.REPEAT_SECONDS)
        start = time.monotonic()
        self.proc.send_signal(signum)
        self.proc.wait(timeout=timeout)
        return time.monotonic() - start

    @property
    def err(self):
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return "".join(self.lines)
            if line is not None:
                self.lines.append(line)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _no_partial(root):
    left = [p for d in Path(root).rglob("checkpoints") for p in signals.partial_checkpoints(d)]
    tmp = list(Path(root).rglob("*orbax-checkpoint-tmp*"))
    assert left == [] and tmp == [], (left, tmp)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_recipe_first_sigint_during_compile_names_it_and_second_ends_it_at_once(tmp_path):
    root = tmp_path / "runs"
    child = Child([sys.executable, "recipes/ppo.py", f"trainer.default_root_dir={root}",
                   "trainer.max_steps=20", *PPO_SIZES],
                  env={"JAXTRAINER_COMPILATION_CACHE": "0"})  # a compile, not a cache hit
    try:
        child.wait_for("jaxtrainer: compiling the training program ...")
        sent = time.monotonic()
        child.proc.send_signal(signal.SIGINT)
        first = child.wait_for("received SIGINT", timeout=10)
        assert time.monotonic() - sent < SECOND_SIGNAL_SECONDS  # said at once, not after the compile
        assert "while compiling the training program; saving a checkpoint once that is done" in first
        seconds = child.signal_and_time_exit()
    finally:
        child.kill()
    err = child.err
    assert child.proc.returncode == -signal.SIGINT, err  # ended by the signal: 130 in a shell
    assert seconds < SECOND_SIGNAL_SECONDS, (seconds, err)
    assert "second SIGINT: stopped at once while compiling the training program; no checkpoint " \
           "was written" in err
    assert "Traceback" not in err
    _no_partial(root)
    assert not any(root.rglob("checkpoints"))  # no empty checkpoints directory either


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_second_sigint_to_fit_ppo_leaves_no_run_lock(tmp_path):
    """Issue 68, a new user: a second SIGINT during `jaxtrainer fit ppo` left
    `<run>/.lock` behind (the next resume took it over on one host, but a run no
    process writes is not to be held). The second signal removes it on the way out;
    the process still ends within about 2 s, by that signal."""
    root = tmp_path / "runs"
    child = Child([sys.executable, "-m", "jaxtrainer", "fit", "ppo",
                   f"trainer.default_root_dir={root}", "trainer.max_steps=20", *PPO_SIZES],
                  env={"JAXTRAINER_COMPILATION_CACHE": "0"})  # a compile, not a cache hit
    try:
        child.wait_for("jaxtrainer: compiling the training program ...")
        assert (root / "version_0" / ".lock").is_file()  # held while it runs
        child.proc.send_signal(signal.SIGINT)
        child.wait_for("received SIGINT", timeout=10)
        seconds = child.signal_and_time_exit()
    finally:
        child.kill()
    err = child.err
    assert child.proc.returncode == -signal.SIGINT, err
    assert seconds < SECOND_SIGNAL_SECONDS, (seconds, err)
    assert "second SIGINT: stopped at once" in err
    assert (root / "version_0").is_dir() and list(root.rglob(".lock")) == []


def test_ending_at_once_removes_the_run_locks_the_process_holds(tmp_path):
    """What ends a process without its ``finally`` blocks (a second signal, a lost
    peer: ``end_by_signal``, ``exit_at_once``) first removes the locks it holds; a
    lock released already, or another process's, is left alone."""
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from jaxtrainer.rundir import _run_lock as run_lock
        from jaxtrainer.runtime import _signals as signals
        held = run_lock.acquire(Path({str(tmp_path)!r}) / "a")
        released = run_lock.acquire(Path({str(tmp_path)!r}) / "b")
        run_lock.release(released)
        (Path({str(tmp_path)!r}) / "b" / ".lock").write_text('{{"pid": 1, "host": "elsewhere"}}')
        signals.exit_at_once(3) if sys.argv[1] == "exit" else signals.end_by_signal(15, lambda: None)
    """)
    for how, status in (("exit", 3), ("signal", -signal.SIGTERM)):
        for name in ("a", "b"):
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / ".lock").unlink(missing_ok=True)
        proc = subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True,
                              timeout=60, cwd=REPO)
        assert proc.returncode == status, proc.stderr
        assert not (tmp_path / "a" / ".lock").exists()
        assert (tmp_path / "b" / ".lock").read_text() == '{"pid": 1, "host": "elsewhere"}'


_TRAIN = """
import time
import jaxtrainer as jt
from jaxtrainer.runtime import _signals as signals
from tests._support import toys

signals.GRACE_SECONDS = {grace}  # 0: the write in flight is cut off and removed, not waited for

class SlowAfterSignal(jt.Callback):
    order = 200  # after ModelCheckpoint started this step's (asynchronous) write
    def on_train_steps_end(self, trainer, module, metrics):
        time.sleep(30 if trainer.received_signal else 0.02)
    def on_exception(self, trainer, module, exception):  # a signal just after the check above
        time.sleep(30)  # the second signal, not the end of the preemption, ends the run

t = jt.Trainer(strategy="single", max_steps=100000, log_every_n_steps=1, sync_every_n_seconds=0,
               default_root_dir={root!r}, logger=False, compile_evaluation_ahead=False,
               callbacks=[jt.ModelCheckpoint(every_n_steps=1), SlowAfterSignal()])
t.fit(toys.Regression(per_device=False, big={big}))
"""
BIG = 1 << 21  # 8 MB written every step


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("grace", [signals.GRACE_SECONDS, 0.0])
def test_second_sigint_during_training_keeps_the_last_checkpoint_and_no_partial_write(tmp_path, grace):
    root = tmp_path / "runs"
    code = textwrap.dedent(_TRAIN.format(root=str(root), big=BIG, grace=grace))
    child = Child([sys.executable, "-c", code])
    try:
        ready = child.wait_for("the training program is ready")
        assert "running training step 1 of " in ready
        checkpoints = root / "version_0" / "checkpoints"
        deadline = time.monotonic() + 60
        while len(ckpt.steps(checkpoints)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        child.proc.send_signal(signal.SIGINT)
        first = child.wait_for("received SIGINT", timeout=10)
        assert "while running training step " in first
        seconds = child.signal_and_time_exit()
    finally:
        child.kill()
    err = child.err
    assert child.proc.returncode == -signal.SIGINT, err
    assert seconds < SECOND_SIGNAL_SECONDS, (seconds, err)
    assert "second SIGINT: stopped at once" in err and "Traceback" not in err
    _no_partial(root)
    last = ckpt.latest_step_dir(checkpoints)
    assert f"the last complete checkpoint is {last}" in err
    step = int(last.name)
    assert step >= 3 and ckpt.read_meta(last)["global_step"] == step
    resumed = toys.trainer(tmp_path / "resumed", strategy="single", max_steps=step + 1)
    resumed.fit(toys.Regression(per_device=False, big=BIG), ckpt_path=last)  # it restores
    assert resumed.global_step == step + 1


_STUCK = """
import importlib.util, time
spec = importlib.util.spec_from_file_location("signals", {path!r})  # alone: no JAX to import
signals = importlib.util.module_from_spec(spec)
spec.loader.exec_module(signals)
signals.DEADLINE_SECONDS = {deadline}

def stuck_cleanup():
    print("cleaning up", flush=True)
    time.sleep(120)

with signals.SignalHandlers(lambda s: None, lambda: None, True, stuck_cleanup, hard_exit=True):
    signals.ACTIVITY.enter("waiting")
    print("ready", flush=True)
    time.sleep(120)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("third", [False, True])
def test_a_stuck_cleanup_ends_at_the_deadline_and_a_third_signal_at_once(tmp_path, third):
    deadline = 30 if third else signals.DEADLINE_SECONDS
    child = Child([sys.executable, "-c", textwrap.dedent(_STUCK.format(path=signals.__file__, deadline=deadline))])
    try:
        while not any("ready" in line for line in child.stdout):
            assert child.proc.poll() is None, child.err
            time.sleep(0.02)
        child.proc.send_signal(signal.SIGINT)
        assert "received SIGINT while waiting" in child.wait_for("received SIGINT", timeout=10)
        time.sleep(2 * signals.REPEAT_SECONDS)  # a second request, not a repeat of the first
        child.proc.send_signal(signal.SIGINT)
        while not any("cleaning up" in line for line in child.stdout):
            time.sleep(0.01)
        seconds = child.signal_and_time_exit() if third else None
        if not third:
            start = time.monotonic()
            child.proc.wait(timeout=30)
            seconds = time.monotonic() - start
    finally:
        child.kill()
    assert child.proc.returncode == -signal.SIGINT, child.err
    if third:
        assert seconds < 1.0, seconds  # at once, not at the deadline
    else:
        assert signals.DEADLINE_SECONDS - 0.3 < seconds < SECOND_SIGNAL_SECONDS, seconds


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum,during", [
    (signal.SIGINT, "compiling the evaluation program ..."),  # XLA compiles in the main thread
    (signal.SIGTERM, "drawing frame 1/"),  # pygame draws (SDL must not take the signal)
])
def test_eval_video_stops_on_the_first_signal_with_no_video_written(tmp_path, signum, during):
    cfg = config.load(RECIPES / "configs" / "ppo.yaml", PPO_SIZES)
    run = init_only_run(tmp_path, "ppo", cfg)  # its greedy policy balances: a long episode
    gif = tmp_path / "cartpole.gif"
    child = Child([sys.executable, "-m", "jaxtrainer.commands._cli", "eval", str(run), "--episodes", "4",
                   "--video", str(gif)])
    phases = [f"jaxtrainer eval: restoring checkpoint {run}/checkpoints/0 ...",
              "jaxtrainer eval: evaluating 4 episodes of step 0 ...",
              "jaxtrainer eval: compiling the evaluation program ...",
              "jaxtrainer eval: recording 1 episode(s) of up to 500 steps for the video",
              "jaxtrainer eval: drawing frame 1/"]
    try:
        for phase in phases:
            child.wait_for(phase)  # one line per phase, in this order, on a non-TTY stderr
            if during in phase:
                break
        seconds = child.signal_and_time_exit(signum, again=False)
    finally:
        child.kill()
    err = child.err
    assert child.proc.returncode == -signum, err
    assert seconds < SECOND_SIGNAL_SECONDS, (seconds, err)
    name = signal.Signals(signum).name
    assert f"jaxtrainer eval: received {name} while " in err and "; stopping" in err
    if signum == signal.SIGTERM:
        assert "received SIGTERM while drawing frame " in err
    assert "Traceback" not in err
    assert not gif.exists()


def test_partial_checkpoints_are_removed_and_complete_ones_kept(tmp_path):
    d = tmp_path / "checkpoints"
    (d / "4" / "meta").mkdir(parents=True)  # complete
    (d / "6.orbax-checkpoint-tmp-1700000000" / "state").mkdir(parents=True)  # cut off
    (d / "8").mkdir()  # an empty step directory
    assert sorted(p.name for p in signals.partial_checkpoints(d)) == [
        "6.orbax-checkpoint-tmp-1700000000", "8"]
    start = time.monotonic()
    signals.remove_partial_checkpoints([d], grace_seconds=0.2)
    assert 0.15 < time.monotonic() - start < 2.0  # waited for the write, then gave up
    assert sorted(p.name for p in d.iterdir()) == ["4"]


def test_a_write_that_completes_within_the_grace_period_is_kept(tmp_path):
    d = tmp_path / "checkpoints"
    tmp = d / "6.orbax-checkpoint-tmp-1"
    (tmp / "meta").mkdir(parents=True)
    timer = threading.Timer(0.1, lambda: tmp.rename(d / "6"))  # the writer commits
    timer.start()
    signals.remove_partial_checkpoints([d], grace_seconds=5.0)
    timer.join()
    assert sorted(p.name for p in d.iterdir()) == ["6"]


def test_a_writer_still_running_cannot_write_a_removed_checkpoint_again(tmp_path):
    d = tmp_path / "checkpoints"
    (d / "2" / "meta").mkdir(parents=True)
    tmp = d / "6.orbax-checkpoint-tmp"
    failed = threading.Event()

    def writer():  # as an orbax thread: creates what it writes into, until an error stops it
        for i in range(100000):
            try:
                (tmp / "state" / "d").mkdir(parents=True, exist_ok=True)
                (tmp / "state" / "d" / str(i % 50)).write_bytes(b"x")
            except OSError:
                failed.set()
                return

    thread = threading.Thread(target=writer)
    thread.start()
    while not tmp.exists():
        time.sleep(0.001)
    signals.remove_partial_checkpoints([d], grace_seconds=0.0)
    thread.join(timeout=10)
    assert failed.is_set() and sorted(p.name for p in d.iterdir()) == ["2"]


def test_an_empty_checkpoints_directory_is_removed_and_a_missing_one_is_fine(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    signals.remove_partial_checkpoints([tmp_path / "checkpoints", tmp_path / "absent"], 0.0)
    assert list(tmp_path.iterdir()) == []


def test_handlers_are_restored_after_fit_and_a_preemption_names_its_phase(run_dir, capsys):
    before = signal.getsignal(signal.SIGINT), signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before[1])

    class SendSignal(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            if trainer.global_step == 2:
                os.kill(os.getpid(), signal.SIGINT)

    t = toys.trainer(run_dir, strategy="single", max_steps=6, callbacks=[SendSignal()])
    with pytest.raises(jt.Preempted) as info:
        t.fit(toys.Regression())
    assert info.value.step == 2
    assert signal.getsignal(signal.SIGINT) is before[0]
    assert signal.set_wakeup_fd(before[1]) == before[1]  # the wakeup fd is given back
    assert not any(th.name == "jaxtrainer-signals" for th in threading.enumerate())
    err = capsys.readouterr().err
    assert "received SIGINT while running training step" in err


@pytest.mark.timeout(60)
def test_a_signal_between_installing_two_handlers_reaches_the_new_one():
    """A Ctrl-C right after the SIGTERM handler went in but before the SIGINT one
    (the first instant of every command) ends the process in one line, not in
    Python's KeyboardInterrupt traceback: the signal is held while both go in."""
    script = textwrap.dedent("""
        import os, signal
        real = signal.signal
        def install_then_interrupt(signum, handler):
            old = real(signum, handler)
            if signum == signal.SIGTERM:
                os.kill(os.getpid(), signal.SIGINT)  # arrives before SIGINT's handler
            return old
        signal.signal = install_then_interrupt
        from jaxtrainer.runtime import _startup as startup
        startup.begin("prog")
        signal.signal = real
        import time
        time.sleep(30)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=50, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == -signal.SIGINT, out.stderr
    assert out.stderr == "prog: received SIGINT while starting; stopping\n"


def test_a_signal_delivered_twice_at_once_is_one_request():
    """``timeout`` sends its signal to the command and then to its process group: two
    deliveries microseconds apart. Counted as two, the copy would stop the run without
    its checkpoint."""
    now = [100.0]
    requests = signals.Requests(clock=lambda: now[0])
    assert requests.add(signal.SIGTERM) and requests.count == 1
    now[0] += 1e-5
    assert not requests.add(signal.SIGTERM) and requests.count == 1  # the same request
    assert requests.add(signal.SIGINT) and requests.count == 2  # another signal is another
    now[0] += signals.REPEAT_SECONDS
    assert requests.add(signal.SIGTERM) and requests.count == 3  # later: a second request
    now[0] += signals.REPEAT_SECONDS / 2
    assert not requests.add(signal.SIGTERM)
    now[0] += signals.REPEAT_SECONDS / 2  # measured from the last counted one
    assert requests.add(signal.SIGTERM) and requests.count == 4


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_signal_sent_twice_at_once_still_saves_the_checkpoint(tmp_path):
    """What ``timeout -s TERM 20 jaxtrainer fit sac trainer.max_env_steps=20000`` did
    at 20 s (SIGTERM to the command, then to its process group; the kernel merges the
    two only when the process has not run in between, so here they are sent 5 ms apart
    to make them two deliveries), to the recipe that compiles fastest: one request, the
    run saves its checkpoint and says how to resume."""
    jaxtrainer = shutil.which("jaxtrainer") or pytest.fail("the jaxtrainer command is not installed")
    for attempt in range(3):
        root = tmp_path / f"runs{attempt}"
        child = Child([jaxtrainer, "fit", "ppo", f"trainer.default_root_dir={root}"])
        try:
            child.wait_for("the training program is ready")
            start = time.monotonic()
            child.proc.send_signal(signal.SIGTERM)
            while time.monotonic() - start < 0.005:  # spin: a sleep may wake up much later
                pass
            child.proc.send_signal(signal.SIGTERM)
            gap = time.monotonic() - start
            child.proc.wait(timeout=60)
        finally:
            child.kill()
        err = child.err
        if gap < signals.REPEAT_SECONDS / 2:
            break
        # this process waited for a core between the two: not "at once"; try again
        assert child.proc.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), err
    else:
        pytest.fail(f"could not send two signals within {signals.REPEAT_SECONDS / 2} s in 3 tries")
    assert child.proc.returncode == 128 + signal.SIGTERM, err  # Preempted, not killed
    assert "received SIGTERM while " in err and "second SIGTERM" not in err, err
    last = ckpt.latest_step_dir(root / "version_0" / "checkpoints")
    assert last is not None and ckpt.read_meta(last)["global_step"] == int(last.name) > 0
    assert "Resume with" in err
    _no_partial(root)
