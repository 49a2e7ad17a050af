"""Every PRNG key of a run, derived in one place.

All keys descend from ``root = key(seed)`` (:func:`root_key`: the whole
integer, for seeds outside ``[0, 2**32)`` too) by ``fold_in`` only, so each is a pure
function of (seed, stream, step, device, member): a run draws the same keys
however its steps are grouped into compiled calls, after a resume, and on any
device count where the device index does not enter::

    stream_key(root, s)        = fold_in(root, s)          s: INIT, TRAIN or EVAL
    init key                   = stream_key(root, INIT)    same on every device
    step_key(train, t, d)      = fold_in(fold_in(train, t), d)
                                 (fold_in(train, t) with step_key_per_device=False)
    eval key at step t         = fold_in(stream_key(root, EVAL), t)   same on every device
    episode_key(k, e)          = fold_in(k, e)             evaluation episode e (numbered
                                                           over all devices)
    device_key(k, d)           = fold_in(k, d)
    member_key(k, i)           = fold_in(k, i)             member i of a population
    sub_key(k, j)              = fold_in(k, j)             j-th named use of one key

``train = stream_key(root, TRAIN)``; ``d`` is the device's index along the data
axes. Every device (and process) gets its own training stream, and the same
seed and device count give the same run, bit for bit. Evaluation keys leave the
device out: episode ``e`` of an evaluation draws from ``episode_key(eval key,
e)`` whichever device runs it, so an evaluation gives the same episodes on any
device count (:mod:`jaxtrainer.envs.evaluation`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed._axis import AXIS_NAME, AxisName, axis_index

INIT_STREAM, TRAIN_STREAM, EVAL_STREAM = 0, 1, 2
"""Streams derived from the root key: initialisation, training steps, evaluation."""

_WORD = 2**32


def root_key(seed: int) -> jax.Array:
    """The root key of a run with ``seed`` (any Python or numpy int).

    ``jax.random.key(seed)`` for ``0 <= seed < 2**32`` (what ``jax.random.key``
    keeps of a seed without x64). Any other seed keeps every bit: its low 32 bits
    give ``key(seed % 2**32)``, into which a header (the sign and the number of
    32-bit words of the rest) and then each word of the rest (of ``~(seed >>
    32)`` for a negative seed) are folded, so distinct ints give distinct keys
    (``2**32 + 7`` is not ``7``, ``-3`` is not ``2**32 - 3``).
    """
    seed = int(seed)
    key = jax.random.key(seed % _WORD)
    if 0 <= seed < _WORD:
        return key
    rest = seed >> 32  # floor: -1 for -3
    negative = rest < 0
    rest = ~rest if negative else rest
    words = []
    while True:
        rest, word = divmod(rest, _WORD)
        words.append(word)
        if not rest:
            break
    for word in (2 * len(words) + negative, *words):
        key = jax.random.fold_in(key, np.uint32(word))
    return key


def host_seed(seed: int) -> int:
    """A seed for the host's samplers (numpy, scipy, Optuna: ``[0, 2**32)``):
    ``seed`` itself when in that range, else 32 bits drawn from
    :func:`root_key` (any int reaches them, as it reaches the keys)."""
    seed = int(seed)
    if 0 <= seed < _WORD:
        return seed
    return int(jax.random.bits(root_key(seed), dtype=jnp.uint32))


def stream_key(root: jax.Array, stream: int) -> jax.Array:
    """The key of one stream (:data:`INIT_STREAM`, :data:`TRAIN_STREAM` or
    :data:`EVAL_STREAM`) of the run whose root key is ``root``."""
    return jax.random.fold_in(root, stream)


def sub_key(key: jax.Array, index: int | jax.Array) -> jax.Array:
    """The ``index``-th independent use of ``key`` (e.g. 0: ask, 1: evaluate)."""
    return jax.random.fold_in(key, index)


def step_key(train_key: jax.Array, step: int | jax.Array, device: int | jax.Array | None) -> jax.Array:
    """The key of training step ``step`` on device ``device`` (``None``: the
    same key on every device, for modules with ``step_key_per_device = False``)."""
    key = jax.random.fold_in(train_key, step)
    return key if device is None else device_key(key, device)


def episode_key(key: jax.Array, episode: int | jax.Array) -> jax.Array:
    """Evaluation episode ``episode``'s key from the evaluation's ``key``:
    ``fold_in(key, episode)``, the same whichever device runs the episode."""
    return jax.random.fold_in(key, episode)


def device_key(key: jax.Array, device: int | jax.Array) -> jax.Array:
    """Device ``device``'s own key from a key every device holds (an init
    stream): ``fold_in(key, device)``."""
    return jax.random.fold_in(key, device)


def member_key(key: jax.Array, member: int | jax.Array) -> jax.Array:
    """Population member ``member``'s key: ``fold_in(key, member)``, the same
    whichever device holds the member."""
    return jax.random.fold_in(key, member)


def member_keys(key: jax.Array, members: jax.Array) -> jax.Array:
    """:func:`member_key` for each id in ``members: int32[n]`` -> ``key[n]``."""
    return jax.vmap(lambda i: member_key(key, i))(members)


def fold_in_device(key: jax.Array, axis_name: AxisName = AXIS_NAME) -> jax.Array:
    """A key unique to this device: ``fold_in(key, axis_index)``.

    Inside a mapped axis each device gets a different stream; outside one, the
    result is ``fold_in(key, 0)``, so a one-device run draws what device 0 of a
    multi-device run draws. ``key``: a typed key array of any shape.
    """
    return device_key(key, axis_index(axis_name))


def device_keys(key: jax.Array, num_devices: int) -> jax.Array:
    """Keys for ``num_devices`` devices: ``key[num_devices]``, row ``d`` equal to
    ``fold_in(key, d)``, i.e. what :func:`fold_in_device` gives device ``d``.

    Args:
      key: a typed key (``jax.random.key``) or a raw ``uint32[2]`` key
        (``jax.random.PRNGKey``); the rows have the same kind.
      num_devices: a positive int.

    Raises:
      ValueError: ``num_devices`` is not a positive int.
    """
    n = arguments.positive_int("num_devices", num_devices, allow_none=False)
    return jax.vmap(lambda d: device_key(key, d))(jnp.arange(n))
