"""Episodes of a policy as RGB frames, drawn headless on CPU by each simulator's
own renderer: what ``jaxtrainer eval --video`` (:mod:`jaxtrainer.commands._render`)
and :class:`~jaxtrainer.callbacks.VideoCallback` share.

* gymnax classic control (``CartPole-v1``, ``Acrobot-v1``, ``Pendulum-v1``,
  ``MountainCar-v0``, ``MountainCarContinuous-v0``): Gymnasium's ``rgb_array``
  renderer (pygame), fed each state through gymnax's own adapters
  (``gymnax.visualize.vis_gym``); ``uint8[400, 600, 3]`` frames.
* other environments gymnax's visualiser draws (``Catch-bsuite``, MinAtar, ...):
  ``gymnax.visualize.Visualizer`` (matplotlib) drawn to an array.
* brax (``brax/<env>``): MuJoCo's renderer (as ``brax.io.image``; needs an
  OpenGL context: EGL headless, :func:`headless_gl`); ``uint8[240, 320, 3]``.
* navix (``navix/<env>``): navix's own ``navix.observations.rgb`` of the whole grid,
  scaled up to at least :data:`_NAVIX_MIN_SIZE` pixels a side.

Anything else raises :class:`NotRenderable` (:func:`renderable` says why first).
"""

from __future__ import annotations

import importlib.util
import io
import os
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer.envs.base import Env
from jaxtrainer.envs.evaluation import with_memory

GYMNAX_VISUALIZED = (
    "Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0",
    "Catch-bsuite", "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar",
    "Seaquest-MinAtar", "SpaceInvaders-MinAtar", "Pong-misc", "PointRobot-misc",
    "MetaMaze-misc", "FourRooms-misc",
)
"""Environments ``gymnax.visualize.Visualizer`` (gymnax 1.0) draws; the first
five through Gymnasium's classic-control renderer."""

_NAVIX_MIN_SIZE = 160
"""navix frames are scaled up (whole pixels) to at least this many pixels a side."""

Episode = tuple[Any, np.ndarray]
"""One recorded episode: the :class:`~jaxtrainer.envs.EnvState` before each step
(leaves with a leading ``[length]`` axis, on the host) and ``float32[length]``,
the return after each step."""


class NotRenderable(ValueError):
    """An environment no renderer here draws (the message says which do)."""


def simulator(env_name: str) -> str:
    """``"brax"``, ``"playground"``, ``"navix"`` or ``"gymnax"`` from an environment name."""
    for prefix in ("brax", "playground", "navix"):
        if env_name.startswith(prefix + "/"):
            return prefix
    return "gymnax"


def headless_gl() -> None:
    """Without a display (no ``DISPLAY``/``WAYLAND_DISPLAY``), have MuJoCo's
    renderer use EGL (``MUJOCO_GL=egl``, unless ``MUJOCO_GL`` is set). MuJoCo
    reads it when first imported: call it before anything imports brax."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("MUJOCO_GL", "egl")


def quiet_pygame() -> None:
    """Gymnasium's classic-control renderer starts pygame: headless, silent, no
    banner, and leaving SIGINT/SIGTERM to Python (SDL would take them)."""
    for name, value in (("SDL_VIDEODRIVER", "dummy"), ("SDL_AUDIODRIVER", "dummy"),
                        ("PYGAME_HIDE_SUPPORT_PROMPT", "1"), ("SDL_NO_SIGNAL_HANDLERS", "1")):
        os.environ.setdefault(name, value)


def missing_pygame(env_name: str) -> str | None:
    """Why ``env_name`` cannot be drawn for want of pygame (one line naming what to
    install), or ``None``: the classic-control five (:data:`GYMNAX_VISUALIZED`) draw
    through Gymnasium's renderer, which needs pygame."""
    if env_name in GYMNAX_VISUALIZED[:5] and importlib.util.find_spec("pygame") is None:
        return (f"drawing {env_name} needs pygame (Gymnasium's classic-control renderer): "
                'pip install "jaxtrainer[render]"')
    return None


def renderable(env: Env) -> str | None:
    """Why :func:`frames` cannot draw ``env`` here (one line), or ``None`` when it can
    (a missing renderer included: :func:`missing_pygame`)."""
    name = getattr(env, "unwrapped", env).name
    kind = simulator(name)
    if kind == "playground":
        return (f"{name}: MuJoCo Playground renders with MuJoCo's OpenGL renderer through its own "
                "scenes, not supported here")
    if kind == "gymnax" and name not in GYMNAX_VISUALIZED:
        return (f"{name}: no renderer draws it here (gymnax's visualiser draws "
                f"{', '.join(GYMNAX_VISUALIZED)}; brax/<env> and navix/<env> render too)")
    return missing_pygame(name)


def episode_program(env: Env, policy_fn: Any, num_episodes: int,
                    initial_carry: Any = None) -> Callable[[Any, jax.Array], list[Episode]]:
    """``run(params, key) -> episodes``: ``num_episodes`` fresh episodes of
    ``policy_fn`` (batched, as :func:`jaxtrainer.envs.evaluate_policy` takes
    it; ``initial_carry`` for a policy with memory), each until it ends (at
    most ``env.max_episode_steps``), as a list of :data:`Episode`.

    One jitted program, compiled at the first call: later calls with params of
    the same shapes run without compiling.
    """
    steps = env.max_episode_steps
    start, act = with_memory(policy_fn, initial_carry)

    @jax.jit
    def trajectory(params, key):
        reset_key, run_key = jax.random.split(key)
        obs, state = env.reset_batch(reset_key, num_episodes)

        def one_step(loop, step_key):
            obs, state, memory = loop
            act_key, env_key = jax.random.split(step_key)
            action, memory = act(params, obs, act_key, memory)
            next_obs, next_state, info = env.step_batch(env_key, state, action)
            return (next_obs, next_state, memory), (state, info.episode_return, info.done)

        _, out = jax.lax.scan(one_step, (obs, state, start(num_episodes)),
                              jax.random.split(run_key, steps))
        return out

    def run(params: Any, key: jax.Array) -> list[Episode]:
        states, returns, done = jax.device_get(trajectory(params, key))
        episodes = []
        for k in range(num_episodes):
            ended = np.flatnonzero(done[:, k])
            length = int(ended[0]) + 1 if ended.size else steps
            episodes.append((jax.tree.map(lambda x, k=k, n=length: x[:n, k], states),
                             np.asarray(returns[:length, k], np.float32)))
        return episodes

    return run


def step_states(tree: Any, length: int) -> list[Any]:
    """The ``length`` per-step pytrees of a pytree with a leading ``[length]`` axis."""
    return [jax.tree.map(lambda x, t=t: x[t], tree) for t in range(length)]


def brax_states(env: Env, episodes: list[Episode]) -> list[Any]:
    """The pipeline state of every step of ``episodes``."""
    states = []
    for episode_states, episode_returns in episodes:
        pipeline = env.pipeline_state(episode_states.env_state.state)
        states += step_states(jax.tree.map(jnp.asarray, pipeline), len(episode_returns))
    return states


def brax_frames(env: Env, episodes: list[Episode], height: int = 240, width: int = 320,
                draw_hook: Callable[[Callable[[int], Any], int], Callable[[int], Any]] | None = None,
                ) -> list[np.ndarray]:
    """``uint8[height, width, 3]`` per step of a brax env's ``episodes``, drawn by
    MuJoCo's renderer (as ``brax.io.image``: the default free camera; needs an
    OpenGL context, EGL headless). ``draw_hook(draw, n)`` may wrap the per-frame
    draw (progress lines)."""
    import mujoco

    states, model = brax_states(env, episodes), env.env.sys.mj_model
    renderer, data = mujoco.Renderer(model, height=height, width=width), mujoco.MjData(model)

    def draw(t: int) -> np.ndarray:
        data.qpos, data.qvel = np.asarray(states[t].q), np.asarray(states[t].qd)
        mujoco.mj_forward(model, data)
        renderer.update_scene(data, camera=-1)
        return renderer.render().copy()

    if draw_hook is not None:
        draw = draw_hook(draw, len(states))
    try:
        return [draw(t) for t in range(len(states))]
    finally:
        renderer.close()


def seconds_per_step(env: Env) -> float:
    """Simulated seconds per env step, for playing frames at the env's speed
    (gymnax classic control 0.02-0.05, brax its ``dt``; 0.1 elsewhere)."""
    base = getattr(env, "unwrapped", env)
    name = base.name
    if simulator(name) == "brax":
        return float(getattr(base.env, "dt", 0.05))
    return 0.05 if name in GYMNAX_VISUALIZED[:5] else 0.1


def _classic_control(env: Env, states: list[Any]) -> list[np.ndarray]:
    quiet_pygame()
    import gymnasium
    from gymnax.visualize import vis_gym

    name = env.name
    gym_env = gymnasium.make(name, render_mode="rgb_array")
    try:
        gym_env.reset(seed=0)
        unwrapped = gym_env.unwrapped
        vis_gym.set_gym_params(unwrapped, name, env.params)
        out = []
        for state in states:
            unwrapped.state = vis_gym.get_gym_state(state, name)
            if name == "Pendulum-v1":
                unwrapped.last_u = np.asarray(state.last_u, dtype=np.float64)
            out.append(np.asarray(gym_env.render(), np.uint8))
        return out
    finally:
        gym_env.close()


def _visualizer(env: Env, states: list[Any], returns: list[float]) -> list[np.ndarray]:
    import matplotlib.pyplot as plt
    from gymnax.visualize import Visualizer

    visualizer = Visualizer(env.env, env.params, states, returns)
    try:
        visualizer.init()
        out = []
        for t in range(len(states)):
            visualizer.update(t)
            visualizer.fig.canvas.draw()
            out.append(np.asarray(visualizer.fig.canvas.buffer_rgba())[..., :3].copy())
        return out
    finally:
        plt.close(visualizer.fig)


def _navix(env: Env, episodes: list[Episode]) -> list[np.ndarray]:
    from navix.observations import rgb

    out = []
    for episode_states, returns in episodes:
        grids = np.asarray(jax.jit(jax.vmap(rgb))(env.timestep_of(episode_states.env_state).state),
                           np.uint8)[:len(returns)]
        scale = max(1, _NAVIX_MIN_SIZE // max(grids.shape[1:3]))  # navix draws 8 px per tile
        out += list(grids.repeat(scale, axis=1).repeat(scale, axis=2))
    return out


def frames(env: Env, episodes: list[Episode], stride: int = 1) -> np.ndarray:
    """Every ``stride``-th step of ``episodes`` (one after the other) drawn by
    the simulator's renderer (module docstring).

    Returns:
      ``uint8[T, H, W, 3]``, ``T = ceil(total steps / stride)``.

    Raises:
      NotRenderable: ``env`` has no renderer here (:func:`renderable`).
    """
    base = getattr(env, "unwrapped", env)  # a masked env's states are its base env's
    reason = renderable(base)
    if reason is not None:
        raise NotRenderable(reason)
    kind = simulator(base.name)
    if kind == "brax":
        kept = [(jax.tree.map(lambda x: x[::stride], s), r[::stride]) for s, r in episodes]
        drawn = brax_frames(base, kept)
    elif kind == "navix":
        kept = [(jax.tree.map(lambda x: x[::stride], s), r[::stride]) for s, r in episodes]
        drawn = _navix(base, kept)
    else:
        states, returns = [], []
        for episode_states, episode_returns in episodes:
            states += step_states(episode_states.env_state, len(episode_returns))[::stride]
            returns += [float(r) for r in episode_returns[::stride]]
        drawn = (_classic_control(base, states) if base.name in GYMNAX_VISUALIZED[:5]
                 else _visualizer(base, states, returns))
    return np.stack(drawn).astype(np.uint8)


def gif_bytes(video: np.ndarray, fps: float) -> bytes:
    """``uint8[T, H, W, 3]`` as a looping GIF (Pillow; one palette of at most
    256 colours from the first frame, no dithering: fast, and exact for the
    flat colours simulators draw), ``fps`` frames per second."""
    from PIL import Image

    if video.ndim != 4 or video.shape[-1] != 3 or video.dtype != np.uint8 or not len(video):
        raise ValueError(f"video of shape {video.shape} and dtype {video.dtype}: expected "
                         "uint8[T, H, W, 3] with T >= 1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        first = Image.fromarray(video[0]).quantize(256, method=Image.Quantize.FASTOCTREE)
        images = [first] + [Image.fromarray(f).quantize(palette=first, dither=Image.Dither.NONE)
                            for f in video[1:]]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:],
                   duration=max(int(round(1000 / fps)), 20), loop=0)
    return out.getvalue()
