"""JAX's persistent compilation cache, for warm starts.

A second run of the same program (another seed, another learning rate: any
change that does not change shapes, dtypes or the traced computation) loads the
compiled XLA executables from disk instead of compiling them again. JAX keys
every entry by the computation, the jax/jaxlib versions, the backend, the
devices and the XLA flags, so one cache directory is safe to share across jax
upgrades, flag changes and machines: an entry that does not match is never
used, it is compiled again and stored beside it.

The recipes and the ``jaxtrainer`` command line turn it on by default
(``trainer.compilation_cache: true``); library use is opt-in:
``Trainer(compilation_cache=True)`` or :func:`enable`. The environment variable
:data:`ENV_VAR` overrides both: ``0``/``false``/``off`` turns it off,
``1``/``true``/``on`` turns it on in :func:`default_dir`, anything else is the
directory to use.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

ENV_VAR = "JAXTRAINER_COMPILATION_CACHE"
"""Environment variable that overrides every setting: off, on, or a directory."""

MIN_COMPILE_SECONDS = 0.2
"""Programs that compile faster than this are not stored (JAX's default is 1 s,
which would leave a recipe's small programs to compile on every run)."""

_OFF = {"0", "false", "off", "no"}
_ON = {"1", "true", "on", "yes"}


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/jaxtrainer/jax``, ``~/.cache/jaxtrainer/jax`` without it."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "jaxtrainer" / "jax"


def resolve(setting: bool | str | os.PathLike | None) -> Path | None:
    """The cache directory ``setting`` asks for, after :data:`ENV_VAR`; ``None`` = off.

    ``setting``: ``None``/``False`` off, ``True`` (or ``"auto"``) the directory
    JAX is already configured with (``JAX_COMPILATION_CACHE_DIR``) or
    :func:`default_dir`, a path that directory.

    Raises:
      ValueError: ``setting`` is none of these (e.g. ``3``).
    """
    if not (setting is None or isinstance(setting, bool)
            or (isinstance(setting, (str, os.PathLike)) and os.fspath(setting))):
        raise ValueError(f"compilation_cache={setting!r}: expected True, False, None or a "
                         "directory path")
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        setting = (False if env.lower() in _OFF else True if env.lower() in _ON else env)
    if setting is None or setting is False:
        return None
    if setting is True or setting == "auto":
        configured = jax.config.jax_compilation_cache_dir
        return Path(configured) if configured else default_dir()
    return Path(os.path.expanduser(os.fspath(setting)))


def enable(setting: bool | str | os.PathLike | None = True) -> Path | None:
    """Turn JAX's persistent compilation cache on in the directory ``setting``
    resolves to (:func:`resolve`), for every later compile of this process, and
    return that directory (``None``: left as it was, off unless the user set it).

    Takes effect even after something has compiled (JAX's cache is reset to
    re-read the configuration). Entries are stored for programs that compile in
    :data:`MIN_COMPILE_SECONDS` or more.

    Raises:
      ValueError: a bad ``setting`` (see :func:`resolve`).
      OSError: the directory cannot be created.
    """
    path = resolve(setting)
    if path is None:
        return None
    path.mkdir(parents=True, exist_ok=True)
    if jax.config.jax_compilation_cache_dir != str(path):
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax_cache.reset_cache()
    if jax.config.jax_persistent_cache_min_compile_time_secs > MIN_COMPILE_SECONDS:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
