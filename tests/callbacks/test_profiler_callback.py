"""ProfilerCallback: a jax.profiler trace of chosen steps in TensorBoard's
profile-plugin layout, and a summary of the fit's wall time by phase (issue 50,
must-show 3)."""

from __future__ import annotations

import re
import time
import types

import pytest
from omegaconf import OmegaConf

import jaxtrainer as jt
from jaxtrainer.callbacks.profiler import PHASES
from jaxtrainer.recipes import _components as components
from tests._support import toys


def test_callbacks_profiler_steps_is_a_config_key():
    cfg = OmegaConf.from_dotlist(["callbacks.profiler.steps=[10,20]", "callbacks.video=false"])
    (built,) = components.trainer_arguments(cfg, {})["callbacks"]
    assert isinstance(built, jt.ProfilerCallback) and built.steps == (10, 20)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_profiler_steps_10_20_writes_a_trace_the_profile_plugin_lists(run_dir, capsys):
    profiler = jt.ProfilerCallback(steps=[10, 20])
    trainer = toys.trainer(run_dir, max_steps=30, log_every_n_steps=2, strategy="single",
                           callbacks=[jt.TensorBoardLogger(), profiler])
    trainer.fit(toys.Regression())
    out = capsys.readouterr().out
    board = run_dir / "version_0" / "tensorboard"
    # what the profile plugin lists: <logdir>/plugins/profile/<run>/<host>.xplane.pb
    runs = [d for d in (board / "plugins" / "profile").iterdir() if list(d.glob("*.xplane.pb"))]
    assert [str(d) for d in runs] == [profiler.trace_dir]
    assert all(f.stat().st_size > 1000 for f in runs[0].glob("*.xplane.pb"))
    assert list(runs[0].glob("*.trace.json.gz"))  # what Perfetto opens
    # log_every_n_steps=2: from step 10 - 2 on one call per log interval, the calls of 9..20
    assert f"trace of steps 9-20 in {runs[0]} " in out
    assert list(board.glob("events.out.tfevents.*"))  # beside the scalars: one --logdir for both
    # and TensorBoard's profile plugin (XProf), given that --logdir, lists the run and its tools
    from tensorboard.plugins import base_plugin
    from tensorboard_plugin_profile import profile_plugin

    flags = types.SimpleNamespace(master_tpu_unsecure_channel="")
    plugin = profile_plugin.ProfilePlugin(base_plugin.TBContext(logdir=str(board), flags=flags))
    assert plugin.is_active()
    (listed,) = plugin.runs_imp()
    assert listed == runs[0].name  # the plugin's name for <logdir>/plugins/profile/<run>
    tools = plugin.run_tools_imp(listed)
    assert {"trace_viewer@", "overview_page", "op_profile"} <= set(tools), tools


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_summary_adds_up_to_the_fits_wall_time(run_dir, capsys):
    profiler = jt.ProfilerCallback()
    trainer = toys.trainer(run_dir, max_steps=40, log_every_n_steps=2, strategy="single",
                           callbacks=[jt.CSVLogger(), jt.ModelCheckpoint(every_n_steps=10),
                                      profiler])
    start = time.perf_counter()
    trainer.fit(toys.Regression())
    wall = time.perf_counter() - start
    summary = profiler.summary
    phases = [summary[p] for p in PHASES]
    assert min(phases) >= 0.0 and sum(phases) == pytest.approx(summary["wall"], rel=1e-6)
    assert sum(phases) == pytest.approx(wall, rel=0.10), (wall, summary)
    assert summary["checkpointing"] > 0.0 and summary["logging"] > 0.0  # 5 saves, 20 rows
    assert summary["startup"] >= summary["compile"] * 0.5 > 0.0  # the training program compiled
    out = capsys.readouterr().out
    for phase in PHASES:
        assert re.search(rf"^  {phase} +\d+\.\d{{3}} s +\d+\.\d %$", out, re.M), phase
    # the Trainer times every callback's hooks (the profiler reads them from its setup on)
    assert {id(cb) for cb in trainer.callbacks} <= {cb for cb, _ in trainer.hook_seconds}


@pytest.mark.parametrize("steps", [[20, 10], [5], [-1, 3], "10,20", [1.5, 3]])
def test_bad_steps_name_the_value_and_the_expected_form(steps):
    with pytest.raises(ValueError, match=re.escape(f"steps={steps!r}: expected [a, b]")):
        jt.ProfilerCallback(steps=steps)


@pytest.mark.timeout(60)
def test_steps_beyond_the_budget_are_said_at_the_start(run_dir, capsys):
    """``callbacks.profiler.steps=[100,200]`` with a 40-step budget wrote no trace and
    said nothing."""
    profiler = jt.ProfilerCallback(steps=[100, 200])
    toys.trainer(run_dir, max_steps=4, strategy="single",
                 callbacks=[jt.CSVLogger(), profiler]).fit(toys.Regression())
    assert ("jaxtrainer: ProfilerCallback: no trace: steps [100, 200] start at or after the end "
            "of training (max_steps=4); choose steps below it") in capsys.readouterr().err
    assert profiler.trace_dir is None
