"""``jaxtrainer eval --video``: the output path checked first, the video written
whole or not at all, and phase lines while compiling and writing."""

from __future__ import annotations

import errno
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from jaxtrainer.commands import _eval_cli as eval_cli
from jaxtrainer.commands import _eval_run as eval_run
from jaxtrainer.commands import _render as render
from jaxtrainer.rundir.storage import StorageError, check_writable
from jaxtrainer.runtime import _signals as signals
from jaxtrainer.trainer import _compile_ahead as compile_ahead


def _phase_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("jaxtrainer")]


@pytest.mark.timeout(30)
def test_a_video_in_a_missing_or_non_directory_is_refused_before_anything_runs(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(StorageError, match=r"afile/v\.gif: .*afile is not a directory"):
        check_writable(afile / "v.gif", "the video")
    with pytest.raises(StorageError, match=r"missing/v\.gif: directory .*missing does not exist"):
        check_writable(tmp_path / "missing" / "v.gif", "the video")
    with pytest.raises(StorageError, match="it is a directory"):
        check_writable(tmp_path, "the video")
    check_writable(tmp_path / "v.gif", "the video")  # a writable directory: fine


@pytest.mark.timeout(60)
def test_an_unwritable_or_empty_video_path_is_refused_before_the_run_is_read(capsys):
    """Issue 68, a new user: `jaxtrainer eval RUN --video /proc/x.gif` failed only after
    ~75 s of recording (root passes os.access on /proc; a file cannot be made there),
    and `--video ''` said 'it is a directory'. Both are one line, status 2, before the
    run (here none) is read."""
    from jaxtrainer.commands import _cli as cli

    assert cli.main(["eval", "RUN", "--video", "/proc/x.gif"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch(
        r"jaxtrainer eval: error: could not write the video /proc/x\.gif: no file can be created "
        r"in directory /proc \(\[Errno \d+\] [^)]+\)", err[0]), err
    assert cli.main(["eval", "RUN", "--video", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["jaxtrainer eval: error: --video '': needs a file name ending in .gif, .mp4 or "
                   ".html (e.g. --video cartpole.gif); supported: gymnax environments its "
                   "visualiser draws (e.g. CartPole-v1) as .gif (or .mp4 with ffmpeg installed), "
                   "brax/<env> as .html or .gif"]
    assert cli.main(["eval", "RUN", "--video", "x.txt"]) == 2
    assert "--video 'x.txt': expected a file name ending in .gif, .mp4 or .html, not '.txt'" in \
        capsys.readouterr().err


@pytest.mark.timeout(30)
def test_a_video_path_that_is_a_directory_says_what_was_expected(tmp_path):
    with pytest.raises(StorageError, match=rf"could not write the video {re.escape(str(tmp_path))}: "
                                           r"it is a directory; expected a file name ending in "
                                           r"\.gif, \.mp4 or \.html$"):
        render.check_output_path(tmp_path)


@pytest.mark.timeout(30)
def test_eval_with_a_bad_video_path_is_one_line_and_status_2(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    # the run does not exist either: the video path is checked first
    code = eval_cli.main([str(tmp_path / "no_run"), "--video", str(afile / "v.gif")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"jaxtrainer eval: error: could not write the video {afile / 'v.gif'}: "
                   f"{afile} is not a directory"]


@pytest.mark.timeout(30)
def test_the_numbers_are_printed_before_a_video_write_error(monkeypatch, tmp_path, capsys):
    result = {"checkpoint": "c/4", "step": 4, "env_steps": 64, "seed": 0, "episodes": 2,
              "completed": 2, "member": None, "video_frames": None,
              "metrics": {"eval/episode_return": 1.0, "eval/episode_return_std": 0.0,
                          "eval/episode_return_min": 1.0, "eval/episode_return_max": 1.0}}

    def evaluate_run(*args, report, **kwargs):
        report(result)
        raise StorageError(f"could not write the video {tmp_path / 'v.gif'}: [Errno 27] "
                           "File too large")

    monkeypatch.setattr(eval_run, "evaluate_run", evaluate_run)
    code = eval_cli.main(["run", "--video", str(tmp_path / "v.gif")])
    out, err = capsys.readouterr()
    assert code == 2
    assert out.splitlines()[0] == "checkpoint c/4 (step 4, env steps 64); seed 0"
    assert "episode_return: mean=1.0000" in out
    assert err.strip().splitlines() == [
        f"jaxtrainer eval: error: could not write the video {tmp_path / 'v.gif'}: "
        "[Errno 27] File too large"]


def _fake_video(monkeypatch, write) -> SimpleNamespace:
    monkeypatch.setattr(render, "check_video_path", lambda name, path: None)
    monkeypatch.setattr(render, "record", lambda *args: [])
    monkeypatch.setattr(render, "write_gymnax", write)
    return SimpleNamespace(name="CartPole-v1")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("failure", [OSError(errno.EFBIG, "File too large"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_previous_video_whole(monkeypatch, tmp_path, failure):
    video = tmp_path / "v.gif"
    video.write_bytes(b"the previous complete video")

    def write(env, episodes, path, shown_as=None):
        assert path == render.temporary_path(video) and path.name.endswith(".gif")
        assert video.read_bytes() == b"the previous complete video"  # not truncated meanwhile
        path.write_bytes(b"half")
        raise failure

    env = _fake_video(monkeypatch, write)
    with pytest.raises(type(failure)) as raised:
        render.write_video(env, None, None, None, video)
    if isinstance(failure, OSError):
        assert isinstance(raised.value, StorageError)
        assert str(raised.value) == f"could not write the video {video}: [Errno 27] File too large"
    assert video.read_bytes() == b"the previous complete video"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.gif"]


@pytest.mark.timeout(30)
def test_a_complete_video_replaces_the_previous_one(monkeypatch, tmp_path):
    video = tmp_path / "v.gif"
    video.write_bytes(b"old")

    def write(env, episodes, path, shown_as=None):
        path.write_bytes(b"new")
        return 7

    assert render.write_video(_fake_video(monkeypatch, write), None, None, None, video) == 7
    assert video.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.gif"]


@pytest.mark.timeout(30)
def test_writing_a_gif_reports_its_frames_rate_limited(monkeypatch, tmp_path, capsys):
    from PIL import Image

    monkeypatch.setattr(render, "FRAME_LINE_SECONDS", 3600.0)
    images = [Image.new("RGB", (4, 4), (40 * i, 0, 0)) for i in range(5)]
    target = tmp_path / ".w.gif.tmp-1.gif"
    with signals.ACTIVITY.showing(True, "jaxtrainer eval"):
        render.save_gif(images, target, 40, shown_as=tmp_path / "w.gif")
    assert _phase_lines(capsys.readouterr().err) == [
        "jaxtrainer eval: writing frame 1/5 of w.gif", "jaxtrainer eval: writing frame 5/5 of w.gif"]
    assert Image.open(target).n_frames == 5


class SlowStrategy:
    """Compiles that take ``seconds`` (a stand-in for XLA)."""

    jit = True

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def _compile(self, *args):
        time.sleep(self.seconds)
        return SimpleNamespace(compile_seconds=self.seconds)

    compile_train = compile_eval = _compile


def _still(err: str, what: str) -> list[str]:
    return [line for line in _phase_lines(err) if line.startswith(f"jaxtrainer: still compiling "
                                                                  f"the {what} program")]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ahead", [False, True])
def test_a_slow_compile_says_still_compiling_every_interval(monkeypatch, capsys, ahead):
    """Every interval of the compile's wall time, whether it is compiled ahead
    (the main thread busy meanwhile, as building a sweep's state) or now."""
    monkeypatch.setattr(compile_ahead, "STILL_SECONDS", 0.5)  # lines at 0.5 and 1.0 s
    programs, module = compile_ahead.Programs(SlowStrategy(1.25)), object()
    with signals.ACTIVITY.showing(True):
        if ahead:
            programs.compile_ahead(module, None, None, evaluation=False)
            time.sleep(0.6)  # the main thread builds the state meanwhile
        programs.train(module, None, None)
        time.sleep(0.3)  # no heartbeat after the compile
    err = capsys.readouterr().err
    assert len(_still(err, "training")) == 2, err


@pytest.mark.timeout(30)
def test_the_evaluation_program_says_when_it_is_ready(monkeypatch, capsys):
    monkeypatch.setattr(compile_ahead, "STILL_SECONDS", 0.5)  # one line, at 0.5 s
    programs, module = compile_ahead.Programs(SlowStrategy(0.75)), object()
    with signals.ACTIVITY.showing(True):
        signals.ACTIVITY.enter("evaluating at step 4")
        programs.evaluation(module, None, None)
        assert signals.ACTIVITY.now == "evaluating at step 4"
    lines = _phase_lines(capsys.readouterr().err)
    assert lines[0] == "jaxtrainer: compiling the evaluation program ..."
    assert len(_still("\n".join(lines), "evaluation")) == 1
    assert lines[-1] == ("jaxtrainer: the evaluation program is ready (compiled in 0.8 s); "
                         "evaluating ...")


@pytest.mark.timeout(120)
def test_a_video_alone_runs_only_the_episodes_it_draws(monkeypatch, tmp_path, capsys):
    """Issue 68, 6: `jaxtrainer eval RUN --video cartpole.gif` first ran the 32
    evaluation episodes (algorithm.eval_episodes) nobody asked for; now only the
    video's episode runs, and the numbers printed are its own, said so."""
    from jaxtrainer.recipes import config
    from tests.commands.test_eval_cli import RECIPES, init_only_run

    cfg = config.load(RECIPES / "configs" / "ppo.yaml", ["algorithm.hidden_sizes=[16]"])
    run = init_only_run(tmp_path, "ppo", cfg)  # a saved run of the initial policy
    evaluated, recorded = [], []
    run_episodes = eval_run.run_episodes
    monkeypatch.setattr(eval_run, "run_episodes", lambda env, policy, params, key, num, *a, **k:
                        evaluated.append(num) or run_episodes(env, policy, params, key, num, *a, **k))
    record = render.record
    monkeypatch.setattr(render, "record", lambda env, policy, params, key, num, *a:
                        recorded.append(num) or record(env, policy, params, key, num, *a))
    monkeypatch.setattr(render, "write_gymnax", lambda env, episodes, path, shown_as=None:
                        path.write_bytes(b"gif") and sum(len(r) for _, r in episodes))
    assert eval_cli.main([str(run), "--video", str(tmp_path / "cartpole.gif")]) == 0
    assert (evaluated, recorded) == ([], [1])
    out = capsys.readouterr().out
    assert ("episodes: 1 completed of 1 (the video's, no other evaluation: --episodes N for N "
            "evaluation episodes)") in out
    assert (tmp_path / "cartpole.gif").read_bytes() == b"gif"
    # the Quickstart's --video line names the extra that draws it (pygame)
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    assert '--video cartpole.gif  # watch it: pip install -e ".[render]" first' in readme
    assert '".[render]" first; 2-3 min on 2 CPU cores\n' in readme  # and how long it takes
    assert 'render = ["pygame' in (root / "pyproject.toml").read_text()
