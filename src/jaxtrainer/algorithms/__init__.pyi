"""Names of :mod:`jaxtrainer.algorithms`, each imported from its submodule on first use."""

from .a2c import A2C, A2CConfig
from .cem_rl import CEMRL, CEMRLConfig, CEMRLState
from .crossq import CrossQ, CrossQConfig, CrossQState
from .ddpg import DDPG, DDPGConfig
from .dqn import DQN, DQNConfig, DQNState
from .erl import ERL, ERLConfig, ERLState
from .es import (
    FITNESS_SHAPING,
    ESState,
    EvosaxES,
    FunctionES,
    rastrigin,
    resolve_algorithm,
    sphere,
)
from .impala import IMPALA, IMPALAConfig, IMPALAState
from .neuro_es import MLPPolicy, NeuroES
from .ppo import PPO, PPOConfig, PPOState
from .pqn import PQN, PQNConfig, PQNState
from .replay import ReplayBuffer, Transition
from .sac import SAC, SACConfig, SACState
from .td3 import TD3, TD3Config, TD3State

__all__ = [
    "A2C",
    "A2CConfig",
    "CEMRL",
    "CEMRLConfig",
    "CEMRLState",
    "DDPG",
    "DDPGConfig",
    "CrossQ",
    "CrossQConfig",
    "CrossQState",
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
    "PPO",
    "PPOConfig",
    "PPOState",
    "PQN",
    "PQNConfig",
    "PQNState",
    "rastrigin",
    "resolve_algorithm",
    "sphere",
]
