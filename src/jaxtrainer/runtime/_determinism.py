"""``Trainer(deterministic=True)`` (``trainer.deterministic=true``): XLA's side of
"the same seed gives the same numbers".

The Trainer's PRNG keys already depend on (seed, step, device) only; what else
can differ between two runs of one program is how XLA computes it. :func:`apply`
sets, for the programs the run compiles from then on:

* ``--xla_gpu_deterministic_ops=true`` in ``XLA_FLAGS``. On a GPU, XLA then
  picks deterministic algorithms: reductions and scatters without atomics,
  cuDNN's deterministic convolutions; slower (scatter-heavy programs the most).
  XLA reads ``XLA_FLAGS`` once per process, when JAX's backend starts (the
  first array, ``jax.devices()``): the flag is added only before that. After it
  started without the flag on a GPU, nothing can add it and :func:`apply`
  refuses (ValueError). On CPU and TPU the flag is ignored: XLA there runs a
  compiled program the same way every time (no atomics in its reductions), so
  a backend already started on them needs nothing more.
* ``jax_default_matmul_precision="highest"``: float32 matmuls and convolutions
  in full float32 (no TF32 on a GPU, no single bfloat16 pass on a TPU, where
  they cost several passes); no change on CPU. Process-wide, like
  ``jax.config``: later programs of the process get it too.

Whether the backend started is read through public ``jax.config`` only (JAX
refuses to change ``jax_cpu_get_local_topology_timeout_minutes`` once it has):
a backend started and then cleared (``jax.extend.backend.clear_backends``)
reads as not started, though XLA keeps the flags it read first.
"""

from __future__ import annotations

import os
import shlex
import sys

import jax

GPU_FLAG = "--xla_gpu_deterministic_ops=true"
"""What :func:`apply` adds to ``XLA_FLAGS``."""

PRECISION = "highest"
"""What :func:`apply` sets ``jax_default_matmul_precision`` to."""

_PROBE = (
    "jax_cpu_get_local_topology_timeout_minutes"  # JAX refuses a change once the backend started
)


def backend_started() -> bool:
    """Whether JAX's backend has started (XLA has read ``XLA_FLAGS``): a
    change of :data:`_PROBE` is refused then; before, it is made and undone."""
    value = getattr(jax.config, _PROBE)
    try:
        jax.config.update(_PROBE, value + 1)
    except RuntimeError:
        return True
    jax.config.update(_PROBE, value)
    return False


def _gpu_flag_set(flags: str) -> bool:
    """Whether ``flags`` (an ``XLA_FLAGS`` value) turns the GPU flag on (its last mention wins)."""
    value = None
    for token in shlex.split(flags):
        name, _, given = token.partition("=")
        if name == GPU_FLAG.split("=")[0]:
            value = given.lower() in ("", "true", "1")
    return bool(value)


def add_gpu_flag() -> None:
    """Add :data:`GPU_FLAG` to ``XLA_FLAGS`` unless they turn it on already: what a
    command asked for ``trainer.deterministic=true`` does before JAX's backend starts
    (:func:`apply` then finds it there)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if not _gpu_flag_set(flags):
        os.environ["XLA_FLAGS"] = f"{flags} {GPU_FLAG}".strip()


def apply(started: bool | None = None, platform: str | None = None) -> dict[str, str]:
    """Set what determinism needs (module docstring), print one line on stderr
    saying what, and return it as the run records it: ``{"xla_flags": ...,
    "jax_default_matmul_precision": "highest"}`` (``xla_flags`` empty where the
    flag was left unset: a CPU or TPU backend already started).

    ``started`` and ``platform`` default to :func:`backend_started` and, once
    started, ``jax.default_backend()``.

    Raises:
      ValueError: the backend already started on a GPU without
        ``--xla_gpu_deterministic_ops=true`` in ``XLA_FLAGS`` (nothing is changed).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    started = backend_started() if started is None else started
    if _gpu_flag_set(flags) or not started:
        add_gpu_flag()
        xla_flags, said = (
            GPU_FLAG,
            (
                f"XLA_FLAGS with {GPU_FLAG} (used on a GPU; CPU and TPU "
                "programs are deterministic without it)"
            ),
        )
    else:
        platform = platform or jax.default_backend()
        if platform not in ("cpu", "tpu"):
            raise ValueError(
                f"deterministic=True cannot take effect: JAX's backend already started on {platform} "
                f"without {GPU_FLAG} in XLA_FLAGS (XLA reads them once, at its start); set "
                f"XLA_FLAGS={GPU_FLAG} before starting Python, or build the Trainer before any "
                "JAX operation"
            )
        xla_flags, said = (
            "",
            (
                f"left XLA_FLAGS as they are ({platform}: {GPU_FLAG} is for GPUs; "
                f"{platform} programs are deterministic without it)"
            ),
        )
    jax.config.update("jax_default_matmul_precision", PRECISION)
    print(
        f"jaxtrainer: deterministic: {said}; set jax_default_matmul_precision={PRECISION} "
        "(float32 matmuls in full float32)",
        file=sys.stderr,
        flush=True,
    )
    return {"xla_flags": xla_flags, "jax_default_matmul_precision": PRECISION}
