"""A researcher's own algorithm in plain JAX, as for one device under jax.jit,
runs unchanged under every strategy: no varying-axis casts in module code, and
``pmean(jax.grad(...))`` is the average of the devices' gradients (as under
``jax.pmap``)."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxtrainer as jt
from jaxtrainer import distributed as jd
from tests._support._xla import xla_flags

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from actor_critic import ActorCritic  # noqa: E402

AC_SMALL = dict(num_envs=16, rollout=16)
"""The example module as shipped (its defaults): small enough for a test budget."""
QUIET = dict(enable_progress_bar=False, log_every_n_steps=50)


class PerDeviceLoss(jt.Module):
    """Device ``d``'s loss is ``(d + 1) * w``; one SGD step of learning rate 1."""

    def init_state(self, key):
        return {"w": jnp.zeros(())}

    def training_step(self, state, key):
        grads = jax.grad(lambda w: (jd.axis_index() + 1) * w)(state["w"])
        grads = jd.pmean(grads)
        return {"w": state["w"] - 1.0 * grads}, {"grad": grads}


@pytest.mark.parametrize("strategy", ["pmap", "shard_map"])
def test_pmean_of_per_device_gradients_is_their_average(strategy, run_dir):
    trainer = jt.Trainer(strategy=strategy, devices=4, max_steps=1, default_root_dir=run_dir,
                         **QUIET)
    trainer.fit(PerDeviceLoss())
    assert float(trainer.state["w"]) == -2.5  # the mean of 1, 2, 3, 4; not their sum, -10


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy,devices", [("single", 1), ("pmap", 4), ("shard_map", 4)])
def test_plain_actor_critic_learns_cartpole_under_every_strategy(strategy, devices, run_dir):
    """The README's plain-JAX module (env state and Python zeros in scan carries,
    a reverse scan, jax.grad then pmean), with no varying-axis casts anywhere."""
    module = ActorCritic(**AC_SMALL)
    trainer = jt.Trainer(strategy=strategy, devices=devices, max_env_steps=60_000,
                         default_root_dir=run_dir, **QUIET)
    before = trainer.evaluate(module)["eval/episode_return"]
    trainer.fit(module)
    after = trainer.evaluate(module)["eval/episode_return"]
    assert before < 50 and after >= 150, (before, after)
    # the env states are per device, the parameters replicated and equal
    assert trainer.state["env"].episode_length.shape == (16,)
    for leaf in jax.tree.leaves(trainer.state["params"]):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert all(np.array_equal(shards[0], s) for s in shards)


def test_state_layout_follows_the_one_line_rule():
    """Per device: built from the device's key or sized with local_size (the
    env's step counters, zeros, too); replicated: everything else."""
    strategy = jt.strategies.PmapStrategy(devices=4)
    layout = strategy.state_layout(ActorCritic(**AC_SMALL))
    sharded = {jax.tree_util.keystr(p): lay.sharded for p, lay in
               jax.tree_util.tree_leaves_with_path(layout, is_leaf=jt.strategies.layout.is_layout)}
    assert all(v for k, v in sharded.items() if k.startswith(("['obs']", "['env']")))
    assert not any(v for k, v in sharded.items() if k.startswith(("['params']", "['opt']")))
    assert sharded["['env'].env_state.time"]  # int32 zeros: sharded because sized by local_size


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_plain_modules_under_multi_node_two_processes_of_two_devices(tmp_path):
    worker = str(Path(__file__).parents[1] / "_support" / "own_algorithm_worker.py")
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("JAX_", "JAXTRAINER_"))}
    env["XLA_FLAGS"] = xla_flags(2)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = __import__("os").pathsep.join([str(Path(worker).parent), root])
    proc = subprocess.run([sys.executable, "-m", "jaxtrainer.commands._cli", "launch", "--nproc-per-node",
                           "2", "--timeout", "30", "--grace", "3", worker, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["devices"] == 4 and result["w"] == -2.5
    assert result["greedy"] >= 150, result


@pytest.mark.default_emitters
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_eval_command_and_load_policy_work_on_a_run_started_from_python(tmp_path):
    """Module.policy is the whole contract: the run records how to rebuild the
    module (module.yaml), `jaxtrainer eval RUN` evaluates it and load_policy
    acts with it, as for a recipe's run."""
    module = ActorCritic(num_envs=8, rollout=16, eval_episodes=8)
    trainer = jt.Trainer(strategy="single", max_env_steps=40_960, default_root_dir=tmp_path,
                         **QUIET)
    trainer.fit(module)
    run = Path(trainer.log_dir)
    assert (run / "module.yaml").read_text().splitlines()[0] == "class_path: actor_critic.ActorCritic"
    expected = trainer.evaluate(module)["eval/episode_return"]
    proc = subprocess.run([sys.executable, "-m", "jaxtrainer.commands._cli", "eval", str(run)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={**__import__("os").environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "episodes: 8 completed of 8" in proc.stdout, proc.stdout
    mean = float(proc.stdout.split("episode_return: mean=")[1].split()[0])
    assert mean == pytest.approx(expected, abs=1e-3)

    from jaxtrainer.commands._eval_cli import evaluate_run
    assert evaluate_run(run, episodes=4)["completed"] == 4  # --episodes: the constructor's

    act = jt.load_policy(run)
    obs, env_state = module.env.reset(jax.random.key(3))
    action = act(obs)
    assert action.shape == () and action.dtype == jnp.int32
    batch = jnp.stack([obs, obs])
    np.testing.assert_array_equal(act(batch), module.policy(jax.device_get(trainer.state))(batch))


def test_the_readme_shows_the_example_module_as_it_is():
    """The README's "Writing an RL module" code is examples/actor_critic.py's, which the
    tests above train: users run what the documents say."""
    root = Path(__file__).resolve().parents[2]
    source = (root / "examples" / "actor_critic.py").read_text()
    module = source[source.index("class Net(nn.Module):"):source.index("def main()")].rstrip()
    readme = (root / "README.md").read_text()
    section = readme[readme.index("## Writing an RL module"):readme.index("## Porting PureJaxRL")]
    assert module in section


def test_a_train_state_whose_optimizer_is_made_in_init_state(run_dir):
    """As PureJaxRL builds it: flax's TrainState with its optax optimizer made inside
    init_state (a new object, static metadata, in each trace) beside env states sized
    with local_size; the layout still follows the rule."""
    from flax.training.train_state import TrainState

    env = jt.envs.make("CartPole-v1")

    class Port(jt.Module):
        def init_state(self, key):
            params = {"w": jnp.zeros((4, 2))}
            train_state = TrainState.create(apply_fn=None, params=params,
                                            tx=optax.adam(1e-3))
            obs, env_state = env.reset_batch(jd.fold_in_device(key), jd.local_size(8))
            return {"train_state": train_state, "obs": obs, "env_state": env_state}

        def training_step(self, state, key):
            logits = state["obs"] @ state["train_state"].params["w"]
            action = jax.random.categorical(key, logits)
            obs, env_state, _ = env.step_batch(key, state["env_state"], action)
            grads = jd.pmean(jax.grad(lambda p: jnp.mean(state["obs"] @ p["w"]))(
                state["train_state"].params))
            return {"train_state": state["train_state"].apply_gradients(grads=grads),
                    "obs": obs, "env_state": env_state}, {}

    for strategy in ("single", "pmap"):
        trainer = jt.Trainer(strategy=strategy, max_steps=2, default_root_dir=run_dir, **QUIET)
        trainer.fit(Port())
        assert trainer.state["env_state"].episode_length.shape == (8,)


def test_evaluate_with_another_instance_of_a_module_keeping_its_optimizer_in_the_state(run_dir):
    """A flax TrainState made in init_state holds optax functions as static metadata,
    new objects in every instance: evaluating a fresh instance after fit still works."""
    from flax.training.train_state import TrainState

    env = jt.envs.make("CartPole-v1")

    class Greedy(jt.Module):
        def __init__(self):
            self.env = env

        def init_state(self, key):
            params = {"w": jax.random.normal(key, (4, 2))}
            return {"ts": TrainState.create(apply_fn=None, params=params, tx=optax.sgd(0.1))}

        def training_step(self, state, key):
            grads = jax.tree.map(jnp.zeros_like, state["ts"].params)
            return {"ts": state["ts"].apply_gradients(grads=grads)}, {}

        def policy(self, state):
            return lambda obs, key=None: jnp.argmax(obs @ state["ts"].params["w"], -1)

    trainer = jt.Trainer(strategy="single", max_steps=2, default_root_dir=run_dir, **QUIET)
    first = Greedy()
    trainer.fit(first)
    expected = trainer.evaluate(first)["eval/episode_return"]
    assert trainer.evaluate(Greedy())["eval/episode_return"] == expected


UNGUARDED_SCRIPT = '''
from pathlib import Path

import jax.numpy as jnp

import jaxtrainer as jt


class Counter(jt.Module):
    def __init__(self, step: float = 1.0):
        self.step = step

    def init_state(self, key):
        return {"t": jnp.zeros(())}

    def training_step(self, state, key):
        return {"t": state["t"] + self.step}, {"t": state["t"]}


root = Path(__file__).parent
with open(root / "trainings.txt", "a") as f:
    f.write("trained\\n")
trainer = jt.Trainer(strategy="single", max_steps=2, default_root_dir=root, logger=False,
                     enable_progress_bar=False)
trainer.fit(Counter(step=2.0))                  # at top level: no __main__ guard
'''


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_recorded_script_without_a_main_guard_is_not_trained_again(tmp_path):
    """Rebuilding a module whose class lives in a script (recorded as ``__main__``)
    runs the script only up to its first Trainer call: the class is defined, the
    training below it does not run again, and no new run directory appears."""
    from jaxtrainer.rundir import module_record

    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "version_0"
    assert (run / "module.yaml").read_text().splitlines()[0] == "class_path: __main__.Counter"
    rebuilt = module_record.build(run)
    assert type(rebuilt).__name__ == "Counter" and rebuilt.step == 2.0
    assert (tmp_path / "trainings.txt").read_text() == "trained\ntrained\n"  # ran to fit, once
    assert sorted(p.name for p in tmp_path.glob("version_*")) == ["version_0"]
