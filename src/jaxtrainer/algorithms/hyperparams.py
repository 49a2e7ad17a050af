"""Traced hyperparameters held in a module's state, read and written the same way
by every algorithm and by the population modes that set them per member.

A module is *population-ready* when its state has a ``hyperparams: dict[str,
float32[]]`` field (or, for a dict state, key) that its ``training_step`` reads:
members of a population then differ in numbers held in the state, and one
compiled program trains them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

__all__ = ["annealed", "config_record", "get_hyperparams", "set_hyperparams", "set_learning_rate"]


def config_record(config: Any, **extra: Any) -> dict[str, Any]:
    """An algorithm's config dataclass as the hyperparameters a logger records
    (``Module.hparams``): its fields, tuples as lists (layer widths), the
    ``network`` section as a dict, then ``extra`` (derived sizes such as
    ``total_updates``)."""
    record = {k: list(v) if isinstance(v, tuple) else v
              for k, v in dataclasses.asdict(config).items()}
    if getattr(config, "network", None) is not None:
        record["network"] = dataclasses.asdict(config.network)
    record.update(extra)
    return record


def get_hyperparams(state: Any) -> Any:
    """``state.hyperparams`` (a dataclass state) or ``state["hyperparams"]`` (a dict
    state); ``None`` when there is neither."""
    if isinstance(state, Mapping):
        return state.get("hyperparams")
    return getattr(state, "hyperparams", None)


def set_hyperparams(state: Any, hyperparams: dict[str, jax.Array]) -> Any:
    """``state`` with its hyperparameters replaced (dict or ``.replace`` dataclass)."""
    if isinstance(state, Mapping):
        return {**state, "hyperparams": hyperparams}
    return state.replace(hyperparams=hyperparams)


def set_learning_rate(opt_state: Any, learning_rate: jax.Array) -> Any:
    """An ``optax.inject_hyperparams`` state (``InjectHyperparamsState``) with its
    ``learning_rate`` replaced by ``learning_rate`` (``float32[]``): how a traced
    learning rate in ``state.hyperparams`` reaches an optimizer."""
    return opt_state._replace(hyperparams={**opt_state.hyperparams,
                                           "learning_rate": learning_rate})


def annealed(learning_rate: jax.Array, update: jax.Array, total: int) -> jax.Array:
    """``learning_rate`` annealed linearly to 0 over ``total`` updates, at update
    number ``update`` (``int32[]``, from 0): ``optax.linear_schedule(lr, 0, total)``,
    i.e. ``lr * (1 - update / total)``, 0 after it (PPO's ``anneal_lr``, as
    CleanRL's and PureJaxRL's; DQN's, as PureJaxRL's ``LR_LINEAR_DECAY``)."""
    return optax.linear_schedule(learning_rate, 0.0, total)(jnp.asarray(update, jnp.float32))

def hyperparam(config: Any, hyperparams: Mapping[str, jax.Array] | None, name: str) -> Any:
    """``hyperparams[name]`` (a traced ``float32[]`` from ``state.hyperparams``), or
    ``config.<name>`` when ``hyperparams`` is ``None`` (a loss called with the
    config's constants, as the tests call TD3's and DQN's)."""
    return getattr(config, name) if hyperparams is None else hyperparams[name]


def adam(learning_rate: float, max_grad_norm: float | None = None,
         eps: float | None = None, b1: float | None = None) -> optax.GradientTransformation:
    """``optax.adam(learning_rate)`` (with Adam's ``eps`` and ``b1`` where given), after
    ``optax.clip_by_global_norm(max_grad_norm)`` when given, built by
    ``optax.inject_hyperparams`` so that the learning rate is a number in the
    optimizer state (:func:`~jaxtrainer.algorithms.hyperparams.set_learning_rate`),
    not a constant of the compiled program. Same updates as the plain optimizer,
    bit for bit."""
    def make(learning_rate):
        given = {"eps": eps, "b1": b1}
        tx = optax.adam(learning_rate, **{k: v for k, v in given.items() if v is not None})
        if max_grad_norm is None:
            return tx
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), tx)
    return optax.inject_hyperparams(make)(learning_rate=learning_rate)
