"""Schedules that span the run read the Trainer's budget (Module.configure_budget):
PPO's learning rate anneals over max_steps / max_env_steps when total_updates is None."""

from __future__ import annotations

import jax
import pytest

import jaxtrainer as jt
from jaxtrainer import envs
from jaxtrainer.algorithms import A2C, PPO, A2CConfig, PPOConfig
from jaxtrainer.population import PBT
from tests.envs.test_envs import FixedLength

TINY = dict(num_envs=2, num_steps=4, num_minibatches=1, update_epochs=1, hidden_sizes=(4,),
            eval_episodes=2, lr=1e-3)


def tiny_ppo(**overrides) -> PPO:
    return PPO(PPOConfig(**{**TINY, **overrides}), env=envs.GymnaxEnv(FixedLength(length=5),
                                                                     name="FixedLength"))


class Rows(jt.Callback):
    def __init__(self):
        self.rows = []

    def on_train_steps_end(self, trainer, module, metrics):
        self.rows.append(dict(metrics))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_anneals_over_the_trainers_budget(tmp_path):
    # max_env_steps=45 at 8 env steps per update: 5 updates; the rate of update k is
    # lr * (1 - k / 5), so the last one is lr / 5 (it was stuck at the default
    # total_updates=1000's 0.9960 * lr before the budget reached the module).
    rows = Rows()
    ppo = tiny_ppo()
    trainer = jt.Trainer(strategy="single", max_env_steps=45, log_every_n_steps=1, seed=0,
                         callbacks=[rows], enable_progress_bar=False, enable_checkpointing=False,
                         compile_evaluation_ahead=False,
                         default_root_dir=tmp_path)
    trainer.fit(ppo)
    assert trainer.max_steps == 5 and ppo.total_updates == 5
    assert [r["step"] for r in rows.rows] == [1, 2, 3, 4, 5]
    assert [r["lr"] for r in rows.rows] == pytest.approx([1e-3 * (1 - k / 5) for k in range(5)])
    hparams = (tmp_path / "version_0" / "hparams.csv").read_text().splitlines()
    assert "module/total_updates,5" in hparams


def test_an_explicit_total_updates_wins_and_pbt_passes_the_budget_on():
    ppo = tiny_ppo(total_updates=1000)
    ppo.configure_budget(5)
    assert ppo.total_updates == 1000 and ppo.hparams()["total_updates"] == 1000
    pbt = PBT(tiny_ppo(), population_size=2, hyperparams={"lr": (1e-4, 1e-2)})
    pbt.configure_budget(7)
    assert pbt.module.total_updates == 7 and pbt.module.hparams()["total_updates"] == 7
    a2c = A2C(A2CConfig(num_envs=2, num_steps=4, hidden_sizes=(4,), eval_episodes=2,
                        anneal_lr=True), env=envs.GymnaxEnv(FixedLength(length=5), name="F"))
    assert a2c.total_updates is None
    a2c.configure_budget(9)
    assert a2c.total_updates == 9


def test_annealing_without_a_budget_says_what_to_do():
    ppo = tiny_ppo()
    state = jax.eval_shape(ppo.init_state, jax.random.key(0))
    with pytest.raises(ValueError, match="total_updates=None needs the run's budget"):
        jax.eval_shape(ppo.training_step, state, jax.random.key(1))
    fixed = tiny_ppo(anneal_lr=False)  # no schedule: no budget needed
    jax.eval_shape(fixed.training_step, state, jax.random.key(1))
    with pytest.raises(ValueError, match=r"PPOConfig.total_updates=0"):
        PPOConfig(total_updates=0)
