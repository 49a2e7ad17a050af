"""One functional interface over gymnax, brax and MuJoCo Playground environments.

>>> env = jaxtrainer.envs.make("CartPole-v1")
>>> obs, state = env.reset_batch(key, 8)               # obs: float32[8, 4]
>>> obs, state, info = env.step_batch(key, state, actions)
>>> Mean.of(info.episode_return, mask=info.done)       # completed episodes only

See :mod:`jaxtrainer.envs.base` for the semantics (auto-reset, terminated vs
truncated, ``final_obs``, episode statistics), and
:mod:`jaxtrainer.envs.multi_agent` for multi-agent environments
(``make_multi_agent("jaxmarl/MPE_simple_spread_v3")``; ``make`` gives them as
:class:`AgentsAsEnvs`, one env per agent).
"""

from jaxtrainer.envs.agents_as_envs import AgentsAsEnvs
from jaxtrainer.envs.base import Env, EnvState, StepInfo
from jaxtrainer.envs.brax_env import BraxEnv
from jaxtrainer.envs.evaluation import evaluate_policy
from jaxtrainer.envs.gymnax_env import GymnaxEnv
from jaxtrainer.envs.multi_agent import MultiAgentEnv, MultiAgentInfo, MultiAgentState
from jaxtrainer.envs.playground_env import PlaygroundEnv
from jaxtrainer.envs.registry import available, in_family, make, make_multi_agent

__all__ = [
    "AgentsAsEnvs",
    "BraxEnv",
    "Env",
    "EnvState",
    "GymnaxEnv",
    "MultiAgentEnv",
    "MultiAgentInfo",
    "MultiAgentState",
    "PlaygroundEnv",
    "StepInfo",
    "available",
    "evaluate_policy",
    "in_family",
    "make",
    "make_multi_agent",
]
