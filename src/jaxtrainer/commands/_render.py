"""Watching a policy: episodes rendered headless on CPU by each simulator's own viewer.

* gymnax classic-control and the other environments gymnax's visualiser draws
  (``CartPole-v1``, ``Acrobot-v1``, ``Pendulum-v1``, ``MountainCar-v0``,
  ``MountainCarContinuous-v0``, ``Catch-bsuite``, the MinAtar games, ...):
  ``gymnax.visualize.Visualizer`` (matplotlib; classic control draws each frame
  with Gymnasium's ``rgb_array`` renderer, which needs ``pygame``) writes a
  ``.gif`` (Pillow) or, where ffmpeg is installed, an ``.mp4``.
* brax (``brax/<env>``): ``brax.io.html.render`` writes an ``.html`` viewer
  holding the system and the trajectory as JSON (three.js in the browser; no
  OpenGL context needed here). The page loads three.js, pako and brax's viewer
  script from public CDNs (unpkg.com, cdn.jsdelivr.net), so it is blank in a
  browser without internet access (:data:`BRAX_HTML_NOTE`, printed by
  ``jaxtrainer eval``); they are not shipped with jaxtrainer. Offline, a
  ``.gif`` (:func:`write_brax_gif`) is drawn here by MuJoCo's renderer, as
  ``brax.io.image`` does; it needs an OpenGL context: EGL (``MUJOCO_GL=egl``,
  which ``jaxtrainer eval`` sets without a display) or OSMesa.

Progress: each phase (recording the episodes, drawing frame ``i/n`` at most
every :data:`FRAME_LINE_SECONDS` and at the last frame, writing the viewer,
``writing frame i/n of <name>`` of a ``.gif`` as often) is
a line on stderr where :data:`jaxtrainer.runtime._signals.ACTIVITY` has lines on
(``jaxtrainer eval``), and what a signal message names.

MuJoCo Playground renders through MuJoCo's OpenGL renderer, which needs an
OpenGL context: not supported here.

The episodes and the brax frames come from :mod:`jaxtrainer.envs.rendering`,
which :class:`~jaxtrainer.callbacks.VideoCallback` draws its videos with too.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import jax

from jaxtrainer.envs.base import Env
from jaxtrainer.envs.rendering import (  # noqa: F401 - shared with VideoCallback, named here too
    GYMNAX_VISUALIZED,
    brax_frames,
    brax_states,
    episode_program,
    headless_gl,
    missing_pygame,
    quiet_pygame,
    simulator,
    step_states,
)
from jaxtrainer.rundir.storage import check_writable, writing
from jaxtrainer.runtime._optional import import_optional
from jaxtrainer.runtime._signals import ACTIVITY, Every

FORMATS = {"gymnax": (".gif", ".mp4"), "brax": (".html", ".gif")}
"""Video formats by simulator."""

FRAME_LINE_SECONDS = 5.0
"""Seconds between ``drawing frame i/n`` lines (the first and last frames always have one)."""

BRAX_HTML_NOTE = (
    "brax's .html viewer loads three.js, pako and its viewer script from unpkg.com and "
    "cdn.jsdelivr.net: open it in a browser with internet access (offline the page stays "
    "blank); --video x.gif draws the frames here instead (MuJoCo's renderer, offline)")
"""What ``jaxtrainer eval --video x.html`` says after writing a brax viewer."""


def _supported() -> str:
    return ("supported: gymnax environments its visualiser draws (e.g. CartPole-v1) as .gif "
            "(or .mp4 with ffmpeg installed), brax/<env> as .html or .gif")


def _check_offscreen_gl(path: str | os.PathLike) -> None:
    """Raise ValueError when MuJoCo's renderer cannot get an OpenGL context here."""
    try:
        import mujoco

        with warnings.catch_warnings():  # GLFW without a display warns, then fails below
            warnings.simplefilter("ignore")
            renderer = mujoco.Renderer(mujoco.MjModel.from_xml_string("<mujoco/>"), 8, 8)
            renderer.render()
            renderer.close()
    except Exception as error:  # an OpenGL library missing or failing: say which
        raise ValueError(
            f"--video {os.fspath(path)!r}: brax frames are drawn by MuJoCo's renderer, which needs "
            f"an OpenGL context (MUJOCO_GL={os.environ.get('MUJOCO_GL', '')!r}; egl or osmesa "
            f"headless): {type(error).__name__}: {' '.join(str(error).split())}; write .html "
            "instead (brax's viewer; the browser needs internet access)") from None


def check_output_path(path: str | os.PathLike) -> None:
    """Check, before anything runs, that a video can be written at ``path``:
    a file name whose suffix is a video format (:data:`FORMATS`), in a
    directory that exists and takes a new file, not a directory
    (:func:`jaxtrainer.rundir.storage.check_writable`). Which of the formats
    an environment is drawn in is :func:`check_video_path`'s.

    Raises:
      ValueError: no file name (``--video ''``) or a suffix of no video format.
      StorageError: one line naming the path and what is wrong.
    """
    text = os.fspath(path)
    suffixes = tuple(dict.fromkeys(s for kind in FORMATS.values() for s in kind))
    named = f"{', '.join(suffixes[:-1])} or {suffixes[-1]}"
    if not text.strip() or text.endswith(os.sep):
        raise ValueError(f"--video {text!r}: needs a file name ending in {named} "
                         f"(e.g. --video cartpole.gif); {_supported()}")
    suffix = Path(text).suffix
    if not Path(text).is_dir() and suffix.lower() not in suffixes:
        raise ValueError(f"--video {text!r}: expected a file name ending in {named}, not "
                         f"{suffix or 'a name without suffix'!r}; {_supported()}")
    check_writable(path, "the video", expected=f"a file name ending in {named}")


def temporary_path(path: str | os.PathLike) -> Path:
    """Where the video for ``path`` is written before it replaces ``path``:
    ``.<name>.tmp-<pid><suffix>`` in the same directory (the suffix kept, as the
    writers pick the format by it)."""
    target = Path(path)
    return target.with_name(f".{target.name}.tmp-{os.getpid()}{target.suffix}")


def check_video_path(env_name: str, path: str | os.PathLike) -> None:
    """Check that ``path``'s format can show ``env_name`` here, before anything runs.

    Raises:
      ValueError: a format the simulator's viewer does not write, ``.mp4``
        without ffmpeg, an environment without a headless viewer (naming the
        supported formats), or gymnax's classic control without ``pygame``.
    """
    kind, suffix = simulator(env_name), Path(path).suffix.lower()
    if kind == "playground":
        raise ValueError(f"--video: {env_name}: MuJoCo Playground renders with MuJoCo's OpenGL "
                         f"renderer, which needs an OpenGL context; {_supported()}")
    if kind not in FORMATS:
        raise ValueError(f"--video: {env_name}: not written by jaxtrainer eval; {_supported()} "
                         "(VideoCallback draws it during training)")
    if suffix not in FORMATS[kind]:
        raise ValueError(f"--video {os.fspath(path)!r}: {env_name} is written as "
                         f"{' or '.join(FORMATS[kind])}, not {suffix or 'a file without suffix'!r}; "
                         + _supported())
    if kind == "brax" and suffix == ".gif":
        _check_offscreen_gl(path)
    if kind == "gymnax":
        if env_name not in GYMNAX_VISUALIZED:
            raise ValueError(f"--video: gymnax's visualiser does not draw {env_name}; it draws "
                             f"{', '.join(GYMNAX_VISUALIZED)}")
        if suffix == ".mp4":
            from matplotlib import animation

            if not animation.writers.is_available("ffmpeg"):
                raise ValueError(f"--video {os.fspath(path)!r}: writing .mp4 needs ffmpeg on "
                                 "PATH (matplotlib's FFMpegWriter); write a .gif instead")
        missing = missing_pygame(env_name)
        if missing is not None:
            raise ValueError(f"--video: {missing}")


def record(env: Env, policy_fn: Any, params: Any, key: jax.Array, num_episodes: int,
           initial_carry: Any = None) -> list[Any]:
    """``num_episodes`` fresh episodes of ``policy_fn`` (batched, as
    :func:`jaxtrainer.envs.evaluate_policy` takes it, with ``initial_carry``
    for a policy with memory), each run until it ends (at most
    ``env.max_episode_steps``).

    Returns:
      One ``(states, returns)`` pair per episode: ``states`` the
      :class:`~jaxtrainer.envs.EnvState` before each step (a pytree whose leaves
      have a leading ``[length]`` axis, on the host), ``returns``
      ``float32[length]`` the return after each step.
    """
    steps = env.max_episode_steps
    ACTIVITY.enter(f"recording {num_episodes} episode(s) for the video",
                   f"recording {num_episodes} episode(s) of up to {steps} steps for the video "
                   "(compiling the episode program first) ...")
    return episode_program(env, policy_fn, num_episodes, initial_carry)(params, key)


def _gif_writer(fps: int, shown_as: str | os.PathLike) -> Any:
    """matplotlib's Pillow writer, writing the gif frame by frame with
    ``writing frame i/n`` phases (:func:`save_gif`)."""
    from matplotlib import animation

    class ProgressPillowWriter(animation.PillowWriter):
        def finish(self) -> None:
            save_gif(self._frames, self.outfile, int(1000 / self.fps), shown_as)

    return ProgressPillowWriter(fps=fps)


def write_gymnax(env: Env, episodes: list[Any], path: str | os.PathLike,
                 shown_as: str | os.PathLike | None = None) -> int:
    """Animate ``episodes`` (from :func:`record`) of a gymnax env with
    ``gymnax.visualize.Visualizer`` into ``path`` (``.gif`` or ``.mp4``;
    phase lines name ``shown_as``, default ``path``); returns the number of
    frames (one per step)."""
    quiet_pygame()  # Gymnasium's classic-control renderer starts pygame
    import matplotlib.pyplot as plt
    from gymnax.visualize import Visualizer
    from matplotlib import animation

    shown_as = path if shown_as is None else shown_as
    states, returns = [], []
    for episode_states, episode_returns in episodes:
        states += step_states(episode_states.env_state, len(episode_returns))
        returns += [float(r) for r in episode_returns]
    visualizer = Visualizer(env.env, env.params, states, returns)
    update = drawing_progress(visualizer.update, len(states), then=f"writing {os.fspath(shown_as)}")
    # as Visualizer.animate, with a gif written frame by frame with phase lines
    ani = animation.FuncAnimation(visualizer.fig, update, frames=len(states),
                                  init_func=visualizer.init, blit=False,
                                  interval=visualizer.interval)
    try:
        if Path(path).suffix.lower() == ".gif":
            ani.save(os.fspath(path), writer=_gif_writer(1000 // visualizer.interval, shown_as))
        else:
            ani.save(os.fspath(path))
    finally:
        plt.close(visualizer.fig)
    return len(states)


def frame_phases(verb: str, total: int, seconds: float | None = None,
                 of: str = "") -> Any:
    """``report(frame)`` entering the phase ``<verb> frame i/total<of>``, with a
    line at the first and last frames and at most every ``seconds`` (default
    :data:`FRAME_LINE_SECONDS`) in between. Returns whether ``frame`` is the last."""
    every = Every(FRAME_LINE_SECONDS if seconds is None else seconds)

    def report(frame: int) -> bool:
        text = f"{verb} frame {int(frame) + 1}/{total}{of}"
        last = int(frame) + 1 == total
        ACTIVITY.enter(text, text if every.due() or last else None)
        return last

    return report


def writing_progress(images: list[Any], path: str | os.PathLike,
                     seconds: float | None = None) -> Any:
    """``images[1:]`` one by one (what ``images[0].save(..., append_images=...)``
    writes frame by frame), entering the phase ``writing frame i/n of <name>``
    as :func:`frame_phases` (frame 1 at once)."""
    report = frame_phases("writing", len(images), seconds, f" of {Path(path).name}")
    report(0)
    for index in range(1, len(images)):
        report(index)
        yield images[index]


def save_gif(images: list[Any], path: str | os.PathLike, duration: int,
             shown_as: str | os.PathLike | None = None) -> None:
    """Write Pillow ``images`` as a looping ``.gif`` at ``path``, a frame
    every ``duration`` ms, with ``writing frame i/n`` phases (naming ``shown_as``)."""
    images[0].save(path, format="GIF", save_all=True,
                   append_images=writing_progress(images, shown_as or path),
                   duration=duration, loop=0)


def drawing_progress(draw: Any, total: int, seconds: float | None = None,
                     then: str | None = None) -> Any:
    """``draw(frame)`` that also enters the phase ``drawing frame i/total``,
    with a line at the first and last frames and at most every ``seconds``
    (default :data:`FRAME_LINE_SECONDS`) in between; after the last frame is
    drawn, the phase ``then`` (e.g. ``writing x.gif``) with its line."""
    report = frame_phases("drawing", total, seconds)

    def update(frame: int) -> Any:
        last = report(frame)
        result = draw(frame)
        if last and then is not None:
            ACTIVITY.enter(then, f"{then} ...")
        return result

    return update


def write_brax_gif(env: Env, episodes: list[Any], path: str | os.PathLike,
                   height: int = 240, width: int = 320,
                   shown_as: str | os.PathLike | None = None) -> int:
    """Draw ``episodes`` (from :func:`record`) of a brax env frame by frame
    with MuJoCo's renderer (as ``brax.io.image``: the default free camera;
    needs an OpenGL context, EGL headless) into a ``.gif`` played at the
    environment's speed; returns the number of frames. Offline, unlike the
    ``.html`` viewer."""
    from PIL import Image

    shown_as = path if shown_as is None else shown_as
    images = [Image.fromarray(frame) for frame in brax_frames(
        env, episodes, height, width, lambda draw, n: drawing_progress(
            draw, n, then=f"writing {os.fspath(shown_as)}"))]
    milliseconds = max(int(round(1000 * float(getattr(env.env, "dt", 0.05)))), 20)
    save_gif(images, path, milliseconds, shown_as)
    return len(images)


def write_brax(env: Env, episodes: list[Any], path: str | os.PathLike) -> int:
    """Write ``episodes`` (from :func:`record`) of a brax env as brax's HTML
    viewer (``brax.io.html.render``: the system and every step's pipeline
    state as JSON); returns the number of frames. The page loads its scripts
    from public CDNs, so it is blank offline (:data:`BRAX_HTML_NOTE`;
    :func:`write_brax_gif` draws offline)."""
    html = import_optional("brax.io.html", "brax", "a brax video")

    states = brax_states(env, episodes)
    ACTIVITY.enter("writing brax's HTML viewer", f"writing brax's HTML viewer ({len(states)} frames) ...")
    Path(path).write_text(html.render(env.env.sys, states))
    return len(states)


def write_video(env: Env, policy_fn: Any, params: Any, key: jax.Array,
                path: str | os.PathLike, num_episodes: int = 1,
                initial_carry: Any = None) -> int:
    """Render ``num_episodes`` fresh episodes of a policy into ``path`` with
    the simulator's own viewer (see the module docstring); returns the number
    of frames written.

    Args:
      env: a gymnax or brax :class:`~jaxtrainer.envs.Env`.
      policy_fn: ``policy(params, obs[n, ...], key) -> actions[n, ...]``.
      params: its parameters.
      key: typed PRNG key of the episodes.
      path: ``.gif``/``.mp4`` (gymnax) or ``.html``/``.gif`` (brax).
      num_episodes: episodes, one after the other.
      initial_carry: for a policy with memory (:func:`record`).

    The video is written to :func:`temporary_path` and replaces ``path``
    when complete; on an error or a signal only that file is removed.

    Raises:
      ValueError: as :func:`check_video_path`.
      StorageError: ``path`` cannot be written (:func:`~jaxtrainer.rundir.storage.check_writable`,
        an OS error while writing: one line naming the path).
    """
    drawn = getattr(env, "unwrapped", env)  # a masked env's states are its base env's
    check_video_path(drawn.name, path)
    check_writable(path, "the video")
    return write_episodes(env, record(env, policy_fn, params, key, num_episodes, initial_carry),
                          path)


def write_episodes(env: Env, episodes: list[Any], path: str | os.PathLike) -> int:
    """Write episodes :func:`record` returned into ``path`` (as :func:`write_video`,
    whose paths it takes checked); returns the number of frames written."""
    drawn = getattr(env, "unwrapped", env)
    temporary = temporary_path(path)
    try:
        with writing("the video", path):
            frames = _write(drawn, episodes, temporary, path)
            os.replace(temporary, path)
    except BaseException:  # an error or a signal: the previous file stays as it was
        remove_temporary(path)
        raise
    return frames


def _write(env: Env, episodes: list[Any], temporary: Path, path: str | os.PathLike) -> int:
    if simulator(env.name) == "brax":
        if temporary.suffix.lower() == ".gif":
            return write_brax_gif(env, episodes, temporary, shown_as=path)
        return write_brax(env, episodes, temporary)
    return write_gymnax(env, episodes, temporary, shown_as=path)


def remove_temporary(path: str | os.PathLike) -> None:
    """Remove the file this process was writing for ``path`` (:func:`temporary_path`), if any."""
    try:
        temporary_path(path).unlink()
    except OSError:
        pass
