"""Phase lines: what the process is doing, one line per phase on stderr (a
terminal or a log file alike), from process 0 with a progress bar, and in
``jaxtrainer eval`` (``drawing frame i/n`` at a bounded rate)."""

import re
import time

import pytest

from jaxtrainer.commands import _cli as cli
from jaxtrainer.commands import _render as render
from jaxtrainer.population import PopulationTrainer
from jaxtrainer.runtime import _signals as signals
from jaxtrainer.trainer import _compile_ahead as compile_ahead
from tests._support import toys
from tests.population.test_population import GENERATIONS, Recording


def _phase_lines(err):
    return [line for line in err.splitlines() if line.startswith("jaxtrainer")]


@pytest.mark.timeout(120)
def test_fit_says_it_compiles_and_then_trains_with_a_progress_bar(run_dir, capsys):
    t = toys.trainer(run_dir, strategy="single", max_steps=4, enable_progress_bar=True)
    t.fit(toys.Regression())
    err = capsys.readouterr().err
    lines = _phase_lines(err)
    assert lines[0] == "jaxtrainer: compiling the training program ..."
    assert re.fullmatch(r"jaxtrainer: the training program is ready \(compiled in \d+\.\d s\); "
                        r"running training steps? 1(-\d)? of 4 \.\.\.", lines[1]), lines
    assert len(lines) == 2  # one line per phase, none per step


@pytest.mark.timeout(120)
def test_without_a_progress_bar_fit_prints_no_phase_lines(run_dir, capsys):
    toys.trainer(run_dir, strategy="single", max_steps=2).fit(toys.Regression())
    assert "compiling" not in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_a_long_background_compile_says_so_at_intervals(run_dir, capsys, monkeypatch):
    monkeypatch.setattr(compile_ahead, "STILL_SECONDS", 0.05)
    t = toys.trainer(run_dir, strategy="single", max_steps=2, enable_progress_bar=True)
    compile_train = t.strategy.compile_train

    def slow_compile(*args):
        time.sleep(0.5)
        return compile_train(*args)

    monkeypatch.setattr(t.strategy, "compile_train", slow_compile)
    start = time.monotonic()
    t.fit(toys.Regression())
    seconds = time.monotonic() - start
    still = [line for line in capsys.readouterr().err.splitlines() if "still compiling" in line]
    assert 2 <= len(still) <= seconds / 0.05 + 1, still  # one per interval waited, no more
    assert re.fullmatch(r"jaxtrainer: still compiling the training program \(\d+ s so far\) \.\.\.",
                        still[0])


@pytest.mark.timeout(120)
def test_a_population_run_says_it_compiles(run_dir, capsys):
    t = PopulationTrainer(4, strategy="single", max_generations=GENERATIONS,
                          log_every_n_generations=3, default_root_dir=run_dir, logger=False,
                          enable_checkpointing=False, compile_evaluation_ahead=False)
    t.fit(Recording())
    lines = _phase_lines(capsys.readouterr().err)
    assert lines[0] == "jaxtrainer: compiling the training program ..."
    assert re.search(rf"running training steps? 1(-\d)? of {GENERATIONS} \.\.\.$", lines[1])


def test_drawing_progress_names_the_frame_and_limits_its_lines(capsys):
    drawn = []
    with signals.ACTIVITY.showing(True, "jaxtrainer eval"):
        draw = render.drawing_progress(drawn.append, 5, seconds=3600)
        for frame in range(5):
            draw(frame)
            assert signals.ACTIVITY.now == f"drawing frame {frame + 1}/5"
        every = render.drawing_progress(drawn.append, 3, seconds=0, then="writing x.gif")
        for frame in range(3):
            every(frame)
    assert drawn == [0, 1, 2, 3, 4, 0, 1, 2]
    assert capsys.readouterr().err.splitlines() == [
        "jaxtrainer eval: drawing frame 1/5", "jaxtrainer eval: drawing frame 5/5",
        "jaxtrainer eval: drawing frame 1/3", "jaxtrainer eval: drawing frame 2/3",
        "jaxtrainer eval: drawing frame 3/3", "jaxtrainer eval: writing x.gif ..."]
    assert signals.ACTIVITY.lines is False  # set back after the block


def test_the_brax_viewer_says_it_needs_internet_access(capsys):
    assert "unpkg.com" in render.BRAX_HTML_NOTE and "offline" in render.BRAX_HTML_NOTE
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    assert "internet access" in " ".join(capsys.readouterr().out.split())


def test_an_evaluation_outside_the_command_prints_no_phase_lines(tmp_path, capsys):
    t = toys.trainer(tmp_path, strategy="single", max_steps=1)
    t.evaluate(toys.Regression())
    assert capsys.readouterr().err == ""  # the library stays quiet unless asked


_BRAX_GIF = """
import sys
from types import SimpleNamespace
from typing import NamedTuple
import numpy as np
from jaxtrainer.runtime import _signals as signals
from jaxtrainer.commands import _render as render
render.headless_gl()  # as jaxtrainer eval does, before brax imports MuJoCo
import mujoco

class Pipeline(NamedTuple):  # what the drawing reads of brax's pipeline state
    q: np.ndarray
    qd: np.ndarray

# what it reads of a brax env: its system's MuJoCo model (a pole on a hinge) and dt
model = mujoco.MjModel.from_xml_string(
    '<mujoco><worldbody><light pos="0 0 3"/><geom type="plane" size="2 2 .1"/>'
    '<body pos="0 0 .1"><joint type="hinge" axis="0 1 0"/>'
    '<geom type="capsule" fromto="0 0 0 0 0 1" size=".05"/></body></worldbody></mujoco>')
pendulum = SimpleNamespace(sys=SimpleNamespace(mj_model=model), dt=0.04)
q = np.linspace(0.0, 1.2, 12, dtype=np.float32)[:, None]  # the pole falls over 12 steps
episode = SimpleNamespace(env_state=SimpleNamespace(state=Pipeline(q, np.zeros_like(q))))
env = SimpleNamespace(env=pendulum, pipeline_state=lambda state: state)
with signals.ACTIVITY.showing(True, "jaxtrainer eval"):
    frames = render.write_brax_gif(env, [(episode, np.zeros(12, np.float32))], sys.argv[1])
print(frames)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_brax_episode_is_drawn_offline_as_a_gif_frame_by_frame(tmp_path):
    """The offline alternative to brax's HTML viewer: frames drawn here by
    MuJoCo's renderer (EGL without a display; no internet), one phase line per
    few seconds on a non-TTY stderr."""
    import os
    import subprocess
    import sys

    from PIL import Image, ImageChops

    gif = tmp_path / "pendulum.gif"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", _BRAX_GIF, str(gif)], text=True,
                         env={**env, "JAX_PLATFORMS": "cpu"}, capture_output=True, timeout=170)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["12"]
    assert [line for line in out.stderr.splitlines() if line.startswith("jaxtrainer")] == [
        "jaxtrainer eval: drawing frame 1/12", "jaxtrainer eval: drawing frame 12/12",
        f"jaxtrainer eval: writing {gif} ...", "jaxtrainer eval: writing frame 1/12 of pendulum.gif",
        "jaxtrainer eval: writing frame 12/12 of pendulum.gif"]
    image = Image.open(gif)
    assert image.n_frames == 12 and image.size == (320, 240)
    first = image.convert("RGB")
    image.seek(11)
    assert ImageChops.difference(first, image.convert("RGB")).getbbox() is not None  # it falls
