"""Algorithms as :class:`jaxtrainer.Module` subclasses."""

from jaxtrainer.algorithms.es import (
    FITNESS_SHAPING,
    ESState,
    EvosaxES,
    FunctionES,
    MLPPolicy,
    NeuroES,
    rastrigin,
    resolve_algorithm,
    sphere,
)
from jaxtrainer.algorithms.ppo import PPO, PPOConfig, PPOState

__all__ = [
    "FITNESS_SHAPING",
    "ESState",
    "EvosaxES",
    "FunctionES",
    "MLPPolicy",
    "NeuroES",
    "PPO",
    "PPOConfig",
    "PPOState",
    "rastrigin",
    "resolve_algorithm",
    "sphere",
]
