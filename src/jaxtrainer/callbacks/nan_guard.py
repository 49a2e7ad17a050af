"""NaNGuard: stop at the first NaN/Inf, naming the metric and the step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.callbacks.monitor import is_finite, warn_unseen

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


_MEMBER_PREFIX = "member/"
"""Per-member metrics of a population (``member/<i>/<name>``), which ``NaNGuard``
without ``monitor`` does not check."""


class NonFiniteError(FloatingPointError):
    """A metric or the training state became NaN or infinite."""


class NaNGuard(Callback):
    """Stop training at the first log boundary with a NaN or infinite metric
    (or, with ``check_state``, state leaf), and keep the last good checkpoint.

    Runs before every other callback (``order = -100``): it sets
    ``trainer.state_is_valid = False`` so no :class:`ModelCheckpoint` saves the
    bad state (not at this boundary, not at the end, not on exception or
    preemption), sets ``trainer.should_stop`` and ``trainer.stop_reason`` (e.g.
    ``"NaNGuard: non-finite metric loss=nan at step 40"``), and prints the reason.

    The check costs nothing extra for metrics (they are on the host already);
    ``check_state`` adds one reduction over the floating-point state per boundary.

    Checking metrics only (``check_state=False``), the guard does not need the
    state at log boundaries, so the Trainer may fuse log intervals into one
    compiled call; a NaN found in a fused call's metrics marks the state invalid
    at once (nothing saves it) and training ends when that call ends, at most
    about ``Trainer(sync_every_n_seconds)`` later; the reason names the first bad
    step. ``check_state=True`` asks for the state at every boundary.

    In a population (PBT, sweeps, CEM-RL, ERL, evolution strategies) one
    diverged member is not a broken run: its NaN fitness is left out of the
    pooled statistics (and counted in ``fitness/invalid``), and without
    ``monitor`` its own ``member/<i>/...`` metrics are not checked. A pooled
    statistic turns NaN, and the guard stops, only when no member is valid.

    Args:
      monitor: metric names to check; ``None`` checks every metric except the
        per-member ones (``member/<i>/...``). A name that
        never appears in a fit's metrics warns (``UserWarning``) at its end.
      check_state: also check every floating-point leaf of ``trainer.state``.
      raise_error: raise :class:`NonFiniteError` (after marking the state
        invalid) instead of stopping quietly; ``fit`` then re-raises it after
        ``on_exception`` and ``teardown``.
    """

    writes_run_dir = False  # it reads metrics only

    order = -100

    def __init__(self, monitor: list[str] | tuple[str, ...] | None = None, check_state: bool = False,
                 raise_error: bool = False) -> None:
        self.monitor = tuple(monitor) if monitor is not None else None
        self.check_state = check_state
        self.raise_error = raise_error
        self.reason: str | None = None
        self._seen: set[str] = set()  # metric names seen in this fit

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return self.check_state

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """A new run: forget what an earlier ``fit`` left (a resume then loads the checkpoint's)."""
        self.reason = None

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        self._seen: set[str] = set()

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        if self.monitor is not None:
            warn_unseen(f"NaNGuard(monitor={list(self.monitor)!r})", self.monitor, self._seen)

    def _bad_metric(self, metrics: dict[str, float]) -> str | None:
        self._seen.update(metrics)
        for name, value in metrics.items():
            if self.monitor is not None and name not in self.monitor:
                continue
            if self.monitor is None and name.startswith(_MEMBER_PREFIX):
                continue  # one member's own metric: a diverged member, not a broken run
            if isinstance(value, (int, float)) and not is_finite(float(value)):
                return f"non-finite metric {name}={value}"
        return None

    def _bad_state(self, trainer: Trainer) -> str | None:
        state = trainer.peek_state()  # read at once: no copy needed
        if not self.check_state or state is None:
            return None
        flat = jax.tree_util.tree_leaves_with_path(state)
        floats = [(p, x) for p, x in flat if jnp.issubdtype(x.dtype, jnp.inexact)]
        if not floats:
            return None
        finite = jax.device_get([jnp.all(jnp.isfinite(x)) for _, x in floats])
        for (path, _), ok in zip(floats, finite, strict=True):
            if not ok:
                return f"non-finite state leaf {jax.tree_util.keystr(path)}"
        return None

    def _check(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        if not trainer.state_is_valid:
            return
        bad = self._bad_metric(metrics) or self._bad_state(trainer)
        if bad is None:
            return
        self.reason = f"NaNGuard: {bad} at step {trainer.global_step}"
        trainer.request_stop(self.reason, state_is_valid=False)
        if trainer.is_global_zero:
            print(f"jaxtrainer: {self.reason}; no checkpoint of this state will be written", flush=True)
        if self.raise_error:
            raise NonFiniteError(self.reason)

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._check(trainer, metrics)

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._check(trainer, metrics)
