"""``jaxtrainer eval RUN --member 2`` on a 4-seed sweep run prints member 2's
numbers: those ``Trainer.evaluate`` reports for that member of the same checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.commands import _cli as cli
from jaxtrainer.commands import fit
from jaxtrainer.recipes import config
from jaxtrainer.recipes._modules import build_module

ROOT = Path(__file__).parents[2]
TINY = ["trainer.strategy=single", "trainer.max_env_steps=null", "trainer.max_steps=2",
        "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
        "trainer.compile_evaluation_ahead=false", "algorithm.num_envs=2",
        "algorithm.num_steps=16", "algorithm.num_minibatches=2", "algorithm.update_epochs=1",
        "algorithm.hidden_sizes=[8]", "algorithm.eval_episodes=4"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_eval_member_2_of_a_4_seed_sweep_prints_what_trainer_evaluate_reports(tmp_path, capsys):
    fit.run([f"trainer.default_root_dir={tmp_path}", *TINY, "sweep.seeds=4"], "ppo")
    run = tmp_path / "version_0"
    said, last = capsys.readouterr().out.strip().splitlines()[-2:]  # what its mean averages
    assert said == "jaxtrainer: eval/episode_return on the next line (mean over 4 members (seeds 0-3))"
    assert re.fullmatch(rf"eval/episode_return=[\d.]+ run_dir={re.escape(str(run))}", last), last
    status = cli.main(["eval", str(run), "--member", "2"])  # what the command runs
    out = capsys.readouterr()
    assert status == 0, out.err
    assert "member 2 of 4 (--member I for another)" in out.out, out.out

    cfg = config.load(run / "config.yaml")
    expected = jt.Trainer(strategy="single", max_steps=2, logger=False,
                          enable_progress_bar=False).evaluate(
        build_module("ppo", cfg), ckpt_path=run / "checkpoints" / "2")
    for name in ("episode_return", "episode_length"):
        line = re.search(rf"^{name}: mean=(\S+) std=(\S+) min=(\S+) max=(\S+)$", out.out, re.M)
        assert line, out.out
        assert line[1] == f"{expected[f'member/2/eval/{name}']:.4f}"  # per member: the mean
    others = {round(expected[f"member/{i}/eval/episode_return"], 4) for i in range(4)}
    assert len(others) > 1  # the members differ: the line is member 2's, not any member's


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_sweep_padded_on_four_devices_evaluates_and_loads_on_one_and_on_four(tmp_path):
    """3 seeds on 4 devices are stored as 4 rows (the last member twice): member 2 of
    that checkpoint evaluates to the same numbers on one device and on the four, and
    its policy loads on one device."""
    from jaxtrainer.commands._eval_run import evaluate_run

    tiny = [o for o in TINY if o != "trainer.strategy=single"]
    fit.run([f"trainer.default_root_dir={tmp_path}", *tiny, "trainer.strategy=pmap",
             "sweep.seeds=3"], "ppo")
    run = tmp_path / "version_0"
    one = evaluate_run(run, member=2)
    four = evaluate_run(run, member=2, strategy="pmap", devices=4)
    assert one["member"] == four["member"] == (2, 3)
    for name in ("episode_return", "episode_length"):
        assert one["metrics"][f"eval/{name}"] == four["metrics"][f"eval/{name}"]
    assert jt.checkpoint.read_meta(run / "checkpoints" / "2")["num_devices"] == 4  # 4 rows
    policies = [jt.load_policy(run, member=i) for i in (1, 2)]
    assert policies[1].global_step == 2
    leaves = [jax.tree.leaves(p.params) for p in policies]
    assert any(not np.array_equal(a, b) for a, b in zip(*leaves, strict=True))  # member 2's own
