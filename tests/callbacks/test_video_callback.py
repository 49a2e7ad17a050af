"""VideoCallback: the greedy policy's episodes as videos in TensorBoard, wandb
and the run directory, rendered off the training loop (issue 50, must-shows 1-2)."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

import jaxtrainer as jt
from jaxtrainer.callbacks.video import TAG
from jaxtrainer.commands import fit
from jaxtrainer.envs import make
from tests._support import toys
from tests._support.commands import TINY_PPO


def tensorboard_videos(run) -> list:
    """The video events of a run's TensorBoard files, read by TensorBoard's own reader."""
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={IMAGES: 0})
    events.Reload()
    return events.Images(TAG) if TAG in events.Tags()[IMAGES] else []


def gif_frames(data: bytes) -> int:
    return Image.open(io.BytesIO(data)).n_frames


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_fit_ppo_with_video_every_200_steps_logs_4_videos_at_those_steps(tmp_path):
    fit.run([f"trainer.default_root_dir={tmp_path}", *TINY_PPO, "trainer.max_steps=800",
             "trainer.log_every_n_steps=50", "callbacks.video.every_n_steps=200",
             "callbacks.checkpoint=false"], "ppo")
    run = tmp_path / "version_0"
    videos = tensorboard_videos(run)
    assert [v.step for v in videos] == [200, 400, 600, 800]
    for video in videos:
        data = video.encoded_image_string
        assert data.startswith(b"GIF89a") and (video.width, video.height) == (600, 400)
        on_disk = (run / "videos" / f"step_{video.step}.gif").read_bytes()
        assert on_disk == data  # the file under the run directory is the logged video
        assert 8 <= gif_frames(data) <= 100  # a CartPole episode lasts >= 8 steps; max_frames


class Still(jt.Module):
    """No learning: a policy that always takes the first action (zeros for a
    continuous env), enough to watch an env's renderer at a tiny cost."""

    def __init__(self, env_name: str, **env_kwargs) -> None:
        self.env = make(env_name, **env_kwargs)

    def init_state(self, key):
        return {"step": jnp.zeros((), jnp.int32)}

    def training_step(self, state, key):
        return {"step": state["step"] + 1}, {"step_count": state["step"].astype(jnp.float32)}

    def policy(self, state):
        env = self.env
        shape = () if env.discrete else (env.action_size,)
        dtype = jnp.int32 if env.discrete else jnp.float32
        return jax.tree_util.Partial(lambda obs: jnp.zeros(obs.shape[:1] + shape, dtype))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_brax_and_navix_runs_log_videos_drawn_by_their_renderers(tmp_path):
    """In a fresh interpreter, as a user's run: MuJoCo takes its OpenGL backend when first
    imported, and this test process's other tests import it (through brax) first. One
    interpreter runs both (navix draws without MuJoCo), each into its own run directory.
    The pendulum, not pushed, falls in about 22 steps: with a 30-step limit the episode
    program scans 30 steps instead of brax's default 1000 (videos keep at most 20 frames)."""
    runs = {
        "brax/inverted_pendulum": ((320, 240), {"episode_length": 30}),
        "navix/Navix-Empty-5x5-v0": ((160, 160), {}),
    }
    toys.run_python(
        "from pathlib import Path\n"
        "from tests.callbacks.test_video_callback import videos_drawn\n"
        + "".join(
            f"videos_drawn(Path({str(tmp_path / f'runs{i}')!r}), {env_name!r}, "
            f"{size!r}, **{kwargs!r})\n"
            for i, (env_name, (size, kwargs)) in enumerate(runs.items())
        ),
        devices=1,
        timeout=280,
    )


def videos_drawn(run_dir, env_name: str, size: tuple[int, int], **env_kwargs) -> None:
    """Two videos of ``env_name`` (made with ``env_kwargs``; steps 2 and 4) of ``size``,
    drawn scenes."""
    video = jt.VideoCallback(every_n_steps=2, max_frames=20)
    trainer = toys.trainer(run_dir, max_steps=4, log_every_n_steps=1, strategy="single",
                           callbacks=[jt.TensorBoardLogger(), video])
    trainer.fit(Still(env_name, **env_kwargs))
    videos = tensorboard_videos(run_dir / "version_0")
    assert [v.step for v in videos] == [2, 4] == [step for step, _ in video.videos]
    for event in videos:
        assert (event.width, event.height) == size
        image = Image.open(io.BytesIO(event.encoded_image_string))
        assert 1 <= image.n_frames <= 20
        assert len(np.unique(np.asarray(image.convert("RGB")))) > 2  # a drawn scene, not blank


def test_an_env_that_cannot_render_is_skipped_with_one_line(run_dir, capsys):
    video = jt.VideoCallback(every_n_steps=1)
    trainer = toys.trainer(run_dir, max_steps=2, strategy="single", callbacks=[video])
    trainer.fit(Still("DeepSea-bsuite"))
    lines = [line for line in capsys.readouterr().out.splitlines() if "VideoCallback" in line]
    assert lines == ["jaxtrainer: VideoCallback: no videos: DeepSea-bsuite: no renderer draws it "
                     "here (gymnax's visualiser draws Acrobot-v1, CartPole-v1, Pendulum-v1, "
                     "MountainCar-v0, MountainCarContinuous-v0, Catch-bsuite, Asterix-MinAtar, "
                     "Breakout-MinAtar, Freeway-MinAtar, Seaquest-MinAtar, SpaceInvaders-MinAtar, "
                     "Pong-misc, PointRobot-misc, MetaMaze-misc, FourRooms-misc; brax/<env> and "
                     "navix/<env> render too)"]
    assert video.videos == [] and not (run_dir / "version_0" / "videos").exists()


def test_without_pygame_a_classic_control_run_says_so_before_training(run_dir, capsys,
                                                                      monkeypatch):
    """Without the ``[render]`` extra, CartPole cannot be drawn: said once when training
    starts (not when the first video is due, after the steps it waited for), with what
    to install, and ``jaxtrainer eval --video`` says the same."""
    import importlib.util

    from jaxtrainer.commands import _render as render

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pygame" else real(name, *a))
    said = []

    class FirstStep(jt.Callback):
        def on_train_steps_end(self, trainer, module, metrics):
            said.append(capsys.readouterr().out)

    video = jt.VideoCallback(every_n_steps=2)
    trainer = toys.trainer(run_dir, max_steps=2, log_every_n_steps=1, strategy="single",
                           callbacks=[video, FirstStep()])
    trainer.fit(Still("CartPole-v1"))
    why = ('drawing CartPole-v1 needs pygame (Gymnasium\'s classic-control renderer): '
           'pip install "jaxtrainer[render]"')
    assert f"jaxtrainer: VideoCallback: no videos: {why}" in said[0]  # before the first step ended
    assert video.videos == [] and not (run_dir / "version_0" / "videos").exists()
    with pytest.raises(ValueError, match=f"^--video: {re.escape(why)}$"):
        render.check_video_path("CartPole-v1", run_dir / "cartpole.gif")


def test_wandb_gets_a_wandb_video_with_its_step_as_x_axis(tmp_path):
    import wandb

    logged, defined = [], []
    logger = jt.WandbLogger(mode="disabled")
    logger.run = SimpleNamespace(log=lambda values: logged.append(values),
                                 define_metric=lambda *a, **k: defined.append((a, k)))
    gif = tmp_path / "step_200.gif"
    gif.write_bytes(b"GIF89a")
    logger.log_video(TAG, str(gif), 200)
    assert defined == [((TAG,), {"step_metric": "video/step"})]
    (values,) = logged
    assert values["video/step"] == 200 and isinstance(values[TAG], wandb.Video)


@pytest.mark.parametrize("kwargs,message", [
    ({"every_n_steps": 0}, "every_n_steps=0: expected a positive int"),
    ({"every_n_steps": 10, "max_frames": -1}, "max_frames=-1: expected a positive int"),
    ({"every_n_steps": 10, "num_episodes": 1.5}, "num_episodes=1.5: expected a positive int"),
    ({"every_n_steps": 10, "member": -1}, "member=-1: expected None or an int >= 0"),
])
def test_bad_arguments_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        jt.VideoCallback(**kwargs)
