"""JAX's persistent compilation cache, for warm starts.

A second run of the same program loads the compiled XLA executables from
disk instead of compiling them again. Another seed, or other values of the
hyperparameters a module keeps in its state (its ``initial_hyperparams``,
passed to the init program as an argument: for the shipped algorithms their
``TUNABLE`` learning rates, coefficients, ``gamma``, ``gae_lambda``, clips,
``tau``, epsilon schedule ends), is the same program on every strategy. Any
key that changes a shape, a dtype or the traced computation compiles anew:
network sizes, ``num_envs``, batch and buffer sizes, rollout lengths, epoch
and minibatch counts, the environment, the device count, switches such as
``anneal_lr`` or ``autotune``, and numbers the shipped algorithms keep as
constants (their other config floats, e.g. SAC's ``init_alpha`` with
``autotune``, DQN's ``epsilon_anneal_steps``, and with ``anneal_lr`` the
schedule's length: the run's budget unless ``total_updates`` is set). JAX keys
every entry by the computation, the jax/jaxlib versions, the backend, the
devices and the XLA flags, so one cache directory is safe to share across jax
upgrades, flag changes and machines: an entry that does not match is never
used, it is compiled again and stored beside it.

The :class:`~jaxtrainer.Trainer`, the recipes and the ``jaxtrainer`` command
line turn it on by default (``Trainer(compilation_cache=True)``,
``trainer.compilation_cache: true``); ``Trainer(compilation_cache=False)`` or
``trainer.compilation_cache=false`` leaves it off, :func:`enable` turns it on
outside a Trainer. The environment variable :data:`_ENV_VAR` overrides every
setting: ``0``/``false``/``off`` turns it off,
``1``/``true``/``on`` turns it on in :func:`default_dir`, anything else is the
directory to use.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from jaxtrainer._arguments import expand_path

_ENV_VAR = "JAXTRAINER_COMPILATION_CACHE"
"""Environment variable that overrides every setting: off, on, or a directory."""

_MIN_COMPILE_SECONDS = 0.0
"""Programs are stored however fast they compile. With a threshold (JAX's default
is 1 s), a small program that compiles in about the threshold's time (an eager
key or dtype operation before the training program: 0.01-0.07 s on 2 busy CPU
cores) is stored by one run and not by another, so a rerun compiled it again
and seemed to add cache entries; reading an entry takes a few milliseconds."""

_OFF = {"0", "false", "off", "no"}
_ON = {"1", "true", "on", "yes"}


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/jaxtrainer/jax``, ``~/.cache/jaxtrainer/jax`` without it."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "jaxtrainer" / "jax"


def _as_setting(value: object, where: str) -> bool | str | os.PathLike | None:
    """``value`` as ``None``/``True``/``False`` or a directory: ``0``/``1`` and the
    words of :data:`_OFF`/:data:`_ON` are switches, a directory is a path with a
    separator or ``~`` in it (or an ``os.PathLike``), so a misspelt switch (``flase``) is an error, not a
    directory of that name."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _OFF | _ON | {"auto", "none", "null"}:
        word = value.strip().lower()
        return None if word in ("none", "null") else word in _ON | {"auto"}
    if isinstance(value, os.PathLike) or (
            isinstance(value, str) and (os.sep in value or value.startswith("~"))):
        return value
    raise ValueError(f"{where}: expected true/false (or 1/0, on/off), null, or a directory "
                     "path containing a '/' (e.g. ./jax-cache or ~/.cache/jax)")


def resolve(setting: bool | str | os.PathLike | None) -> Path | None:
    """The cache directory ``setting`` asks for, after :data:`_ENV_VAR`; ``None`` = off.

    ``setting``: ``None``/``False`` (or ``0``, ``"off"``) off; ``True`` (or ``1``,
    ``"on"``, ``"auto"``) the directory JAX is already configured with
    (``JAX_COMPILATION_CACHE_DIR``) or :func:`default_dir`; a path with a ``/``
    or a leading ``~``: that directory. :data:`_ENV_VAR` takes the same values.

    Raises:
      ValueError: ``setting`` (or :data:`_ENV_VAR`) is none of these (e.g. ``3``,
        or ``flase``: a word without a ``/`` is a misspelt switch, not a
        directory).
    """
    setting = _as_setting(setting, f"compilation_cache={setting!r}")
    env = os.environ.get(_ENV_VAR, "").strip()
    if env:
        setting = _as_setting(env, f"{_ENV_VAR}={env!r}")
    if setting is None or setting is False:
        return None
    if setting is True:
        configured = jax.config.jax_compilation_cache_dir
        return Path(configured) if configured else default_dir()
    return Path(expand_path(setting))


def enable(setting: bool | str | os.PathLike | None = True) -> Path | None:
    """Turn JAX's persistent compilation cache on in the directory ``setting``
    resolves to (:func:`resolve`), for every later compile of this process, and
    return that directory (``None``: left as it was, off unless the user set it).

    Takes effect even after something has compiled (JAX's cache is reset to
    re-read the configuration). Every program compiled from then on is stored
    (:data:`_MIN_COMPILE_SECONDS`).

    A directory that cannot be created or written (a read-only home, a full
    disk) is not an error: one line on stderr names it and the error, and the
    run goes on without the cache (``None`` is returned). JAX reads entries
    defensively: a damaged entry is compiled again, never fatal.

    Raises:
      ValueError: a bad ``setting`` (see :func:`resolve`).
    """
    path = resolve(setting)
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".jaxtrainer-write-test-"):
            pass
    except OSError as error:
        print(f"jaxtrainer: the compilation cache directory {path} is not writable "
              f"({type(error).__name__}: {error.strerror or error}); running without the cache "
              f"(set {_ENV_VAR} to another directory, or 0 to turn it off)",
              file=sys.stderr, flush=True)
        return None
    if jax.config.jax_compilation_cache_dir != str(path):
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax_cache.reset_cache()
    if jax.config.jax_persistent_cache_min_compile_time_secs > _MIN_COMPILE_SECONDS:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", _MIN_COMPILE_SECONDS)
    return path
