"""Torsos: what turns an observation into features before an algorithm's hidden layers.

A network of a shipped algorithm is ``torso -> MLP(hidden_sizes) -> heads``; the
``network`` field of its config (:class:`NetworkConfig`, a recipe's ``network:``
section) chooses the torso:

* ``mlp`` (default): no torso; the observation is flattened into the hidden
  layers, the layout (and parameter tree) of the algorithms before torsos could
  be chosen.
* ``minatar_cnn``: :class:`MinAtarCNN`, sized for MinAtar's ``10x10xC`` grids.
* ``nature_cnn``: :class:`NatureCNN`, for ``84x84`` Atari-style frames.
* ``cnn``: ``minatar_cnn`` for frames under :data:`_NATURE_MIN_SIZE` pixels a
  side, ``nature_cnn`` from there.

The CNNs take channels-last (``[H, W, C]``) or channels-first (``[C, H, W]``)
frames (:data:`LAYOUTS`): ``network.layout``, or the env's ``observation_layout``.
* a user's flax module in LightningCLI's form, ``{"class_path":
  "my_pkg.MyTorso", "init_args": {"features": 64}}``.

A torso is a ``flax.linen.Module`` called on ``float32[batch, *observation_shape]``
(observations keep their shape up to it) that returns ``float32[batch, ...]``;
its output is flattened per example into the hidden layers. An actor and a
critic each own a torso (parameters ``actor_torso``, ``critic_torso``,
``torso``, ``q1_torso``, ...).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.initializers import constant, orthogonal

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms.cores import CORES

TORSOS = ("mlp", "cnn", "minatar_cnn", "nature_cnn")
"""The torsos by name; ``network.torso`` may also be a ``class_path`` mapping."""

LAYOUTS = ("channels_last", "channels_first")
"""How an image observation is laid out: ``[height, width, channels]`` (gymnax,
MinAtar, Craftax's pixels) or ``[channels, height, width]`` (EnvPool's Atari frame
stacks, ``[4, 84, 84]``); the CNN torsos take either."""

_NATURE_MIN_SIZE = 36
"""The smallest frame side :class:`NatureCNN`'s valid convolutions accept (8/4, 4/2, 3/1)."""

TorsoFactory = Callable[..., nn.Module]
"""``factory(name=...) -> flax module``: a torso with its arguments bound."""


class PatchConv(nn.Module):
    """A valid 2-D convolution, ``float32[batch, H, W, C] -> float32[batch, H',
    W', features]``, computed as one matrix product over the image's patches
    (``kernel_size[0] * kernel_size[1]`` strided slices concatenated).

    Same parameters as ``flax.linen.Conv`` (``kernel: float32[kh, kw, C,
    features]``, ``bias: float32[features]``, the same default initialisers) and
    the same outputs as ``nn.Conv(..., padding="VALID")``. Why not ``nn.Conv``
    itself: XLA's CPU backend runs a convolution's gradient inside a loop
    (``lax.scan`` over minibatches) about 25x slower than this product (measured:
    8 gradient steps of a 3x3 convolution on ``float32[1024, 10, 10, 4]``, 2.99 s
    against 0.12 s, JAX 0.10 on 2 CPU cores).

    Attributes:
      features: output channels. kernel_size: ``(kh, kw)`` pixels. strides:
      ``(sh, sw)`` pixels. kernel_init, bias_init: flax initialisers.
    """

    features: int
    kernel_size: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        (kh, kw), (sh, sw) = self.kernel_size, self.strides
        channels = x.shape[-1]
        kernel = self.param("kernel", self.kernel_init, (kh, kw, channels, self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        oh, ow = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
        patches = jnp.concatenate(
            [x[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
             for i in range(kh) for j in range(kw)], axis=-1)
        return patches @ kernel.reshape(kh * kw * channels, self.features) + bias


def _conv(features: int, kernel: int, stride: int, orthogonal_scale: float | None,
          name: str) -> PatchConv:
    init = {} if orthogonal_scale is None else {
        "kernel_init": orthogonal(orthogonal_scale), "bias_init": constant(0.0)}
    return PatchConv(features, (kernel, kernel), (stride, stride), name=name, **init)


class MinAtarCNN(nn.Module):
    """One valid 3x3 convolution of ``features`` filters, stride 1, and a ReLU:
    ``float32[batch, 10, 10, C] -> float32[batch, 8 * 8 * features]``, the
    convolution of Young & Tian 2019 (MinAtar, arXiv:1903.03176); their fully
    connected layer of 128 units is the algorithm's ``hidden_sizes: [128]``.

    Attributes:
      features: filters of the convolution (16 in the paper).
      orthogonal_scale: ``orthogonal(scale)`` kernels with zero bias (the
        on-policy algorithms pass ``sqrt(2)``, as their hidden layers);
        ``None``: flax's default.
      channels_first: the input is ``float32[batch, C, 10, 10]`` (moved to
        channels-last first; same parameters).
    """

    features: int = 16
    orthogonal_scale: float | None = None
    channels_first: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _to_channels_last(x, self.channels_first)
        x = nn.relu(_conv(self.features, 3, 1, self.orthogonal_scale, "Conv_0")(x))
        return x.reshape((x.shape[0], -1))


class NatureCNN(nn.Module):
    """Mnih et al. 2015 (Nature 518, "Human-level control through deep
    reinforcement learning"): valid convolutions 32 8x8 stride 4, 64 4x4 stride
    2, 64 3x3 stride 1, each with a ReLU: ``float32[batch, 84, 84, C] ->
    float32[batch, 3136]``; their 512-unit layer is ``hidden_sizes: [512]``.
    Frames must be at least :data:`_NATURE_MIN_SIZE` pixels a side.

    Attributes:
      orthogonal_scale: as :class:`MinAtarCNN`'s.
      channels_first: the input is ``float32[batch, C, 84, 84]`` (an EnvPool
        Atari frame stack, ``C = 4``; moved to channels-last first, same parameters).
    """

    orthogonal_scale: float | None = None
    channels_first: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _to_channels_last(x, self.channels_first)
        for i, (features, kernel, stride) in enumerate(((32, 8, 4), (64, 4, 2), (64, 3, 1))):
            x = nn.relu(_conv(features, kernel, stride, self.orthogonal_scale, f"Conv_{i}")(x))
        return x.reshape((x.shape[0], -1))


def _to_channels_last(x: jax.Array, channels_first: bool) -> jax.Array:
    """``x: [batch, C, H, W]`` as ``[batch, H, W, C]`` where ``channels_first``; else ``x``."""
    return jnp.moveaxis(x, 1, -1) if channels_first else x


def _import_class(path: Any, name: str = "network.torso.class_path") -> type[nn.Module]:
    """The ``flax.linen.Module`` subclass ``path`` (``"package.module.Class"``) names.

    Raises:
      ValueError: ``path`` is not a dotted string, does not import, or is not a
        ``flax.linen.Module`` subclass; the message names it.
    """
    if not isinstance(path, str) or "." not in path.strip("."):
        raise ValueError(f"{name}={path!r}: expected a dotted import path such as my_pkg.MyTorso")
    module_name, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except ImportError as e:
        raise ValueError(f"{name}={path!r} does not import: {e} (is its package installed, "
                         "or its directory on PYTHONPATH?)") from None
    except AttributeError as e:
        raise ValueError(f"{name}={path!r} does not import: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"{name}={path!r} is not a flax.linen.Module subclass (got {cls!r})")
    return cls


def _check_torso(torso: Any, name: str = "network.torso") -> str | dict[str, Any]:
    """``torso`` checked: a name in :data:`TORSOS`, or a mapping ``{class_path,
    init_args}`` whose class imports and accepts ``init_args`` (the module is
    constructed once, unbound: no parameters, nothing compiled).

    Returns:
      The name, or the mapping as a plain dict with ``init_args`` (``{}`` when absent).

    Raises:
      ValueError: an unknown name (listing the choices), a mapping with other keys
        or without ``class_path``, a class that does not import, or
        ``init_args`` the class does not take (the message names the setting).
    """
    if isinstance(torso, str):
        if torso in TORSOS:
            return torso
        raise ValueError(f"{name}={torso!r}: choose one of {', '.join(map(repr, TORSOS))}, or a "
                         f"flax module as {name}.class_path=my_pkg.MyTorso")
    if not isinstance(torso, Mapping):
        raise ValueError(f"{name}={torso!r}: expected one of {', '.join(map(repr, TORSOS))} or "
                         "{class_path: my_pkg.MyTorso, init_args: {...}}")
    extra = sorted(set(map(str, torso)) - {"class_path", "init_args"})
    if extra or "class_path" not in torso:
        raise ValueError(f"{name}: expected the keys class_path and init_args, got "
                         f"{', '.join(map(str, torso)) or 'none'} (e.g. {name}.class_path=my_pkg.MyTorso)")
    init_args = dict(torso.get("init_args") or {})
    cls = _import_class(torso["class_path"], f"{name}.class_path")
    try:
        cls(**init_args)
    except TypeError as e:
        raise ValueError(f"{name}.init_args={init_args!r}: {torso['class_path']} rejects them ({e})") from None
    return {"class_path": torso["class_path"], "init_args": init_args}


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The ``network`` field of every shipped RL algorithm's config (a recipe's
    ``network:`` section); the hidden layers stay the algorithm's
    ``hidden_sizes`` and ``activation``.

    A network is ``torso -> core -> hidden layers -> heads``; every part
    beyond the torso is ``None`` by default, so configs written before it keep
    their meaning (and their checkpoints their layout).

    Attributes:
      torso: ``mlp`` (default; the observation flattened into the hidden
        layers), ``cnn`` (``minatar_cnn`` under 36 pixels a side, else
        ``nature_cnn``), ``minatar_cnn`` (Young & Tian 2019), ``nature_cnn``
        (Mnih et al. 2015), or one's own flax module as
        ``network.torso.class_path=my_pkg.MyTorso`` with
        ``network.torso.init_args.<name>=<value>`` (its keyword arguments), in
        Python ``{"class_path": ..., "init_args": {...}}``; it is called on
        ``float32[batch, *observation_shape]``.
      core: a recurrent core after the torso, for the on-policy algorithms
        (PPO, A2C, IMPALA): ``gru`` or ``lstm`` (:mod:`jaxtrainer.algorithms.cores`);
        ``None`` (default): none, a feedforward network. With a core the
        actor and the critic share the torso and the core, and the policy
        carries a state from step to step (``act(obs, carry) -> (action,
        carry)``).
      core_size: units of the core (and width of its carry), 128 by default
        (PureJaxRL's ``ppo_rnn.py``).
      layout: how image observations are laid out for the CNN torsos,
        ``channels_last`` (``[height, width, channels]``) or ``channels_first``
        (``[channels, height, width]``); ``None`` (default): the env's
        ``observation_layout`` (EnvPool and Gymnasium image spaces infer it,
        every other env is ``channels_last``).
    """

    torso: str | dict[str, Any] = "mlp"
    core: str | None = None
    core_size: int = 128
    layout: str | None = None

    def __post_init__(self) -> None:
        """Raises: ValueError: what :func:`_check_torso` raises; a ``core`` not in
        :data:`~jaxtrainer.algorithms.cores.CORES` (listing them) or a
        ``core_size`` that is not a positive int."""
        object.__setattr__(self, "torso", _check_torso(self.torso))
        if self.core is not None and self.core not in CORES:
            raise ValueError(f"network.core={self.core!r}: choose one of "
                             f"{', '.join(map(repr, CORES))}, or null for none")
        size = self.core_size
        if isinstance(size, float) and size.is_integer():
            size = int(size)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"network.core_size={self.core_size!r}: expected a positive int")
        object.__setattr__(self, "core_size", size)
        if self.layout is not None and self.layout not in LAYOUTS:
            raise ValueError(f"network.layout={self.layout!r}: choose one of "
                             f"{', '.join(map(repr, LAYOUTS))}, or null for the env's")

    def __hash__(self) -> int:
        return hash((repr(self.torso), self.core, self.core_size, self.layout))


def network_config(value: Any, owner: str) -> NetworkConfig:
    """``value`` (a :class:`NetworkConfig`, a mapping of its fields, or ``None``
    for the default) as a :class:`NetworkConfig`.

    Raises:
      ValueError: a key that is not a field (naming ``owner``'s field and the
        keys), or what :class:`NetworkConfig` raises.
    """
    if value is None:
        return NetworkConfig()
    if isinstance(value, NetworkConfig):
        return value
    if not isinstance(value, Mapping):
        raise arguments.ArgumentError("network", value, ": expected a mapping such as {torso: cnn}",
                                      owner)
    fields = [f.name for f in dataclasses.fields(NetworkConfig)]
    unknown = [str(k) for k in value if k not in fields]
    if unknown:
        raise ValueError(f"unknown network key {unknown[0]!r}: network has keys: {', '.join(fields)}")
    return NetworkConfig(**value)


def torso_factory(network: NetworkConfig, observation_shape: Sequence[int],
                  orthogonal_scale: float | None = None, *,
                  owner: str | None = None,
                  observation_layout: str = "channels_last") -> TorsoFactory | None:
    """The torso of ``network`` for observations of ``observation_shape``:
    ``None`` for ``mlp`` (flattened observations, no parameters), else a
    factory ``(name=...) -> module`` (built-in CNNs get ``orthogonal_scale``
    and the layout).

    Args:
      owner: the algorithm's name when it takes no recurrent core (the
        off-policy ones): a ``network.core`` is then an error naming it.
      observation_layout: the env's layout of image observations (one of
        :data:`LAYOUTS`), used unless ``network.layout`` sets one.

    Raises:
      ValueError: a CNN on observations that are not 3-d images or are too
        small for it (the message gives the shape and the layout); a
        ``network.core`` for ``owner``.
    """
    if owner is not None and network.core is not None:
        raise ValueError(f"network.core={network.core!r}: {owner} takes no recurrent core (PPO, "
                         "A2C and IMPALA do); use network.core=null")
    torso = network.torso
    if isinstance(torso, dict):
        return partial(_import_class(torso["class_path"]), **torso["init_args"])
    if torso == "mlp":
        return None
    shape = tuple(observation_shape)
    if len(shape) != 3:
        raise ValueError(f"network.torso={torso!r} needs image observations [height, width, "
                         f"channels]; this environment's observations have shape {shape}: use "
                         "network.torso=mlp")
    layout = network.layout or observation_layout
    first = layout == "channels_first"
    side = min(shape[1:] if first else shape[:2])
    laid = f"shape {shape} ({layout})"
    if torso == "cnn":
        torso = "nature_cnn" if side >= _NATURE_MIN_SIZE else "minatar_cnn"
    if torso == "nature_cnn" and side < _NATURE_MIN_SIZE:
        raise ValueError(f"network.torso='nature_cnn' needs frames of at least {_NATURE_MIN_SIZE}x"
                         f"{_NATURE_MIN_SIZE}; observations have {laid}: use minatar_cnn"
                         + ("" if first else ", or network.layout=channels_first for "
                            "[channels, height, width] frames"))
    if torso == "minatar_cnn" and side < 3:
        raise ValueError(f"network.torso='minatar_cnn' needs frames of at least 3x3; "
                         f"observations have {laid}")
    cls = NatureCNN if torso == "nature_cnn" else MinAtarCNN
    return partial(cls, orthogonal_scale=orthogonal_scale, channels_first=first)


def features(torso: nn.Module | None, obs: jax.Array, obs_ndim: int) -> jax.Array:
    """``obs: [..., *observation_shape]`` (``obs_ndim`` trailing axes) through
    ``torso`` as ``float32[..., features]``: the leading axes become one batch axis
    for the torso and come back after it; ``None``: the observation flattened."""
    batch = obs.shape[:obs.ndim - obs_ndim]
    if torso is None:
        return obs.reshape(batch + (-1,)).astype(jnp.float32)
    x = obs.reshape((-1,) + obs.shape[obs.ndim - obs_ndim:]).astype(jnp.float32)
    return torso(x).reshape(batch + (-1,))
