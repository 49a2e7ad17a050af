"""The key formula the README states, pinned against what the Trainer draws."""

import jax
import numpy as np
import pytest

import jaxtrainer as jt
from jaxtrainer.distributed import keys
from tests._support import toys
from tests._support.modules import Draws


class EvalDraws(Draws):
    def evaluation_step(self, state, key):
        return {"eval/u": jt.Last.of(jax.random.uniform(key))}


def _readme_step_key(seed, step, device):
    """fold_in(fold_in(fold_in(key(seed), 1), s), d): TRAIN stream 1, step s, device d."""
    k = jax.random.fold_in(jax.random.key(seed), 1)
    return jax.random.fold_in(jax.random.fold_in(k, step), device)


def test_step_s_on_device_d_draws_from_the_readme_formula(run_dir):
    t = toys.trainer(run_dir, strategy="pmap", devices=4, max_steps=3, seed=7, callbacks=[])
    t.fit(Draws())
    got = np.asarray(t.state["draws"])  # the last step (s = 2) on each device
    want = [float(jax.random.uniform(_readme_step_key(7, 2, d), (1,))[0]) for d in range(4)]
    np.testing.assert_array_equal(got, np.float32(want))
    assert len(set(want)) == 4
    root = jax.random.key(7)
    for d in range(4):
        k = keys.step_key(keys.stream_key(root, keys.TRAIN_STREAM), 2, d)
        assert (jax.random.key_data(k) == jax.random.key_data(_readme_step_key(7, 2, d))).all()


def test_the_evaluation_key_at_step_t_is_the_same_on_every_device(run_dir):
    t = toys.trainer(run_dir, strategy="pmap", devices=4, max_steps=2, seed=3, callbacks=[])
    t.fit(EvalDraws())
    got = t.evaluate(EvalDraws())["eval/u"]
    eval_key = jax.random.fold_in(jax.random.fold_in(jax.random.key(3), 2), 2)  # EVAL stream, t=2
    assert got == np.float32(jax.random.uniform(eval_key))  # Last: every device drew it


EVALUATIONS = '''
import tempfile
import jaxtrainer as jt
from jaxtrainer.algorithms import NeuroES
from jaxtrainer.algorithms.ppo import PPO, PPOConfig
from jaxtrainer.algorithms.sac import SAC, SACConfig


def evaluations(devices):
    """eval/episode_return of PPO, SAC and NeuroES (seed 5, 8 episodes) on ``devices``."""
    kw = dict(devices=devices, seed=5, default_root_dir=tempfile.mkdtemp(), logger=False,
              enable_checkpointing=False, enable_progress_bar=False)
    out = {}
    for name, module in (
            ("PPO", PPO(PPOConfig(num_envs=4, num_steps=4, hidden_sizes=(8,), eval_episodes=8))),
            ("SAC", SAC(SACConfig(num_envs=4, buffer_size=64, batch_size=8, hidden_sizes=(8,),
                                  eval_episodes=8)))):
        out[name] = jt.Trainer(**kw).evaluate(module)["eval/episode_return"]
    es = NeuroES("CartPole-v1", "Open_ES", hidden_sizes=(2,), eval_episodes=8)
    out["NeuroES"] = jt.PopulationTrainer(4, max_generations=1, **kw).evaluate(es)[
        "eval/episode_return"]
    return out
'''


@pytest.mark.slow
def test_an_evaluation_gives_the_same_episodes_on_1_and_4_devices():
    """The same state (init, seed 5) evaluated on 4 devices here and on 1
    device in a process of its own: the same returns (they differed before:
    PPO 9.5 on 1 device, 10.25 on 4), because episode e draws from
    fold_in(eval key, e) whichever device runs it."""
    scope: dict = {}
    exec(EVALUATIONS, scope)
    four = scope["evaluations"](4)
    out = toys.run_python(EVALUATIONS + "\nprint(repr(evaluations(1)))", devices=1, timeout=240)
    one = eval(out.stdout.strip().splitlines()[-1])
    assert set(one) == {"PPO", "SAC", "NeuroES"}
    for name in one:
        np.testing.assert_allclose(four[name], one[name], rtol=1e-6, err_msg=name)


def _draws(run_dir, module, devices=1, **kw):
    t = toys.trainer(run_dir, strategy="pmap" if devices > 1 else "single", devices=devices,
                     max_steps=1, callbacks=[], logger=False, enable_checkpointing=False, **kw)
    t.fit(module)
    return t, jax.device_get(t.state)


@pytest.mark.parametrize("devices", [1, 4])
def test_every_bit_of_the_seed_reaches_the_keys(run_dir, devices):
    """seed=2**32+7 does not reproduce seed=7, nor seed=-3 seed=2**32-3; a seed in
    [0, 2**32) draws from key(seed) as before."""
    draws = {s: np.asarray(_draws(run_dir / str(s), Draws(), devices, seed=s)[1]["draws"])
             for s in (7, 2**32 + 7, -3, 2**32 - 3)}
    for seed in (7, 2**32 - 3):
        want = [jax.random.uniform(_readme_step_key(seed, 0, d), (1,))[0] for d in range(devices)]
        np.testing.assert_array_equal(draws[seed], np.float32(want))
    assert len({tuple(d.tolist()) for d in draws.values()}) == 4, draws


def test_a_sweeps_seed_list_keeps_every_bit_of_each_seed(run_dir):
    """Members of seeds 7, 2**32+7, 2**63 and -2**63 draw from four different keys,
    seed 7's member as Trainer(seed=7) does."""
    from jaxtrainer.population import Sweep

    seeds = [7, 2**32 + 7, 2**63, -2**63]
    _, state = _draws(run_dir, Sweep(Draws(), seeds=seeds, member_metrics=("u",)))
    got = np.asarray(state.members["draws"])[:, 0]
    assert len(set(got.tolist())) == 4, got
    _, alone = _draws(run_dir / "alone", Draws(), seed=7)
    assert got[0] == np.asarray(alone["draws"])[0]
    # the host's samplers (a search's trials, Optuna) get a seed they accept, 7 kept
    host = [keys.host_seed(s) for s in seeds]
    assert host[0] == 7 and len(set(host)) == 4 and all(0 <= h < 2**32 for h in host)
