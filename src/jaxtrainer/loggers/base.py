"""Logger base: a Callback that writes metrics, only on the global-zero process."""

from __future__ import annotations

import numbers
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.rundir import storage

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer


def to_number(name: str, value: Any) -> float | int:
    """A logged value as a Python number (a logger never writes an array).

    Python numbers pass; numpy and JAX scalars and 1-element arrays of any
    numeric dtype (bfloat16 included) are converted.

    Raises:
      TypeError: ``value`` is not numeric or has more than one element; the
        message names the metric and its shape.
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Number) and not isinstance(value, complex):
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    shape = getattr(value, "shape", None)
    if shape is not None:
        arr = np.asarray(value)
        numeric = arr.dtype.kind in "biuf" or arr.dtype.name == "bfloat16"
        if numeric and arr.size == 1:
            if arr.dtype.kind in "biu":
                return int(arr.reshape(()))
            return float(arr.astype(np.float64).reshape(()))
        raise TypeError(
            f"metric {name!r} has shape {tuple(shape)} and dtype {arr.dtype}; "
            "only scalars (or 1-element arrays) of a numeric dtype can be logged"
        )
    raise TypeError(f"metric {name!r} is a {type(value).__name__}; expected a number")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts to ``{"a/b": value}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def _hparam_value(v: Any) -> Any:
    """A hyperparameter as something every backend accepts (number, str, bool)."""
    if isinstance(v, (bool, int, float, str)):
        return v
    if v is None:
        return "None"
    return str(v)


def _hparams(trainer: Trainer, module: Module) -> dict[str, Any]:
    """What a logger records as the run's hyperparameters: the Trainer's arguments
    (``trainer.config``) with its device count, and the module's class and ``hparams()``."""
    return {"trainer": {**trainer.config, "num_devices": trainer.num_devices},
            "module": {"class": type(module).__name__, **module.hparams()}}


class Logger(Callback):
    """Base class of loggers. Subclasses implement :meth:`log_metrics`,
    :meth:`log_hyperparams` and :meth:`finalize`; the hooks below call them on
    the global-zero process only, with every value checked by :func:`to_number`.

    Logged step: ``metrics["step"]`` (global training steps done).

    A file that cannot be written (a full disk, a read-only directory) raises
    :class:`jaxtrainer.rundir.storage.StorageError` from the hook that writes, naming
    the file and the OS error; what was written before stays whole.
    """

    def __init__(self) -> None:
        self._active = False

    @property
    def state_key(self) -> str:
        return f"{type(self).__qualname__}"

    # -- to implement ---------------------------------------------------------
    def start(self, trainer: Trainer, module: Module) -> None: ...

    def log_metrics(self, metrics: dict[str, float | int], step: int) -> None:
        raise NotImplementedError

    def log_hyperparams(self, params: dict[str, Any]) -> None: ...

    def log_video(self, tag: str, path: str, step: int) -> None:
        """Log the video file ``path`` (a looping ``.gif``, e.g. from
        :class:`~jaxtrainer.callbacks.VideoCallback`) under ``tag`` at ``step``
        (global training steps). Called on the global-zero process, on the
        training loop's thread, while the logger is open; a logger that shows no
        videos (the CSV file) ignores it, as here."""

    def log_image(self, tag: str, path: str, step: int) -> None:
        """Log the image file ``path`` (a PNG, e.g. the Pareto front
        :class:`~jaxtrainer.population.FrontReport` draws) under ``tag`` at
        ``step``; called as :meth:`log_video` is. A logger that shows no
        images (the CSV file) ignores it, as here."""

    def finalize(self, status: str) -> None:
        """Flush and close. ``status``: ``"success"``, ``"failed"`` or ``"interrupted"``."""

    def reset(self) -> None:
        """Forget the previous run (file paths, writers, run ids). Called at the
        start of every ``fit`` (in ``setup``) before a resume loads the
        checkpoint's state, so a logger reused for a new run starts it fresh."""

    # -- hooks ---------------------------------------------------------------
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage == "fit":
            self._close("failed")  # left open by an earlier fit that never reached teardown
            self.reset()

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        if not trainer.is_global_zero:
            return
        self.start(trainer, module)
        self._active = True
        params = {k: _hparam_value(v) for k, v in flatten(_hparams(trainer, module)).items()}
        self.log_hyperparams(params)

    def _log(self, metrics: dict[str, Any]) -> None:
        if not self._active:
            return
        values = {k: to_number(k, v) for k, v in metrics.items() if k != "step"}
        self.log_metrics(values, int(metrics["step"]))

    def video(self, tag: str, path: str, step: int) -> None:
        """:meth:`log_video` while this logger is open (global-zero process), else nothing."""
        if self._active:
            self.log_video(tag, path, step)

    def image(self, tag: str, path: str, step: int) -> None:
        """:meth:`log_image` while this logger is open (global-zero process), else nothing."""
        if self._active:
            self.log_image(tag, path, step)

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False  # metrics only: the next interval may run meanwhile

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._log(metrics)

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._log(metrics)

    def _close(self, status: str) -> None:
        if self._active:
            self._active = False
            self.finalize(status)

    def on_fit_end(self, trainer: Trainer, module: Module) -> None:
        self._close("success")

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        """Close on ``fit``'s error path. A file that cannot be written now
        either (a full disk) is said in one line on stderr, unless the error
        ``fit`` raises is itself a storage error (it says so already)."""
        try:
            self._close("interrupted" if isinstance(exception, KeyboardInterrupt) else "failed")
        except OSError as error:
            if storage.as_storage_error(exception) is None:
                print(f"jaxtrainer: {type(self).__name__}: {storage.as_storage_error(error) or error}",
                      file=sys.stderr, flush=True)

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._close("success")
