"""``callbacks.lr_monitor=true`` on a PBT recipe run: every member's learning
rate and the population's mean/min/max reach metrics.csv (issue 50, must-show 4)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from jaxtrainer.commands import fit

TINY_PBT = ["trainer.strategy=single", "trainer.max_steps=2", "trainer.log_every_n_steps=1",
            "trainer.enable_progress_bar=false", "trainer.compile_evaluation_ahead=false",
            "algorithm.num_envs=2", "algorithm.num_steps=8", "algorithm.num_minibatches=2",
            "algorithm.update_epochs=1", "algorithm.hidden_sizes=[8]", "algorithm.eval_episodes=2",
            "pbt.population_size=3", "pbt.ready_every_n_steps=2", "callbacks.checkpoint=false"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pbt_run_with_lr_monitor_logs_every_members_learning_rate(tmp_path):
    fit.run([f"trainer.default_root_dir={tmp_path}", *TINY_PBT, "callbacks.lr_monitor=true"],
            "pbt_ppo")
    rows = list(csv.DictReader(open(tmp_path / "version_0" / "metrics.csv")))
    logged = [r for r in rows if r.get("lr/learning_rate")]
    assert [int(r["step"]) for r in logged] == [1, 2]
    for row in logged:
        lrs = np.array([float(row[f"lr/member/{i}/learning_rate"]) for i in range(3)])
        assert ((1e-4 <= lrs) & (lrs <= 1e-2)).all()  # pbt.hyperparams.lr's bounds
        assert float(row["lr/learning_rate"]) == pytest.approx(lrs.mean(), rel=1e-6)
        assert (float(row["lr/learning_rate_min"]), float(row["lr/learning_rate_max"])) == \
            pytest.approx((lrs.min(), lrs.max()), rel=1e-6)
    first = [float(logged[0][f"lr/member/{i}/learning_rate"]) for i in range(3)]
    assert len(set(first)) == 3  # before the first exploit (step 2) each member has its own draw
    # ... the one PBT trained it with (member/<i>/lr); after an exploit the monitor shows the
    # copied optimizer state, PBT's metric the value the interval trained with
    np.testing.assert_allclose(first, [float(logged[0][f"member/{i}/lr"]) for i in range(3)],
                               rtol=1e-6)
    assert "lr/member/3/learning_rate" not in rows[0]  # only the 3 members
