"""Every module jaxtrainer ships, each with the tiniest config that still runs its
whole training step: one table for the tests that run all of them
(``test_module_contract``: init, a step, float metrics and exact resume on 1 and 4
devices; ``test_state_dtypes``: every one under ``jax_enable_x64``).

Sizes divide 1, 2 and 4 devices. Off-policy modules learn from the first step
(``learning_starts=0``); CEM-RL learns from its second generation (the first has
an empty buffer), ERL from its first (after that generation's rollouts). Imports
are deferred to the factories so that a subprocess can set ``JAX_ENABLE_X64``
before jax is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

POPULATION_SIZE = 4
"""Members of the ES adapters' PopulationTrainer runs (one per device on 4)."""

PPO_TINY = dict(num_envs=4, num_steps=4, num_minibatches=1, update_epochs=1, hidden_sizes=(4,),
                eval_episodes=4)
A2C_TINY = dict(num_envs=4, num_steps=4, hidden_sizes=(4,), eval_episodes=4, anneal_lr=True)
IMPALA_TINY = dict(num_envs=4, num_steps=4, policy_lag=1, update_epochs=2, num_minibatches=1,
                   hidden_sizes=(4,), eval_episodes=4)
PQN_TINY = dict(num_envs=4, num_steps=4, num_minibatches=1, update_epochs=2, hidden_sizes=(4,),
                eval_episodes=4)
OFF_TINY = dict(num_envs=4, buffer_size=16, batch_size=4, learning_starts=0, gradient_steps=1,
                hidden_sizes=(4,), eval_episodes=4)
CEMRL_TINY = dict(population_size=4, rollout_steps=4, critic_steps=2, actor_steps=2,
                  actor_hidden_sizes=(4,), critic_hidden_sizes=(4,), buffer_size=16,
                  batch_size=4, learning_starts=0, eval_episodes=4)
ERL_TINY = dict(population_size=4, rl_episodes=4, rollout_steps=4, critic_steps=2,
                hidden_sizes=(4,), buffer_size=16, batch_size=4, learning_starts=0,
                eval_episodes=4)


def _ppo() -> Any:
    from jaxtrainer.algorithms import PPO, PPOConfig
    return PPO(PPOConfig(**PPO_TINY))


def _a2c() -> Any:
    from jaxtrainer.algorithms import A2C, A2CConfig
    return A2C(A2CConfig(**A2C_TINY))


def _c51() -> Any:
    from jaxtrainer.algorithms import DQN, DQNConfig
    return DQN(DQNConfig(**OFF_TINY, distributional="c51", num_atoms=5, v_min=-10.0, v_max=10.0))


def _rainbow() -> Any:
    from jaxtrainer.algorithms import DQN, DQNConfig
    # 3 env steps per env a step: the first step's update already samples 3-step runs
    return DQN(DQNConfig(**{**OFF_TINY, "learning_starts": 12}, train_frequency=3,
                         distributional="c51", num_atoms=5, v_min=-10.0, v_max=10.0, n_step=3,
                         dueling=True))


def _pqn() -> Any:
    from jaxtrainer.algorithms import PQN, PQNConfig
    return PQN(PQNConfig(**PQN_TINY))


def _impala() -> Any:
    from jaxtrainer.algorithms import IMPALA, IMPALAConfig
    return IMPALA(IMPALAConfig(**IMPALA_TINY))


def _dqn() -> Any:
    from jaxtrainer.algorithms import DQN, DQNConfig
    return DQN(DQNConfig(**OFF_TINY))


def _sac() -> Any:
    from jaxtrainer.algorithms import SAC, SACConfig
    return SAC(SACConfig(**OFF_TINY))


def _crossq() -> Any:
    from jaxtrainer.algorithms import CrossQ, CrossQConfig
    # policy_delay 2 and warmup 1: the first steps run the delayed actor update and the
    # renormalisation corrections
    return CrossQ(CrossQConfig(**OFF_TINY, critic_hidden_sizes=(4,), policy_delay=2,
                               renorm_warmup_steps=1))


def _td3() -> Any:
    from jaxtrainer.algorithms import TD3, TD3Config
    return TD3(TD3Config(**OFF_TINY))


def _ddpg() -> Any:
    from jaxtrainer.algorithms import DDPG, DDPGConfig
    return DDPG(DDPGConfig(**OFF_TINY))


def _pbt() -> Any:
    from jaxtrainer.population import PBT
    return PBT(_ppo(), {"lr": (1e-4, 1e-2)}, population_size=4, ready_every_n_steps=1)


def _cemrl() -> Any:
    from jaxtrainer.algorithms import CEMRL, CEMRLConfig
    return CEMRL(CEMRLConfig(**CEMRL_TINY))


def _erl() -> Any:
    from jaxtrainer.algorithms import ERL, ERLConfig
    return ERL(ERLConfig(**ERL_TINY))


def _function_es(algorithm: str) -> Callable[[], Any]:
    def make() -> Any:
        from jaxtrainer.algorithms import FunctionES, sphere
        return FunctionES(sphere, 3, algorithm, init_mean=1.0)
    return make


def _neuro_es() -> Any:
    from jaxtrainer.algorithms import NeuroES
    return NeuroES("CartPole-v1", "Open_ES", hidden_sizes=(2,), eval_episodes=4)


MODULES: dict[str, Callable[[], Any]] = {
    "PPO": _ppo, "A2C": _a2c, "IMPALA": _impala, "DQN": _dqn, "C51": _c51, "Rainbow": _rainbow,
    "PQN": _pqn, "SAC": _sac, "CrossQ": _crossq, "TD3": _td3, "DDPG": _ddpg, "PBT": _pbt, "CEMRL": _cemrl, "ERL": _erl}
"""``jt.Module`` s, for a ``Trainer``: name -> factory."""

POPULATION: dict[str, Callable[[], Any]] = {
    "OpenES": _function_es("Open_ES"), "CMA_ES": _function_es("CMA_ES"), "NeuroES": _neuro_es}
"""``jt.PopulationModule`` s (the ES adapters), for a ``PopulationTrainer`` of
:data:`POPULATION_SIZE` members: name -> factory."""
