"""Config parts (``algorithms/_config_parts.py``): a group of fields declared once
and composed, flat, into the configs (and states) that have them: the keys stay
flat (``PPOConfig(gae_lambda=0.9)``, ``dataclasses.replace``), the order is the
part's, a config may change a part's default, and a field declared twice is an
error."""

from __future__ import annotations

import dataclasses

import pytest

from jaxtrainer.algorithms import (
    A2CConfig,
    ERLConfig,
    IMPALAConfig,
    PPOConfig,
    PQNConfig,
    TD3Config,
)
from jaxtrainer.algorithms._config_parts import composes, values
from jaxtrainer.algorithms.actor_critic import ActorCriticConfig
from jaxtrainer.algorithms.advantages import GAEConfig
from jaxtrainer.algorithms.cem_rl import CEMRLState
from jaxtrainer.algorithms.erl import ERLState
from jaxtrainer.algorithms.evolution import ReplayAndSearch
from jaxtrainer.algorithms.onpolicy import OnPolicyConfig
from jaxtrainer.algorithms.replay import EnvsAndReplay
from jaxtrainer.algorithms.sac import SACState
from jaxtrainer.algorithms.td3 import TD3LearnerConfig, TD3State
from jaxtrainer.recipes._usage import doc_entries


@dataclasses.dataclass(frozen=True)
class _Part:
    a: int = 1
    b: str = "x"


def test_a_part_s_fields_are_declared_flat_before_or_after_the_class_s_own():
    @dataclasses.dataclass(frozen=True)
    @composes(_Part, b="y")
    class First:
        c: float = 2.0

    @dataclasses.dataclass(frozen=True)
    @composes(_Part, after_own=True)
    class Last:
        c: float = 2.0

    assert [f.name for f in dataclasses.fields(First)] == ["a", "b", "c"]
    assert [f.name for f in dataclasses.fields(Last)] == ["c", "a", "b"]
    assert First() == First(a=1, b="y", c=2.0)
    assert dataclasses.replace(First(), a=5).a == 5
    assert values(_Part, Last(a=3)) == {"a": 3, "b": "x"}


def test_a_field_declared_again_or_an_unknown_default_is_refused():
    with pytest.raises(TypeError, match="Twice composes _Part: its field 'a' is declared again"):
        @composes(_Part)
        class Twice:
            a: int = 2
    with pytest.raises(TypeError, match=r"Typo: defaults for \['z'\], which no part of \['_Part'\]"):
        @composes(_Part, z=1)
        class Typo:
            c: int = 0


def test_the_shipped_configs_compose_their_shared_fields_once():
    # the GAE fields: PPO's defaults, A2C's lambda of 1 (n-step returns)
    gae = [f.name for f in dataclasses.fields(GAEConfig)]
    assert gae == ["unroll_length", "gae_lambda", "bootstrap_truncation", "critic_input"]
    assert values(GAEConfig, PPOConfig()) == {"unroll_length": None, "gae_lambda": 0.95,
                                              "bootstrap_truncation": True,
                                              "critic_input": "observation"}
    assert A2CConfig().gae_lambda == 1.0 and PPOConfig(gae_lambda=0.9).gae_lambda == 0.9
    with pytest.raises(ValueError, match="PPOConfig.gae_lambda=2"):
        PPOConfig(gae_lambda=2)
    # TD3's learner fields, in TD3's config and ERL's, checked the same way
    learner = dict(values(TD3LearnerConfig, TD3Config()))
    assert values(TD3LearnerConfig, ERLConfig()) == learner == {
        "normalize_observations": False, "reward_scaling": 1.0, "lr": 3e-4, "twin_critics": True,
        "policy_delay": 2, "exploration_noise": 0.1, "policy_noise": 0.2, "noise_clip": 0.5}
    for config in (TD3Config, ERLConfig):
        with pytest.raises(ValueError, match=f"{config.__name__}.policy_delay=0"):
            config(policy_delay=0)
    # the off-policy states' envs and replay, after their own fields (the order before)
    envs = [f.name for f in dataclasses.fields(EnvsAndReplay)]
    assert [f.name for f in dataclasses.fields(SACState)][-6:] == ["step", "updates", *envs]
    assert [f.name for f in dataclasses.fields(TD3State)][-5:] == ["step", *envs]


def test_pqn_has_the_on_policy_fields_and_not_the_actor_critic_ones():
    on_policy = [f.name for f in dataclasses.fields(OnPolicyConfig)]
    assert [f.name for f in dataclasses.fields(PQNConfig)][:len(on_policy)] == on_policy
    assert not {f.name for f in dataclasses.fields(ActorCriticConfig)} & set(on_policy)
    pqn = PQNConfig()
    assert (pqn.max_grad_norm, pqn.activation, pqn.hidden_sizes) == (10.0, "relu", (120, 84))
    assert not hasattr(pqn, "ent_coef") and PQNConfig.__mro__[1] is OnPolicyConfig
    with pytest.raises(ValueError, match="PQNConfig.update_epochs=0: expected a positive int"):
        PQNConfig(update_epochs=0)
    # the actor-critic part, with A2C's and IMPALA's own defaults; its docs reach --help
    assert values(ActorCriticConfig, PPOConfig()) == {
        "ent_coef": 0.01, "vf_coef": 0.5, "normalize_advantages": True,
        "critic_hidden_sizes": None, "policy": "gaussian"}
    for config in (A2CConfig(), IMPALAConfig()):
        assert (config.ent_coef, config.normalize_advantages) == (0.0, False)
    with pytest.raises(ValueError, match="IMPALAConfig.policy='x'"):
        IMPALAConfig(policy="x")
    assert doc_entries(PPOConfig)["vf_coef"] == "value loss coefficient."


def test_the_hybrids_states_end_with_their_replay_and_search():
    part = [f.name for f in dataclasses.fields(ReplayAndSearch)]
    assert part == ["buffer", "obs_stats", "search"]
    assert [f.name for f in dataclasses.fields(ERLState)][-4:] == ["injected", *part]
    assert [f.name for f in dataclasses.fields(CEMRLState)][-4:] == ["generation", *part]
