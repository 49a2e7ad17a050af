"""Population-based training of off-policy agents (their tunable hyperparameters
are traced values in the state: test_sac_td3.py checks SAC's against the
program with constants, bit for bit, test_dqn.py and test_sac_td3.py that other
values need no recompile): PBT over tiny SAC and DQN members on 2 devices
compiles once, copies whole member states and perturbs the copies'
hyperparameters."""

from __future__ import annotations

import contextlib
import logging

import jax
import numpy as np
import pytest

from jaxtrainer.algorithms import DQN, SAC, TD3, DQNConfig, SACConfig, TD3Config
from jaxtrainer.population import PBT
from tests._support import toys
from tests.population.test_pbt import CountCompiles

TINY = dict(num_envs=2, buffer_size=32, batch_size=8, learning_starts=0, gradient_steps=1,
            hidden_sizes=(8,), eval_episodes=2)


@contextlib.contextmanager
def lowered_programs():
    """The Trainer's programs lowered meanwhile, on any thread (the Trainer
    compiles ahead in the background): a list of ``jax_log_compiles`` messages
    ``Compiling jit(body) ...`` (cache hits included)."""
    logger = logging.getLogger("jax._src.interpreters.pxla")
    lowered = []
    handler = logging.Handler()
    handler.emit = lambda record: lowered.append(record.getMessage())
    logger.addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    try:
        yield lowered
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.removeHandler(handler)
        lowered[:] = [m for m in lowered if m.startswith("Compiling jit(body)")]


def _leaves(tree):
    return {jax.tree_util.keystr(p): np.asarray(x) for p, x in
            jax.tree_util.tree_leaves_with_path(toys.leaves(tree))}


def test_tunable_names_follow_the_config():
    assert SAC(SACConfig(**TINY)).TUNABLE == ("policy_lr", "q_lr", "alpha_lr", "gamma", "tau")
    assert "init_alpha" in SAC(SACConfig(**TINY, autotune=False)).TUNABLE
    assert SAC(SACConfig(**TINY, alpha_lr=3e-3)).hyperparam_defaults()["alpha_lr"] == 3e-3
    assert SAC(SACConfig(**TINY)).hyperparam_defaults()["alpha_lr"] == 1e-3  # q_lr
    td3 = TD3(TD3Config(**TINY, lr=1e-3, critic_lr=2e-3)).hyperparam_defaults()
    assert (td3["actor_lr"], td3["critic_lr"]) == (1e-3, 2e-3)
    from jaxtrainer.algorithms.ddpg import DDPG  # no target smoothing: nothing to tune there
    assert "policy_noise" not in DDPG(**TINY).TUNABLE
    with pytest.raises(ValueError, match="alpha_lr"):
        SACConfig(alpha_lr=-1.0)


def pbt_fit(member, hyperparams, fitness, run_dir, steps=4, **pbt):
    """PBT of 2 ``member`` s on 2 devices for ``steps`` steps, exploit and explore
    (perturb only) at the last: ``(trainer, host state, CountCompiles, lowered
    programs)``."""
    module = PBT(member, hyperparams, population_size=2, ready_every_n_steps=steps,
                 fitness_metric=fitness, member_metrics=(fitness,), resample_probability=0.0,
                 **pbt)
    compiles = CountCompiles()
    trainer = toys.trainer(run_dir, strategy="pmap", devices=2, max_steps=steps,
                           log_every_n_steps=steps, callbacks=[compiles], logger=False,
                           enable_checkpointing=False)
    with lowered_programs() as lowered:
        trainer.fit(module)
    return trainer, jax.device_get(trainer.state), compiles, lowered


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sac", "dqn"])
def test_pbt_over_off_policy_members_compiles_once_and_copies_member_states(name, run_dir):
    """2 members on 2 devices, exploit at the last step: the loser's whole state
    (networks, optimizer states, replay buffer, envs, counters) is the winner's
    bit for bit, its hyperparameters the winner's times 0.8 or 1.2."""
    if name == "sac":
        member, space = SAC(SACConfig(**TINY)), {"q_lr": (1e-4, 1e-2), "tau": (1e-3, 0.1)}
        fitness = "entropy"
    else:
        member = DQN(DQNConfig(**{**TINY, "gradient_steps": 1}, target_update_interval=4))
        space, fitness = {"lr": (1e-4, 1e-2), "gamma": (0.9, 0.999)}, "q_mean"
    trainer, state, compiles, lowered = pbt_fit(member, space, fitness, run_dir)
    assert len(lowered) == 2, lowered  # the init program and the training program, once each
    assert compiles.events == []       # nothing compiles once training runs
    assert trainer.global_step == 4
    assert_copied_and_perturbed(state, space, min_leaves=20)


def assert_copied_and_perturbed(state, space, min_leaves):
    """One exploit at the last step of a 2-member PBT: the loser's whole state but
    its hyperparameters is the winner's bit for bit, each hyperparameter of
    ``space`` the winner's times 0.8 or 1.2 (clipped)."""
    assert int(state.exploits) == 1
    loser = int(np.flatnonzero(state.parent != np.arange(2))[0])
    winner = int(state.parent[loser])
    members = _leaves(state.members)
    copied = [k for k in members if not k.startswith(".hyperparams")]
    assert len(copied) >= min_leaves
    for key in copied:
        np.testing.assert_array_equal(members[key][loser], members[key][winner], err_msg=key)
    for hp, (low, high) in space.items():
        new, old = members[f".hyperparams['{hp}']"][[loser, winner]]
        assert low <= new <= high and new != old
        assert any(np.isclose(new, np.clip(np.float32(old) * f, low, high), rtol=1e-6)
                   for f in (0.8, 1.2)), (hp, new, old)
