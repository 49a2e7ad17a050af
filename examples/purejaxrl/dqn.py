"""PureJaxRL's ``purejaxrl/dqn.py`` (DQN with a flashbax replay buffer), ported to jaxtrainer.

Source: ``luchris429/purejaxrl``, ``purejaxrl/dqn.py`` (Apache-2.0), itself a
port of CleanRL's ``dqn_jax.py``; the method is DQN (Mnih et al. 2015, "Human-level
control through deep reinforcement learning"). The algorithm is unchanged: the
Q-network, epsilon-greedy schedule, flashbax flat buffer (``add_batch_size =
NUM_ENVS``, ``BUFFER_BATCH_SIZE`` samples per update), learning start, training
interval, target updates and config keys. The changes, all at the edges:

1. ``make_train(config)`` / ``train(rng)`` became ``DQN(jt.Module)``: env,
   buffer, network and optimizer in ``__init__``; the part of ``train`` before
   the loop (env reset, buffer init with a dummy transition, network and
   optimizer init) is ``init_state(key)``; ``_update_step``'s body is
   ``training_step(state, key)``.
2. ``global_view = True``: the buffer, the counters ``timesteps`` and
   ``n_updates`` and every size stay global; XLA splits the work over the
   devices; no ``pmean``. ``num_envs = NUM_ENVS``: the env states, last
   observations and the buffer's storage (env-major, ``[NUM_ENVS, ...]``) are
   split over devices. ``env_steps_per_step = NUM_ENVS``.
3. The runner state lost its ``rng``: ``(train_state, buffer_state, env_state,
   last_obs, returned)``; the key is ``training_step``'s argument.
4. The env: ``gymnax.make`` + wrappers became ``jaxtrainer.envs.make``; the
   vmapped reset/step are ``env.reset_batch(key, NUM_ENVS)`` and
   ``env.step_batch(key, env_state, action)`` (``reward, done = info.reward,
   info.done``). The dummy transition for ``buffer.init`` comes from one
   ``env.reset`` / ``env.step`` with PureJaxRL's dummy key ``key(0)``, which, as
   there, then also initialises the network; gymnax's ``action_space().sample(rng)`` is
   ``jax.random.randint(rng, (), 0, env.num_actions)``,
   ``action_space(env_params).n`` is ``env.num_actions`` and
   ``observation_space(env_params).shape`` is ``env.observation_shape``.
5. ``jax.tree_map`` (removed from JAX) is ``jax.tree.map``; the buffer's
   functions are used as flashbax makes them (PureJaxRL wrapped them in
   ``jax.jit`` for its own calls outside the compiled loop; inside one compiled
   step that changes nothing).
6. Metrics instead of the wandb callback: ``train/episode_return`` (episodes
   completed this step), the loss (when a learning step ran), and the
   original's own ``returns``, the LogWrapper's last completed return per env
   averaged over the envs, as ``train/returned_episode_returns``: for that the
   state holds ``returned: float32[NUM_ENVS]``, what the LogWrapper kept in its
   env state (zeros, set where an episode ends).
7. The outer ``lax.scan`` and ``jax.jit(jax.vmap(train))`` went to
   ``Trainer(max_env_steps=TOTAL_TIMESTEPS)``; seeds: ``Trainer(seed=...)``.

Run:  python examples/purejaxrl/dqn.py [--strategy pmap] [--seed 0]
"""

from __future__ import annotations

import argparse

import chex
import flashbax as fbx
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

import jaxtrainer as jt
from jaxtrainer import envs

CONFIG = {
    "NUM_ENVS": 10,
    "BUFFER_SIZE": 10000,
    "BUFFER_BATCH_SIZE": 128,
    "TOTAL_TIMESTEPS": 5e5,
    "EPSILON_START": 1.0,
    "EPSILON_FINISH": 0.05,
    "EPSILON_ANNEAL_TIME": 25e4,
    "TARGET_UPDATE_INTERVAL": 500,
    "LR": 2.5e-4,
    "LEARNING_STARTS": 10000,
    "TRAINING_INTERVAL": 10,
    "LR_LINEAR_DECAY": False,
    "GAMMA": 0.99,
    "TAU": 1.0,
    "ENV_NAME": "CartPole-v1",
}
"""PureJaxRL's ``dqn.py`` settings (without its seed and wandb keys)."""


class QNetwork(nn.Module):
    """``x: float32[..., obs_dim]`` to ``q: float32[..., action_dim]`` (120-84 relu MLP)."""

    action_dim: int

    @nn.compact
    def __call__(self, x: jnp.ndarray):
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.action_dim)(x)


@chex.dataclass(frozen=True)
class TimeStep:
    obs: chex.Array
    action: chex.Array
    reward: chex.Array
    done: chex.Array


class CustomTrainState(TrainState):
    target_network_params: flax.core.FrozenDict
    timesteps: int
    n_updates: int


class DQN(jt.Module):
    """PureJaxRL's DQN as a module; ``config`` holds PureJaxRL's keys (global sizes)."""

    global_view = True

    def __init__(self, config: dict | None = None):
        config = dict(CONFIG if config is None else config)
        config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_ENVS"]
        self.config = config
        self.num_envs = config["NUM_ENVS"]
        self.env_steps_per_step = config["NUM_ENVS"]
        self.env = envs.make(config["ENV_NAME"])
        self.buffer = fbx.make_flat_buffer(
            max_length=config["BUFFER_SIZE"], min_length=config["BUFFER_BATCH_SIZE"],
            sample_batch_size=config["BUFFER_BATCH_SIZE"], add_sequences=False,
            add_batch_size=config["NUM_ENVS"])
        self.network = QNetwork(action_dim=self.env.num_actions)

        def linear_schedule(count):
            frac = 1.0 - (count / config["NUM_UPDATES"])
            return config["LR"] * frac

        lr = linear_schedule if config.get("LR_LINEAR_DECAY", False) else config["LR"]
        self.tx = optax.adam(learning_rate=lr)

    def init_state(self, key):
        config, env, buffer, network = self.config, self.env, self.buffer, self.network
        rng = key
        # INIT ENV
        rng, _rng = jax.random.split(rng)
        init_obs, env_state = env.reset_batch(_rng, config["NUM_ENVS"])
        # INIT BUFFER: from one dummy transition. As in PureJaxRL, the dummy key
        # stays ``rng`` for the rest of init: the network's init is the same for every seed
        rng = jax.random.key(0)
        _action = jax.random.randint(rng, (), 0, env.num_actions)
        _, _env_state = env.reset(rng)
        _obs, _, _info = env.step(rng, _env_state, _action)
        _timestep = TimeStep(obs=_obs, action=_action, reward=_info.reward, done=_info.done)
        buffer_state = buffer.init(_timestep)
        # INIT NETWORK AND OPTIMIZER
        rng, _rng = jax.random.split(rng)
        network_params = network.init(_rng, jnp.zeros(env.observation_shape))
        train_state = CustomTrainState.create(
            apply_fn=network.apply, params=network_params,
            target_network_params=jax.tree.map(lambda x: jnp.copy(x), network_params),
            tx=self.tx, timesteps=0, n_updates=0)
        returned = jnp.zeros((config["NUM_ENVS"],))  # the LogWrapper's returned_episode_returns
        return (train_state, buffer_state, env_state, init_obs, returned)

    def eps_greedy_exploration(self, rng, q_vals, t):
        config = self.config
        rng_a, rng_e = jax.random.split(rng, 2)  # random actions; which envs act randomly
        eps = jnp.clip(
            ((config["EPSILON_FINISH"] - config["EPSILON_START"]) / config["EPSILON_ANNEAL_TIME"]) * t
            + config["EPSILON_START"],
            config["EPSILON_FINISH"])
        greedy_actions = jnp.argmax(q_vals, axis=-1)
        return jnp.where(
            jax.random.uniform(rng_e, greedy_actions.shape) < eps,
            jax.random.randint(rng_a, shape=greedy_actions.shape, minval=0, maxval=q_vals.shape[-1]),
            greedy_actions)

    def training_step(self, runner_state, key):
        config, env, buffer, network = self.config, self.env, self.buffer, self.network
        rng = key
        train_state, buffer_state, env_state, last_obs, returned = runner_state

        # STEP THE ENV
        rng, rng_a, rng_s = jax.random.split(rng, 3)
        q_vals = network.apply(train_state.params, last_obs)
        action = self.eps_greedy_exploration(rng_a, q_vals, train_state.timesteps)
        obs, env_state, info = env.step_batch(rng_s, env_state, action)
        reward, done = info.reward, info.done
        train_state = train_state.replace(timesteps=train_state.timesteps + config["NUM_ENVS"])

        # BUFFER UPDATE
        timestep = TimeStep(obs=last_obs, action=action, reward=reward, done=done)
        buffer_state = buffer.add(buffer_state, timestep)

        # NETWORKS UPDATE
        def _learn_phase(train_state, rng):
            learn_batch = buffer.sample(buffer_state, rng).experience
            q_next_target = network.apply(train_state.target_network_params,
                                          learn_batch.second.obs)  # (batch_size, num_actions)
            q_next_target = jnp.max(q_next_target, axis=-1)  # (batch_size,)
            target = (learn_batch.first.reward
                      + (1 - learn_batch.first.done) * config["GAMMA"] * q_next_target)

            def _loss_fn(params):
                q_vals = network.apply(params, learn_batch.first.obs)  # (batch_size, num_actions)
                chosen_action_qvals = jnp.take_along_axis(
                    q_vals, jnp.expand_dims(learn_batch.first.action, axis=-1), axis=-1).squeeze(axis=-1)
                return jnp.mean((chosen_action_qvals - target) ** 2)

            loss, grads = jax.value_and_grad(_loss_fn)(train_state.params)
            train_state = train_state.apply_gradients(grads=grads)
            train_state = train_state.replace(n_updates=train_state.n_updates + 1)
            return train_state, loss

        rng, _rng = jax.random.split(rng)
        is_learn_time = (buffer.can_sample(buffer_state)
                         & (train_state.timesteps > config["LEARNING_STARTS"])
                         & (train_state.timesteps % config["TRAINING_INTERVAL"] == 0))
        train_state, loss = jax.lax.cond(
            is_learn_time,
            lambda train_state, rng: _learn_phase(train_state, rng),
            lambda train_state, rng: (train_state, jnp.array(0.0)),
            train_state, _rng)

        # update target network
        train_state = jax.lax.cond(
            train_state.timesteps % config["TARGET_UPDATE_INTERVAL"] == 0,
            lambda train_state: train_state.replace(target_network_params=optax.incremental_update(
                train_state.params, train_state.target_network_params, config["TAU"])),
            lambda train_state: train_state,
            operand=train_state)

        returned = jnp.where(done, info.episode_return, returned)
        metrics = {"train/episode_return": jt.Mean.of(info.episode_return, mask=done),
                   "train/returned_episode_returns": returned.mean(),
                   "train/loss": jt.Mean.of(loss, mask=is_learn_time)}
        return (train_state, buffer_state, env_state, obs, returned), metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=float, default=CONFIG["TOTAL_TIMESTEPS"])
    args = parser.parse_args()
    module = DQN({**CONFIG, "TOTAL_TIMESTEPS": args.total_timesteps})
    trainer = jt.Trainer(strategy=args.strategy, max_env_steps=int(args.total_timesteps),
                         log_every_n_steps=1000, seed=args.seed, enable_checkpointing=False)
    trainer.fit(module)


if __name__ == "__main__":
    main()
