"""Algorithms as :class:`jaxtrainer.Module` subclasses."""

from jaxtrainer.algorithms.a2c import A2C, A2CConfig
from jaxtrainer.algorithms.cem_rl import CEMRL, CEMRLConfig, CEMRLState
from jaxtrainer.algorithms.ddpg import DDPG, DDPGConfig
from jaxtrainer.algorithms.dqn import DQN, DQNConfig, DQNState
from jaxtrainer.algorithms.erl import ERL, ERLConfig, ERLState
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
from jaxtrainer.algorithms.impala import IMPALA, IMPALAConfig, IMPALAState
from jaxtrainer.algorithms.pbt import PBT, Hyperparam, PBTState
from jaxtrainer.algorithms.ppo import PPO, PPOConfig, PPOState
from jaxtrainer.algorithms.replay import ReplayBuffer, Transition
from jaxtrainer.algorithms.sac import SAC, SACConfig, SACState
from jaxtrainer.algorithms.sweep import Sweep, SweepState
from jaxtrainer.algorithms.td3 import TD3, TD3Config, TD3State

__all__ = [
    "A2C",
    "A2CConfig",
    "CEMRL",
    "CEMRLConfig",
    "CEMRLState",
    "DDPG",
    "DDPGConfig",
    "DQN",
    "DQNConfig",
    "DQNState",
    "ERL",
    "ERLConfig",
    "ERLState",
    "IMPALA",
    "IMPALAConfig",
    "IMPALAState",
    "ReplayBuffer",
    "SAC",
    "SACConfig",
    "SACState",
    "Sweep",
    "SweepState",
    "TD3",
    "TD3Config",
    "TD3State",
    "Transition",
    "FITNESS_SHAPING",
    "ESState",
    "EvosaxES",
    "FunctionES",
    "MLPPolicy",
    "NeuroES",
    "PBT",
    "PBTState",
    "Hyperparam",
    "PPO",
    "PPOConfig",
    "PPOState",
    "rastrigin",
    "resolve_algorithm",
    "sphere",
]
