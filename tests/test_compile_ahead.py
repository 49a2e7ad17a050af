"""The evaluation program compiles in the background only once training is enqueued,
and a fit that fails before that leaves no thread waiting."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.fit_loop import FitLoop
from jaxtrainer.strategies import SingleDeviceStrategy
from tests.toys import Regression, trainer


def _record(monkeypatch, events: list[str]) -> None:
    dispatch, compile_eval = FitLoop.dispatch, SingleDeviceStrategy.compile_eval

    def recorded_dispatch(self, *args, **kwargs):
        call = dispatch(self, *args, **kwargs)
        events.append("dispatch")
        return call

    def recorded_compile_eval(self, *args, **kwargs):
        events.append(f"compile_eval on {threading.current_thread().name}")
        return compile_eval(self, *args, **kwargs)

    monkeypatch.setattr(FitLoop, "dispatch", recorded_dispatch)
    monkeypatch.setattr(SingleDeviceStrategy, "compile_eval", recorded_compile_eval)


def _compile_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("jaxtrainer-compile")]


@pytest.mark.timeout(120)
def test_the_evaluation_compiles_in_the_background_after_the_first_training_call(
        run_dir, monkeypatch):
    events: list[str] = []
    _record(monkeypatch, events)
    t = trainer(run_dir, strategy="single", max_steps=6, eval_every_n_steps=6,
                compile_evaluation_ahead=True)
    t.fit(Regression(per_device=False))
    compiles = [e for e in events if e.startswith("compile_eval")]
    assert compiles == ["compile_eval on jaxtrainer-compile_0"]  # once, in the background
    assert events.index("dispatch") < events.index(compiles[0])
    assert np.isfinite(t.callback_metrics["eval/mse"]) and t.callback_metrics["step"] == 6


class FailAtFitStart(jt.Callback):
    def on_fit_start(self, trainer, module):
        raise RuntimeError("stop before training")


@pytest.mark.timeout(120)
def test_a_fit_failing_before_training_leaves_no_compile_thread_waiting(run_dir, monkeypatch):
    events: list[str] = []
    _record(monkeypatch, events)
    t = trainer(run_dir, strategy="single", max_steps=4, eval_every_n_steps=4,
                compile_evaluation_ahead=True, callbacks=[jt.CSVLogger(), FailAtFitStart()])
    with pytest.raises(RuntimeError, match="stop before training"):
        t.fit(Regression(per_device=False))
    deadline = time.monotonic() + 60  # the training compile may still be finishing
    while _compile_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _compile_threads() == []
    assert events == []  # no training call, and the evaluation was never compiled
    # the Trainer still evaluates (compiling now, in the calling thread)
    result = t.evaluate(Regression(per_device=False))
    assert np.isfinite(result["eval/mse"])
    assert events == ["compile_eval on MainThread"]
