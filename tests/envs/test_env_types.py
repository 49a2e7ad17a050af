"""Every env family's reset returns the types its step returns: a jitted step
called with ``reset_batch``'s state and then with its own output compiles once
(simulators build weakly typed leaves, ``jnp.array(0)``; Craftax's map and
player stats, gymnax's Pendulum ``last_u``, XLand-MiniGrid's ``step_num``, ...)."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import pytest

from jaxtrainer import envs

FAMILIES = {  # name -> the package the family needs (None: a core dependency)
    "Pendulum-v1": None,  # gymnax
    "CartPole-v1-NoVelocity": None,  # our observation mask over gymnax
    "brax/inverted_pendulum": "brax",
    "playground/CartpoleBalance": "mujoco_playground",
    "craftax/Craftax-Classic-Symbolic-v1": "craftax",
    "navix/Navix-Empty-5x5-v0": "navix",
    "xminigrid/MiniGrid-Empty-5x5": "xminigrid",
    "jumanji/Snake-v1": "jumanji",
    "jaxmarl/MPE_simple_spread_v3": "jaxmarl",  # agents as envs
    "gymnasium/CartPole-v1": "gymnasium",
    "envpool/CartPole-v1": "envpool",
    # kinetix/... is not installable with jax 0.10 (kinetix-env requires jax<=0.9)
}
NUM = 6  # envs (a multiple of the 3 agents of a simple_spread game)


def _actions(env, n):
    if not env.discrete:
        return jnp.zeros((n, env.action_size), jnp.float32)
    shape = (n, len(env.action_nvec)) if env.action_nvec else (n,)
    return jnp.zeros(shape, jnp.int32)


def _weak(tree):
    return [
        jax.tree_util.keystr(p)
        for p, x in jax.tree_util.tree_leaves_with_path(tree)
        if jax.typeof(x).weak_type
    ]


def _compiles_once(env, state, actions, caplog, batched=True):
    """Two calls of ``jit(env.step_batch)`` (``env.step``: ``batched=False``), the
    second with the first's state: the number of programs compiled
    (``jax.log_compiles``), and the states."""
    name = "step_batch" if batched else "step"
    step = jax.jit(getattr(env, name))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles():
        _, first, _ = step(jax.random.key(1), state, actions)
        _, second, _ = step(jax.random.key(2), first, actions)
    compiled = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith(f"Compiling jit({name})")
    ]
    return len(compiled), first, second


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_reset_batch_then_a_jitted_step_compiles_once(name, caplog):
    if FAMILIES[name] is not None:
        pytest.importorskip(FAMILIES[name])
    env = envs.make(name)
    obs, state = env.reset_batch(jax.random.key(0), NUM)
    assert _weak((obs, state)) == []
    compiled, first, second = _compiles_once(env, state, _actions(env, NUM), caplog)
    assert compiled == 1
    assert _weak((first, second)) == []
    assert jax.tree.structure(first) == jax.tree.structure(state)
    assert [jax.typeof(x) for x in jax.tree.leaves(first)] == [
        jax.typeof(x) for x in jax.tree.leaves(state)
    ]


@pytest.mark.slow
def test_a_multi_agent_games_reset_then_a_jitted_step_compiles_once(caplog):
    pytest.importorskip("jaxmarl")
    env = envs.make_multi_agent("jaxmarl/MPE_simple_spread_v3")
    obs, state = env.reset_batch(jax.random.key(0), 2)
    assert _weak((obs, state)) == []
    actions = jnp.zeros((2, env.num_agents), jnp.int32)
    compiled, first, second = _compiles_once(env, state, actions, caplog)
    assert compiled == 1
    assert _weak((first, second)) == []


def test_strong_types_keeps_dtypes_and_values():
    tree = {
        "weak": jnp.array(3),
        "strong": jnp.arange(2, dtype=jnp.uint8),
        "py": 1.5,
        "key": jax.random.key(0),
    }
    out = envs.base.strong_types(tree)
    assert _weak(out) == [] and _weak(tree) == ["['py']", "['weak']"]
    assert [(jax.typeof(x).dtype, jax.typeof(x).weak_type) for x in jax.tree.leaves(out)] == [
        (out["key"].dtype, False),
        (jnp.dtype(jnp.float32), False),
        (jnp.dtype(jnp.uint8), False),
        (jnp.dtype(jnp.int32), False),
    ]  # leaves sorted by key
    assert (float(out["py"]), int(out["weak"])) == (1.5, 3) and out["key"] is tree["key"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Pendulum-v1", "playground/CartpoleBalance"])
def test_reset_then_a_jitted_unbatched_step_compiles_once(name, caplog):
    """One env: a reset outside a trace leaves its leaves committed alike (MuJoCo
    Playground's reset run op by op committed some, its own jitted calls, and not
    others; brax and Playground envs run it as one program)."""
    if FAMILIES[name] is not None:
        pytest.importorskip(FAMILIES[name])
    env = envs.make(name)
    obs, state = env.reset(jax.random.key(0))
    assert _weak((obs, state)) == []
    assert len({x.committed for x in jax.tree.leaves((obs, state))}) == 1
    compiled, first, _ = _compiles_once(env, state, _actions(env, 1)[0], caplog, batched=False)
    assert compiled == 1


@pytest.mark.parametrize("batched", [False, True])
def test_a_brax_reset_outside_a_trace_is_one_compiled_program(batched, caplog):
    """Called eagerly (a notebook), a brax env's reset compiles one program, not
    one per op of the simulator's reset (MJX's forward pass: hundreds), and a
    second reset with another key compiles nothing."""
    pytest.importorskip("brax")
    env = envs.make("brax/fast")

    def reset(seed):
        key = jax.random.key(seed)
        return env.reset_batch(key, NUM) if batched else env.reset(key)

    compiles = []
    for seed in (0, 1):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles():
            obs, state = reset(seed)
        compiles.append([r.getMessage() for r in caplog.records
                         if r.getMessage().startswith("Compiling ")])
    assert len(compiles[0]) == 1 and compiles[1] == [], compiles
    assert obs.shape == ((NUM,) if batched else ()) + tuple(env.observation_shape)
    assert _weak((obs, state)) == []
