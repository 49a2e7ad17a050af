"""VideoCallback: watch the greedy policy while it trains, as videos in
TensorBoard, wandb and the run directory."""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from jaxtrainer import _arguments as arguments
from jaxtrainer.callbacks.base import Callback
from jaxtrainer.rundir import run_layout, storage

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer

VIDEO_KEY = 0x766964
"""Folded into ``key(seed)``, then the step, for the video's episodes (their own
stream: training and evaluation keys are untouched)."""

TAG = "video/episodes"
"""The loggers' tag (TensorBoard) or key (wandb) of the videos."""

_RENDER_NICENESS = 10
"""Niceness (Linux: per thread) of the rendering thread, so that the training
loop's threads keep the CPU when both want it."""


class VideoCallback(Callback):
    """Every ``every_n_steps`` training steps, render ``num_episodes`` fresh
    episodes of the current greedy policy (the one evaluation runs) and log them
    as a looping GIF: a file ``<run_dir>/videos/step_<step>.gif``, TensorBoard's
    video (the image summary of tensorboardX's ``add_video``, Images tab) and a
    ``wandb.Video`` (x axis ``video/step``), tag :data:`TAG`.

    Rendering is off the training loop's critical path. At the log boundary of
    a due step (the first at or after each multiple of ``every_n_steps``; this
    callback asks the Trainer to end a compiled call there) the hook copies the
    policy's parameters to the host (one small transfer) and hands them to one
    background thread (``jaxtrainer-video``, niceness :data:`_RENDER_NICENESS`
    on Linux), which runs the episodes in their own jitted program (compiled
    once, at the first video: the training program is never recompiled), draws
    the frames with the simulator's renderer
    (:mod:`jaxtrainer.envs.rendering`: gymnax through Gymnasium's renderer or
    its visualiser, brax through MuJoCo's, EGL headless; navix through its own)
    and writes the GIF. The loggers receive each finished video at the next hook
    on the loop's thread; ``on_fit_end`` (after training, before the loggers
    close: ``order = -10``) waits for the videos still queued, so every due step
    gets its video.

    An environment no renderer draws (MuJoCo Playground, Craftax, jumanji,
    ...), a module without a policy, and a multi-process run are skipped with one line
    on stdout; training goes on. A video that fails to render (an OpenGL error,
    say) is said in one line, and no further video is made in that run. Only
    process 0 renders. A population (PBT, a sweep) shows member ``member``
    (default: the population's own choice, PBT's best current fitness).

    Frames: ``uint8[T, H, W, 3]`` with ``T <= max_frames``: longer episodes keep
    every ``ceil(steps / max_frames)``-th step, played at the same speed
    (``fps`` = env steps per simulated second / stride); ``H x W`` is the
    renderer's (CartPole 400 x 600, brax 240 x 320).

    Args:
      every_n_steps: training steps (updates; generations) between videos.
      num_episodes: episodes per video, one after the other.
      max_frames: frames per video at most.
      member: the member of a population shown (``None``: its default).
      dirpath: where the GIFs go; default ``<run_dir>/videos``.

    Attributes:
      videos: ``[(step, path)]`` of the videos written this run.

    Raises:
      ValueError: ``every_n_steps``, ``num_episodes`` or ``max_frames`` not a
        positive int, ``member`` not ``None`` or an int >= 0.
      jaxtrainer.rundir.storage.StorageError: at ``on_train_start``, ``dirpath`` cannot be created.
    """

    order = -10  # its on_fit_end logs the last videos before the loggers (0) close

    def __init__(self, every_n_steps: int, num_episodes: int = 1, max_frames: int = 100,
                 member: int | None = None, dirpath: str | os.PathLike | None = None) -> None:
        self.every_n_steps = arguments.positive_int("every_n_steps", every_n_steps, False)
        self.num_episodes = arguments.positive_int("num_episodes", num_episodes, False)
        self.max_frames = arguments.positive_int("max_frames", max_frames, False)
        if member is not None and (isinstance(member, bool) or not isinstance(member, int)
                                   or member < 0):
            raise ValueError(f"member={member!r}: expected None or an int >= 0")
        self.member = member
        self.dirpath = None if dirpath is None else arguments.directory("dirpath", dirpath)
        self.videos: list[tuple[int, str]] = []
        self._reset()
        from jaxtrainer.envs.rendering import headless_gl

        headless_gl()  # MuJoCo picks its OpenGL backend when first imported: EGL without a display

    def _reset(self) -> None:
        self._on = False
        self._next = self.every_n_steps
        self._pending: list[Future] = []
        self._executor: ThreadPoolExecutor | None = None
        self._program: Any = None
        self._directory = ""

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """A new run: no videos yet, nothing queued."""
        self.videos = []
        self._reset()

    # -- on the loop's thread ----------------------------------------------------
    def _skip(self, why: str) -> None:
        print(f"jaxtrainer: VideoCallback: no videos: {why}", flush=True)

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        from jaxtrainer.envs.rendering import renderable
        from jaxtrainer.policy import policy_spec

        self._next = (trainer.global_step // self.every_n_steps + 1) * self.every_n_steps
        if not trainer.is_global_zero:
            return
        if trainer.strategy.process_count > 1:
            return self._skip("a multi-process run (only single-process runs render)")
        try:
            self._spec = policy_spec(module)
        except TypeError as error:
            return self._skip(str(error))
        reason = renderable(self._spec.env)
        if reason is not None:
            return self._skip(reason)
        self._directory = os.fspath(self.dirpath or os.path.join(trainer.log_dir,
                                                                 run_layout.VIDEOS_DIR))
        with storage.writing("the video directory", self._directory):
            os.makedirs(self._directory, exist_ok=True)
        self._seed, self._on = trainer.seed, True

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return self._on and step >= self._next

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._deliver(trainer)
        step = trainer.global_step
        if not self._on or step < self._next or trainer.state_ahead:
            return
        import jax

        from jaxtrainer.policy import params_of

        self._next = (step // self.every_n_steps + 1) * self.every_n_steps
        _, params = params_of(module, trainer.peek_state(), self.member)
        params = jax.device_get(params)  # the state's buffers go to the next call
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="jaxtrainer-video")
        self._pending.append(self._executor.submit(self._render, step, params))

    def _deliver(self, trainer: Trainer, wait: bool = False) -> None:
        """Hand the finished videos (all, with ``wait``) to the loggers, in step order."""
        from jaxtrainer.loggers.base import Logger  # loggers import callbacks: not at module level

        while self._pending and (wait or self._pending[0].done()):
            future = self._pending.pop(0)
            try:
                step, path = future.result()
            except Exception as error:  # a renderer failing: say it, keep training
                self._on = False
                for rest in self._pending:
                    rest.cancel()
                self._pending = []
                print(f"jaxtrainer: VideoCallback: the video failed, no more videos this run: "
                      f"{type(error).__name__}: {' '.join(str(error).split())}",
                      file=sys.stderr, flush=True)
                return
            self.videos.append((step, path))
            for cb in trainer.callbacks:
                if isinstance(cb, Logger):
                    cb.video(TAG, path, step)

    def on_fit_end(self, trainer: Trainer, module: Module) -> None:
        """Wait for the videos still rendering and log them (before the loggers close)."""
        self._deliver(trainer, wait=True)
        self._close()

    def _close(self) -> None:
        """Cancel the videos not started and wait for the one rendering, if any: no
        rendering thread outlives the fit (two at once would share a renderer's
        OpenGL state, which MuJoCo aborts on)."""
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=True, cancel_futures=True)
        self._pending = []

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        self._close()

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._close()

    # -- on the rendering thread ---------------------------------------------------
    def _render(self, step: int, params: Any) -> tuple[int, str]:
        import jax

        from jaxtrainer.distributed.keys import root_key
        from jaxtrainer.envs import rendering

        if self._program is None:  # the first video: lower priority, compile the episodes
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _RENDER_NICENESS)
            except (AttributeError, OSError):
                pass  # not Linux: the default priority
            spec = self._spec
            self._program = rendering.episode_program(spec.env, spec.greedy, self.num_episodes,
                                                      spec.initial_carry)
        key = jax.random.fold_in(jax.random.fold_in(root_key(self._seed), VIDEO_KEY), step)
        episodes = self._program(params, key)
        stride = math.ceil(sum(len(r) for _, r in episodes) / self.max_frames)
        video = rendering.frames(self._spec.env, episodes, stride)
        fps = 1.0 / (rendering.seconds_per_step(self._spec.env) * stride)
        path = os.path.join(self._directory, f"step_{step}.gif")
        temporary = os.path.join(self._directory, f".step_{step}.gif.tmp-{os.getpid()}")
        with storage.writing("the video", path):
            with open(temporary, "wb") as f:
                f.write(rendering.gif_bytes(video, fps))
            os.replace(temporary, path)
        return step, path
