"""LearningRateMonitor: log the optimizer's injected hyperparameters."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import optax

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.module import Population

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer

_INJECTED = tuple(c for c in (getattr(optax, "InjectHyperparamsState", None),
                              getattr(optax, "InjectStatefulHyperparamsState", None)) if c is not None)


class LearningRateMonitor(Callback):
    """Add the current optimizer hyperparameters to every log boundary's metrics.

    Optax keeps a schedule's current value only when the optimizer is wrapped in
    ``optax.inject_hyperparams`` (e.g.
    ``optax.inject_hyperparams(optax.adam)(learning_rate=schedule)``); this
    callback finds every such optimizer state in ``trainer.state`` and logs its
    hyperparameters as ``lr/<name>`` (``lr/<state path>/<name>`` when the state
    holds several optimizers), the values after the interval's last update.
    A learning rate the module computes and returns as a metric is logged by
    the loggers like any other metric and needs no callback; return it as
    ``jaxtrainer.Last.of(lr)`` (as PPO and A2C do) so that it, too, reports
    the interval's last value rather than its mean. Unlike this callback,
    such a metric reads no state, so log intervals may still fuse. Runs before the loggers (``order = -50``); fetching the values is
    one small host transfer per log boundary.

    A population (PBT, a search: a module with ``population_size`` ``P`` whose
    state stacks its members on a leading axis) holds one value per member:
    member ``i``'s is logged as ``lr/member/<i>/<name>``, and ``lr/<name>``
    is the mean over the ``P`` real members, with ``lr/<name>_min`` and
    ``lr/<name>_max`` (padding members, which a device count that does not
    divide ``P`` adds, are never logged).

    Args:
      names: hyperparameter names to log; ``None`` logs every scalar one.
        Default ``("learning_rate",)``.

    Warns once (UserWarning) when the state holds no injected optimizer state.
    """

    writes_run_dir = False  # it reads metrics only

    order = -50

    def __init__(self, names: tuple[str, ...] | None = ("learning_rate",)) -> None:
        self.names = tuple(names) if names is not None else None
        self._warned = False

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._warned = False  # warn once per run

    def current(self, state: Any, members: int | None = None) -> dict[str, float]:
        """``{"lr/<name>": value}`` of every injected hyperparameter in
        ``state``; with ``members`` (a population's ``P``), a value per member
        (``[P_pad]``, real members first) gives the per-member keys and the
        mean/min/max of the class docstring."""
        found = jax.tree_util.tree_flatten_with_path(state, is_leaf=lambda x: isinstance(x, _INJECTED))[0]
        found = [(p, s) for p, s in found if isinstance(s, _INJECTED)]
        values: dict[str, Any] = {}
        for path, s in found:
            prefix = "lr/" if len(found) == 1 else f"lr/{jax.tree_util.keystr(path).strip('.[]')}/"
            for name, value in s.hyperparams.items():
                if self.names is not None and name not in self.names:
                    continue
                if np.size(value) == 1 or (members and np.ndim(value) == 1 and len(value) >= members):
                    values[prefix + name] = value
        host = jax.device_get(values)
        out: dict[str, float] = {}
        for key, value in host.items():
            value = np.asarray(value, np.float64)
            if value.size == 1:
                out[key] = float(value.reshape(()))
                continue
            real = value[:members]
            prefix, name = key.rsplit("/", 1)
            out.update({f"{prefix}/member/{i}/{name}": float(v) for i, v in enumerate(real)})
            out.update({key: float(real.mean()), f"{key}_min": float(real.min()),
                        f"{key}_max": float(real.max())})
        return out

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        members = module.population_size if isinstance(module, Population) else None
        values = self.current(trainer.peek_state(), members if isinstance(members, int) else None)
        if not values and not self._warned:
            self._warned = True
            warnings.warn("LearningRateMonitor: the state holds no optax.inject_hyperparams optimizer "
                          "state; wrap the optimizer in optax.inject_hyperparams to log its learning "
                          "rate", UserWarning, stacklevel=2)
        metrics.update(values)
