"""Torsos from config: the default MLP keeps its parameter tree, CNNs train on
MinAtar grids, a user's flax module drives PPO and SAC from the recipe command
line, and bad input is one clear error before anything compiles."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrainer.algorithms import DQN, PPO, SAC
from jaxtrainer.algorithms.torsos import (
    MinAtarCNN,
    NatureCNN,
    NetworkConfig,
    PatchConv,
    features,
    torso_factory,
)
from jaxtrainer.commands import fit
from jaxtrainer.recipes import _modules as modules


def tree(params) -> dict[str, tuple[int, ...]]:
    """``{"params/actor_body/Dense_0/bias": (64,), ...}``."""
    return {"/".join(str(getattr(k, "key", k)) for k in path): tuple(x.shape)
            for path, x in jax.tree_util.tree_leaves_with_path(params)}


def mlp(prefix: str, sizes: list[int]) -> dict[str, tuple[int, ...]]:
    out = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=False)):
        out[f"{prefix}/Dense_{i}/kernel"], out[f"{prefix}/Dense_{i}/bias"] = (a, b), (b,)
    return out


# The parameter trees of the default configs as the code before torsos made them.
PPO_CARTPOLE = {**mlp("params/actor_body", [4, 64, 64]), **mlp("params/critic_body", [4, 64, 64]),
                "params/actor_head/kernel": (64, 2), "params/actor_head/bias": (2,),
                "params/critic_head/kernel": (64, 1), "params/critic_head/bias": (1,)}
DQN_CARTPOLE = mlp("params/MLP_0", [4, 120, 84, 2])
SAC_PENDULUM_ACTOR = {**mlp("params/MLP_0", [3, 256, 256]),
                      "params/mean/kernel": (256, 1), "params/mean/bias": (1,),
                      "params/log_std/kernel": (256, 1), "params/log_std/bias": (1,)}
SAC_PENDULUM_CRITIC = {**mlp("params/q1", [4, 256, 256, 1]), **mlp("params/q2", [4, 256, 256, 1])}


@pytest.mark.timeout(60)
def test_default_mlp_parameter_trees_are_unchanged():
    key = jax.random.key(0)
    assert tree(jax.eval_shape(PPO(env="CartPole-v1").init_state, key).params) == PPO_CARTPOLE
    assert tree(jax.eval_shape(DQN(env="CartPole-v1").init_state, key).params) == DQN_CARTPOLE
    sac = jax.eval_shape(SAC(env="Pendulum-v1").init_state, key)
    assert tree(sac.actor_params) == SAC_PENDULUM_ACTOR
    assert tree(sac.critic_params) == SAC_PENDULUM_CRITIC
    explicit = PPO(env="CartPole-v1", network={"torso": "mlp"})
    assert tree(jax.eval_shape(explicit.init_state, key).params) == PPO_CARTPOLE


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape,kernel,stride", [((10, 10, 4), 3, 1), ((40, 40, 2), 8, 4),
                                                 ((12, 12, 3), 4, 2)])
def test_patch_conv_matches_flax_conv(shape, kernel, stride):
    x = jax.random.normal(jax.random.key(0), (2, *shape))
    conv = nn.Conv(5, (kernel, kernel), (stride, stride), padding="VALID")
    params = jax.jit(conv.init)(jax.random.key(1), x)  # jitted: one program, not one an op
    patch = PatchConv(5, (kernel, kernel), (stride, stride))
    assert tree(jax.eval_shape(patch.init, jax.random.key(1), x)) == tree(params)
    np.testing.assert_allclose(jax.jit(patch.apply)(params, x), jax.jit(conv.apply)(params, x),
                               atol=1e-5)


@pytest.mark.timeout(60)
def test_cnn_layouts_and_leading_axes():
    minatar = jax.eval_shape(MinAtarCNN().init, jax.random.key(0), jnp.zeros((1, 10, 10, 4)))
    assert tree(minatar) == {"params/Conv_0/kernel": (3, 3, 4, 16), "params/Conv_0/bias": (16,)}
    nature = NatureCNN()
    frames = jnp.zeros((1, 84, 84, 4))
    params = jax.eval_shape(nature.init, jax.random.key(0), frames)
    assert [v for k, v in tree(params).items() if k.endswith("kernel")] == [
        (8, 8, 4, 32), (4, 4, 32, 64), (3, 3, 64, 64)]
    out = jax.eval_shape(lambda p: features(nature.bind(p), jnp.zeros((3, 5, 84, 84, 4)), 3),
                         params)
    assert out.shape == (3, 5, 3136) and out.dtype == jnp.float32


@pytest.mark.timeout(60)
def test_channels_first_frames_get_the_network_of_their_channels_last_transpose():
    """``[4, 84, 84]`` (an EnvPool Atari frame stack) is 84x84 pixels of 4
    channels: ``cnn`` picks ``nature_cnn``, and the CNNs read ``[C, H, W]``
    frames as their ``[H, W, C]`` transpose, with the same parameters."""
    from jaxtrainer.envs.gymnasium_env import _image_layout

    assert [_image_layout(s) for s in [(4, 84, 84), (84, 84, 4), (210, 160, 3), (4,)]] == [
        "channels_first", "channels_last", "channels_last", "channels_last"]
    stack = (4, 84, 84)
    for network, env_layout in [(NetworkConfig(torso="cnn"), "channels_first"),
                                (NetworkConfig(torso="nature_cnn"), "channels_first"),
                                (NetworkConfig(torso="cnn", layout="channels_first"), "channels_last")]:
        torso = torso_factory(network, stack, observation_layout=env_layout)()
        assert (type(torso), torso.channels_first) == (NatureCNN, True)
    with pytest.raises(ValueError, match=r"^network.torso='nature_cnn' needs frames of at least "
                       r"36x36; observations have shape \(4, 84, 84\) \(channels_last\): use "
                       r"minatar_cnn, or network.layout=channels_first for \[channels, height, "
                       r"width\] frames$"):
        torso_factory(NetworkConfig(torso="nature_cnn"), stack)
    with pytest.raises(ValueError, match=r"network.layout='chw': choose one of 'channels_last', "
                       r"'channels_first', or null for the env's"):
        NetworkConfig(layout="chw")
    init = jax.eval_shape(NatureCNN(channels_first=True).init, jax.random.key(1),
                          jnp.zeros((1, *stack)))
    assert tree(init) == tree(jax.eval_shape(NatureCNN().init, jax.random.key(1),
                                             jnp.zeros((1, 84, 84, 4))))
    frames = jax.random.uniform(jax.random.key(0), (2, 4, 10, 10))
    last = jnp.moveaxis(frames, 1, -1)
    params = MinAtarCNN().init(jax.random.key(1), last)
    np.testing.assert_array_equal(MinAtarCNN(channels_first=True).apply(params, frames),
                                  MinAtarCNN().apply(params, last))


@pytest.mark.timeout(120)
def test_an_envpool_atari_env_by_name_gets_a_channels_first_nature_cnn():
    """``envpool/Pong-v5`` (its ROM ships with envpool's assets): 4 stacked
    84x84 grey frames, channels first; PPO's ``cnn`` torso is the Nature CNN
    with 4 input channels (shapes only: its training program takes minutes to
    compile on a CPU, see the environments guide)."""
    pytest.importorskip("envpool")
    from jaxtrainer import envs

    env = envs.make("envpool/Pong-v5")
    assert (env.observation_shape, env.observation_layout, env.num_actions) == (
        (4, 84, 84), "channels_first", 6)
    ppo = PPO(env="envpool/Pong-v5", num_envs=2, num_steps=4, hidden_sizes=(8,),
              network={"torso": "cnn"})
    shapes = tree(jax.eval_shape(ppo.init_state, jax.random.key(0)).params)
    assert [v for k, v in shapes.items() if "actor_torso" in k and k.endswith("kernel")] == [
        (8, 8, 4, 32), (4, 4, 32, 64), (3, 3, 64, 64)]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_cnn_torso_trains_two_steps_on_minatar(algorithm):
    if algorithm == "ppo":
        module = PPO(env="Breakout-MinAtar", num_envs=2, num_steps=4, num_minibatches=1,
                     update_epochs=1, hidden_sizes=(16,), anneal_lr=False, network={"torso": "cnn"})
        torso = "actor_torso"
    else:
        module = DQN(env="Breakout-MinAtar", num_envs=4, buffer_size=64, batch_size=8,
                     learning_starts=0, hidden_sizes=(16,), network={"torso": "cnn"})
        torso = "torso"
    state = jax.jit(module.init_state)(jax.random.key(0))
    assert tree(state.params)[f"params/{torso}/Conv_0/kernel"] == (3, 3, 4, 16)
    assert tree(state.params)["params/" + ("actor_body" if algorithm == "ppo" else "MLP_0")
                              + "/Dense_0/kernel"] == (8 * 8 * 16, 16)
    step = jax.jit(module.training_step)
    before = state.params
    for i in range(2):
        state, _ = step(state, jax.random.key(i + 1))
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before, state.params)
    assert changed["params"][torso]["Conv_0"]["kernel"]
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(state.params))


def _recipe_run(monkeypatch, recipe: str, argv: list[str]):
    """Run ``recipe`` in-process with ``argv``; returns ``(metrics, module)``."""
    built = []
    build = modules.build_module
    monkeypatch.setattr(modules, "build_module",
                        lambda name, cfg: built.append(build(name, cfg)) or built[-1])
    return fit.run(argv, recipe=recipe), built[0]


COMMON = ["trainer.max_steps=2", "trainer.enable_progress_bar=false", "trainer.strategy=single",
          "trainer.logger=false", "trainer.enable_checkpointing=false",
          "trainer.compile_evaluation_ahead=false", "algorithm.eval_episodes=2",
          "network.torso.class_path=tests._support.torsos.TinyTorso", "network.torso.init_args.features=5"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("recipe,argv,torsos", [
    ("ppo", ["algorithm.num_steps=16", "algorithm.hidden_sizes=[8]"], ["actor_torso", "critic_torso"]),
    ("sac", ["algorithm.learning_starts=0", "algorithm.batch_size=8", "algorithm.buffer_size=64",
             "algorithm.hidden_sizes=[8]"], ["torso", "q1_torso", "q2_torso"]),
])
def test_own_flax_module_by_class_path_drives_the_algorithm(run_dir, monkeypatch, capsys, recipe,
                                                            argv, torsos):
    result, module = _recipe_run(monkeypatch, recipe,
                                 [f"trainer.default_root_dir={run_dir}", *COMMON, *argv])
    assert result["step"] == 2
    assert module.config.network == NetworkConfig(
        {"class_path": "tests._support.torsos.TinyTorso", "init_args": {"features": 5}})
    state = jax.eval_shape(module.init_state, jax.random.key(0))
    params = tree(state.params if recipe == "ppo" else (state.actor_params, state.critic_params))
    obs_size = 4 if recipe == "ppo" else 3
    for name in torsos:
        found = {k for k, v in params.items() if f"/{name}/tiny/kernel" in k and v == (obs_size, 5)}
        assert found, (name, sorted(params))
    assert "eval/episode_return=" in capsys.readouterr().out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("recipe,override,match", [
    ("ppo", "network.torso=resnet",
     r"^network.torso='resnet': choose one of 'mlp', 'cnn', 'minatar_cnn', 'nature_cnn', or a "
     r"flax module as network.torso.class_path=my_pkg.MyTorso$"),
    ("sac", "network.torso.class_path=no_such_pkg.Torso",
     r"^network.torso.class_path='no_such_pkg.Torso' does not import: No module named "
     r"'no_such_pkg' \(is its package installed, or its directory on PYTHONPATH\?\)$"),
    ("ppo", "network.torso.init_args.width=3",
     r"network.torso: expected the keys class_path and init_args, got init_args"),
    ("dqn", "network.torso=cnn",
     r"^network.torso='cnn' needs image observations \[height, width, channels\]; this "
     r"environment's observations have shape \(4,\): use network.torso=mlp$"),
    ("ppo", "network.core=rnn", r"network.core='rnn': choose one of 'gru', 'lstm', or null"),
    ("sac", "network.core=gru", r"unknown config key 'network.core': network has keys: layout, torso"),
])
def test_bad_network_input_is_one_line_before_anything_compiles(run_dir, recipe, override, match):
    with pytest.raises(ValueError, match=match) as raised:
        fit.run([f"trainer.default_root_dir={run_dir}", override], recipe=recipe)
    assert "\n" not in str(raised.value)
    assert not run_dir.exists()


@pytest.mark.timeout(60)
def test_a_torso_class_that_rejects_its_arguments_is_named():
    with pytest.raises(ValueError, match=r"network.torso.init_args=\{'width': 3\}: "
                                         r"tests._support.torsos.TinyTorso rejects them"):
        NetworkConfig({"class_path": "tests._support.torsos.TinyTorso", "init_args": {"width": 3}})
    with pytest.raises(ValueError, match=r"needs frames of at least 36x36"):
        PPO(env="Breakout-MinAtar", network={"torso": "nature_cnn"})


@pytest.mark.timeout(60)
def test_help_lists_the_network_keys_with_docs(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # the width --help uses when it cannot ask a terminal
    with pytest.raises(SystemExit):
        fit.run(["--help"], recipe="ppo")
    out = capsys.readouterr().out
    assert "network: what the observation goes through before the algorithm's hidden layers" in out
    line = next(line for line in out.splitlines() if line.startswith("  network.torso=mlp"))
    assert "mlp (default; the observation flattened into the hidden layers), cnn" in line
    core = next(line for line in out.splitlines() if line.startswith("  network.core=null"))
    assert "a recurrent core after the torso, for the on-policy algorithms" in core
