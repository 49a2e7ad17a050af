"""Algorithms as :class:`jaxtrainer.Module` subclasses."""

from jaxtrainer.algorithms.ppo import PPO, PPOConfig, PPOState

__all__ = ["PPO", "PPOConfig", "PPOState"]
