"""The evaluation program compiles in the background only once training is enqueued,
and a fit that fails before that leaves no thread waiting."""

from __future__ import annotations

import threading
import time

import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.strategies import SingleDeviceStrategy
from jaxtrainer.trainer._fit_loop import FitLoop
from tests._support.toys import Regression, trainer


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


class BrokenEvaluation(Regression):
    """``evaluation_step`` adds arrays of shapes (3,) and (4,) (``shape``), or
    returns an array of 3 values as one metric (``vector``)."""

    def __init__(self, fault: str):
        super().__init__(per_device=False)
        self.fault = fault

    def evaluation_step(self, state, key):
        if self.fault == "shape":
            return {"eval/mse": jnp.sum(state["params"]["w"] + jnp.ones(4))}
        return {"eval/mse": jnp.ones(3)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("devices", [1, 4])
def test_a_broken_evaluation_step_fails_the_fit_before_training(run_dir, devices):
    """Evaluated every 50 of 50 steps (the background compile's default): the fit
    fails before its first training step, naming evaluation_step."""
    t = trainer(run_dir, strategy="pmap" if devices > 1 else "single", devices=devices,
                max_steps=50, log_every_n_steps=5, eval_every_n_steps=50,
                compile_evaluation_ahead="auto")
    with pytest.raises(TypeError, match=r"incompatible shapes.*\(3,\).*\(4,\)") as info:
        t.fit(BrokenEvaluation("shape"))
    assert t.global_step == 0
    assert any("BrokenEvaluation.evaluation_step" in n for n in info.value.__notes__)


@pytest.mark.timeout(120)
def test_an_evaluation_step_returning_a_vector_fails_before_training(run_dir, monkeypatch):
    """A metric of 3 values, with the evaluation only at the end (as the recipes'
    compile_evaluation_ahead=True): the fit fails before training, not after. A
    compile that fails after tracing fails the fit at a log boundary."""
    t = trainer(run_dir, strategy="single", max_steps=50, log_every_n_steps=5,
                compile_evaluation_ahead=True)
    with pytest.raises(ValueError, match=r"evaluation_step metric 'eval/mse'.*shape \(3,\)"):
        t.fit(BrokenEvaluation("vector"))
    assert t.global_step == 0

    def fail(self, *args):
        raise RuntimeError("XLA compile failed")

    class CompileFinishedAtFirstInterval(jt.Callback):
        """Holds the first log interval until the background compile has failed,
        so the test does not depend on which thread a loaded machine runs first."""

        def on_train_steps_end(self, trainer, module, metrics):
            if trainer.global_step == 5:
                trainer.programs.wait()

    monkeypatch.setattr(SingleDeviceStrategy, "compile_eval", fail)
    t = trainer(run_dir / "xla", strategy="single", max_steps=50, log_every_n_steps=5,
                compile_evaluation_ahead=True, callbacks=[CompileFinishedAtFirstInterval()])
    with pytest.raises(RuntimeError, match="XLA compile failed") as info:
        t.fit(Regression(per_device=False))
    assert t.global_step == 5  # the first host boundary after the failure, not the end
    assert any("Regression.evaluation_step" in n for n in info.value.__notes__)
