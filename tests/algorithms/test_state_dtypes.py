"""The state keeps the dtypes init_state gave it: width changes of one kind are cast
back by the strategy, changes of kind or shape are trace-time errors naming the leaf;
every shipped algorithm and ES adapter runs under jax_enable_x64."""

from __future__ import annotations

import json
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer import distributed as jd
from tests._support import toys

QUIET = dict(enable_progress_bar=False, enable_checkpointing=False, logger=False,
             compile_evaluation_ahead=False)


class Widening(jt.Module):
    """Leaves made float32, int32 and weak-typed by init_state come back from
    training_step as ``float_to`` / ``int_to`` (another width of the same kind)."""

    def __init__(self, float_to=jnp.float16, int_to=jnp.int8):
        self.float_to, self.int_to = float_to, int_to

    def init_state(self, key):
        return {"w": jnp.zeros((2,), jnp.float32),                   # replicated
                "d": jd.axis_index().astype(jnp.float32)[None],     # sharded: [device]
                "n": jnp.zeros((), jnp.int32),
                "s": jnp.asarray(0.0)}                              # weak-typed scalar

    def training_step(self, state, key):
        new = {"w": state["w"].astype(self.float_to) + 1,
               "d": state["d"].astype(self.float_to) + 1,
               "n": state["n"].astype(self.int_to) + 1,
               "s": state["s"] + jnp.asarray(0.5, self.float_to)}
        return new, {"w": jt.Last.of(new["w"][0]), "n": new["n"]}


def check_widening(trainer, steps, weak_dtype=np.float32):
    """``weak_dtype``: the default float (float64 under x64) of the weak scalar."""
    state = jax.device_get(trainer.state)
    assert state["w"].dtype == np.float32 and state["d"].dtype == np.float32
    assert state["n"].dtype == np.int32 and state["s"].dtype == weak_dtype
    np.testing.assert_array_equal(state["w"], [steps, steps])
    np.testing.assert_array_equal(state["d"], np.arange(trainer.num_devices) + steps)
    assert int(state["n"]) == steps and float(state["s"]) == 0.5 * steps
    # one interval of all steps: the last w, the mean n (1, 2, ..., steps)
    assert trainer.callback_metrics["w"] == steps
    assert trainer.callback_metrics["n"] == (steps + 1) / 2


@pytest.mark.parametrize("strategy", ["single", "pmap"])
def test_narrower_leaves_of_the_same_kind_are_cast_back(run_dir, strategy):
    """float32 -> float16, int32 -> int8, a weak float -> float16: the state keeps
    float32 / int32 and the fused loop runs (3 steps in one interval)."""
    trainer = jt.Trainer(strategy=strategy, max_steps=3, log_every_n_steps=3,
                         default_root_dir=run_dir, **QUIET)
    trainer.fit(Widening())
    check_widening(trainer, 3)


class Rekind(jt.Module):
    def __init__(self, change):
        self.change = change

    def init_state(self, key):
        return {"w": jnp.zeros((2,), jnp.float32), "n": jnp.zeros((), jnp.int32)}

    def training_step(self, state, key):
        w, n = state["w"], state["n"]
        if self.change == "float->int":
            w = w.astype(jnp.int32)
        elif self.change == "int->bool":
            n = n > 0
        else:
            w = jnp.concatenate([w, w])
        return {"w": w, "n": n}, {}


@pytest.mark.parametrize("change,message", [
    ("float->int", r"Rekind.training_step returns state leaf \['w'\] as int32 \(signed integer\) "
                   r"but init_state made it float32 \(floating\)"),
    ("int->bool", r"Rekind.training_step returns state leaf \['n'\] as bool \(bool\) but "
                  r"init_state made it int32 \(signed integer\)"),
    ("shape", r"Rekind.training_step returns state leaf \['w'\] as float32\[4\] but init_state "
              r"made it float32\[2\]"),
])
def test_a_change_of_kind_or_shape_is_a_type_error_naming_the_leaf(run_dir, change, message):
    trainer = jt.Trainer(strategy="pmap", max_steps=2, default_root_dir=run_dir, **QUIET)
    with pytest.raises(TypeError, match=message):
        trainer.fit(Rekind(change))


class DriftingES(jt.PopulationModule):
    """``tell`` returns the float32 state leaf as ``to``."""

    def __init__(self, to):
        self.to = to

    def init_state(self, key):
        return {"mean": jnp.zeros((2,), jnp.float32)}

    def ask(self, state, key):
        return state["mean"] + jnp.arange(4.0, dtype=jnp.float32)[:, None], state

    def evaluate(self, member, key):
        return jnp.sum(member), {}

    def tell(self, state, population, fitness):
        return {"mean": (state["mean"] + 1).astype(self.to)}, {}


def test_population_state_keeps_its_dtypes_or_names_ask_and_tell(run_dir):
    trainer = jt.PopulationTrainer(4, strategy="pmap", max_generations=2,
                                   log_every_n_generations=2, default_root_dir=run_dir, **QUIET)
    trainer.fit(DriftingES(jnp.float16))
    mean = jax.device_get(trainer.state["mean"])
    assert mean.dtype == np.float32 and mean.tolist() == [2.0, 2.0]
    trainer = jt.PopulationTrainer(4, strategy="pmap", max_generations=2,
                                   default_root_dir=run_dir, **QUIET)
    with pytest.raises(TypeError, match=r"DriftingES.ask/DriftingES.tell .*state leaf "
                                        r"\['mean'\] as int32 .* float32"):
        trainer.fit(DriftingES(jnp.int32))


X64 = ("PPO", "IMPALA", "Rainbow", "CrossQ", "CMA_ES")
"""The shipped algorithms checked under x64, one per kind of state (the suite's time:
not all of them): on-policy with GAE, V-trace, a replay buffer with n-step,
distributional and prioritised parts, batch renormalisation's running statistics in
twin critics, an evosax strategy's state."""

_X64 = """
import os
os.environ["JAX_ENABLE_X64"] = "1"  # before jax is imported
import json, math, sys, time
import jax, jax.numpy as jnp, numpy as np
assert jax.config.jax_enable_x64
import jaxtrainer as jt
from tests._support.shipped import MODULES, POPULATION, POPULATION_SIZE
from tests.algorithms.test_state_dtypes import Widening, check_widening

Q = dict(enable_progress_bar=False, enable_checkpointing=False, logger=False,
         compile_evaluation_ahead=False, default_root_dir={root!r})
results = {{}}

# float32 -> float64, int32 -> int64, weak float64 -> float64 on 2 devices
t = jt.Trainer(strategy="pmap", max_steps=3, log_every_n_steps=3, **Q)
t.fit(Widening(jnp.float64, jnp.int64))
check_widening(t, 3, weak_dtype=np.float64)
results["Widening"] = "ok"

X64_CHECKED = {X64!r}
for name, make in {{**MODULES, **POPULATION}}.items():
    if name not in X64_CHECKED:
        continue
    try:
        if name in POPULATION:
            t = jt.PopulationTrainer(POPULATION_SIZE, strategy="single", max_generations=2,
                                     log_every_n_generations=1, **Q)
        else:
            t = jt.Trainer(strategy="single", max_steps=2, log_every_n_steps=1, **Q)
        t.fit(make())
        metrics = dict(t.callback_metrics)
        bad = sorted(k for k, v in metrics.items() if not math.isfinite(v))
        results[name] = ("non-finite " + ", ".join(bad)) if bad else (
            "ok" if t.global_step == 2 and len(metrics) > 4 else f"ran {{t.global_step}} steps")
    except Exception as exc:
        results[name] = f"{{type(exc).__name__}}: {{str(exc)[:400]}}"
print("RESULTS " + json.dumps(results))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_shipped_algorithm_runs_under_x64(tmp_path):
    """One interpreter with jax_enable_x64 set before jax loads: the widening toy
    keeps its float32/int32 state (float64/int64 cast back), and one algorithm of each
    code path (:data:`X64`) takes 2 steps with finite metrics."""
    out = toys.run_python(textwrap.dedent(_X64.format(root=str(tmp_path), X64=X64)),
                          devices=2, timeout=240)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULTS ")][-1]
    results = json.loads(line[len("RESULTS "):])
    assert results == {name: "ok" for name in ("Widening", *X64)}
