"""PureJaxRL's ``purejaxrl/ppo_rnn.py`` (recurrent PPO, a GRU), ported to jaxtrainer.

Source: ``luchris429/purejaxrl``, ``purejaxrl/ppo_rnn.py`` (Apache-2.0); PPO
(Schulman et al. 2017) with GAE, a GRU core (Cho et al. 2014) whose hidden state
is reset where an episode ended, and minibatches of whole env sequences. The
algorithm is unchanged: network, losses, GAE, epochs, the shuffle over envs,
``NUM_MINIBATCHES`` minibatches of ``NUM_ENVS / NUM_MINIBATCHES`` env sequences
each (whatever the device count), the schedule and config keys. The changes,
all at the edges of ``train``:

1. ``make_train(config)`` / ``train(rng)`` became ``PPORNN(jt.Module)``:
   derived sizes, env, network and optimizer in ``__init__``; the part of
   ``train`` before the loop is ``init_state(key)``; ``_update_step``'s body is
   ``training_step(state, key)``.
2. ``global_view = True`` (sizes stay global, XLA splits the work over the
   devices; no ``pmean``); ``num_envs = NUM_ENVS`` (the env states, last
   observations, done flags and GRU hidden states, one row per env, are split
   over devices); ``env_steps_per_step = NUM_ENVS * NUM_STEPS``.
3. The runner state lost its ``rng``: ``(train_state, env_state, last_obs,
   last_done, hstate)``; the key is ``training_step``'s argument. The recurrent
   carries are made as before, ``ScannedRNN.initialize_carry(NUM_ENVS, 128)``
   and ``jnp.zeros((NUM_ENVS,), bool)``: nothing per device.
4. The env: ``gymnax.make`` + wrappers became ``jaxtrainer.envs.make``;
   ``jax.vmap(env.reset)`` is ``env.reset_batch(key, NUM_ENVS)``,
   ``jax.vmap(env.step)`` is ``env.step_batch(key, env_state, action)`` with
   ``reward, done = info.reward, info.done``. ``env.action_space(env_params).n``
   is ``env.num_actions``; ``env.observation_space(env_params).shape`` is
   ``env.observation_shape``.
5. Metrics: ``train/episode_return`` (episodes completed in the rollout) and the
   mean loss instead of ``traj_batch.info`` and the ``DEBUG`` printout.
6. The outer ``lax.scan`` and ``jax.jit(train)`` went to ``Trainer(max_env_steps=...)``.

Run:  python examples/purejaxrl/ppo_rnn.py [--strategy pmap] [--seed 0]
"""

from __future__ import annotations

import argparse
import functools
from typing import Any, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState

import jaxtrainer as jt
from jaxtrainer import envs

CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 5e5,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
}
"""PureJaxRL's ``ppo_rnn.py`` settings (without ``DEBUG``)."""


class ScannedRNN(nn.Module):
    """A GRU scanned over time: ``carry: float32[batch, hidden]``,
    ``x = (ins: float32[time, batch, features], resets: bool[time, batch])``;
    the carry restarts from zeros where ``resets`` is set."""

    @functools.partial(nn.scan, variable_broadcast="params", in_axes=0, out_axes=0,
                       split_rngs={"params": False})
    @nn.compact
    def __call__(self, carry, x):
        ins, resets = x
        carry = jnp.where(resets[:, np.newaxis],
                          self.initialize_carry(ins.shape[0], ins.shape[1]), carry)
        return nn.GRUCell(features=ins.shape[1])(carry, ins)

    @staticmethod
    def initialize_carry(batch_size, hidden_size):
        return jnp.zeros((batch_size, hidden_size))


class ActorCriticRNN(nn.Module):
    """Dense(128)-relu embedding, the GRU, then 128-unit actor and critic heads."""

    action_dim: int

    @nn.compact
    def __call__(self, hidden, x):
        obs, dones = x

        def dense(features, scale):
            return nn.Dense(features, kernel_init=orthogonal(scale), bias_init=constant(0.0))

        embedding = nn.relu(dense(128, np.sqrt(2))(obs))
        hidden, embedding = ScannedRNN()(hidden, (embedding, dones))
        actor = nn.relu(dense(128, 2)(embedding))
        pi = distrax.Categorical(logits=dense(self.action_dim, 0.01)(actor))
        critic = nn.relu(dense(128, 2)(embedding))
        critic = dense(1, 1.0)(critic)
        return hidden, pi, jnp.squeeze(critic, axis=-1)


class Transition(NamedTuple):
    done: jnp.ndarray
    action: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    log_prob: jnp.ndarray
    obs: jnp.ndarray
    info: Any


class PPORNN(jt.Module):
    """PureJaxRL's recurrent PPO as a module; ``config`` holds PureJaxRL's keys (global sizes)."""

    global_view = True

    def __init__(self, config: dict | None = None):
        config = dict(CONFIG if config is None else config)
        config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
        config["MINIBATCH_SIZE"] = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
        self.config = config
        self.num_envs = config["NUM_ENVS"]
        self.env_steps_per_step = config["NUM_ENVS"] * config["NUM_STEPS"]
        self.env = envs.make(config["ENV_NAME"])
        self.network = ActorCriticRNN(self.env.num_actions)

        def linear_schedule(count):
            frac = 1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"])) / config["NUM_UPDATES"]
            return config["LR"] * frac

        lr = linear_schedule if config["ANNEAL_LR"] else config["LR"]
        self.tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
                              optax.adam(learning_rate=lr, eps=1e-5))

    def init_state(self, key):
        config, env, network = self.config, self.env, self.network
        rng = key
        # INIT NETWORK
        rng, _rng = jax.random.split(rng)
        init_x = (jnp.zeros((1, config["NUM_ENVS"], *env.observation_shape)),
                  jnp.zeros((1, config["NUM_ENVS"])))
        init_hstate = ScannedRNN.initialize_carry(config["NUM_ENVS"], 128)
        network_params = network.init(_rng, init_hstate, init_x)
        train_state = TrainState.create(apply_fn=network.apply, params=network_params, tx=self.tx)
        # INIT ENV
        rng, _rng = jax.random.split(rng)
        obsv, env_state = env.reset_batch(_rng, config["NUM_ENVS"])
        init_hstate = ScannedRNN.initialize_carry(config["NUM_ENVS"], 128)
        return (train_state, env_state, obsv, jnp.zeros((config["NUM_ENVS"]), dtype=bool),
                init_hstate)

    def training_step(self, runner_state, key):
        config, env, network = self.config, self.env, self.network
        rng = key

        # COLLECT TRAJECTORIES
        def _env_step(runner_state, unused):
            train_state, env_state, last_obs, last_done, hstate, rng = runner_state
            rng, _rng = jax.random.split(rng)
            # SELECT ACTION
            ac_in = (last_obs[np.newaxis, :], last_done[np.newaxis, :])
            hstate, pi, value = network.apply(train_state.params, hstate, ac_in)
            action = pi.sample(seed=_rng)
            log_prob = pi.log_prob(action)
            value, action, log_prob = value.squeeze(0), action.squeeze(0), log_prob.squeeze(0)
            # STEP ENV
            rng, _rng = jax.random.split(rng)
            obsv, env_state, info = env.step_batch(_rng, env_state, action)
            done = info.done
            transition = Transition(last_done, action, value, info.reward, log_prob, last_obs, info)
            return (train_state, env_state, obsv, done, hstate, rng), transition

        initial_hstate = runner_state[-1]
        runner_state, traj_batch = jax.lax.scan(
            _env_step, (*runner_state, rng), None, config["NUM_STEPS"])

        # CALCULATE ADVANTAGE
        train_state, env_state, last_obs, last_done, hstate, rng = runner_state
        ac_in = (last_obs[np.newaxis, :], last_done[np.newaxis, :])
        _, _, last_val = network.apply(train_state.params, hstate, ac_in)
        last_val = last_val.squeeze(0)

        def _calculate_gae(traj_batch, last_val, last_done):
            def _get_advantages(carry, transition):
                gae, next_value, next_done = carry
                done, value, reward = transition.done, transition.value, transition.reward
                delta = reward + config["GAMMA"] * next_value * (1 - next_done) - value
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - next_done) * gae
                return (gae, value, done), gae

            _, advantages = jax.lax.scan(_get_advantages,
                                         (jnp.zeros_like(last_val), last_val, last_done),
                                         traj_batch, reverse=True, unroll=16)
            return advantages, advantages + traj_batch.value

        advantages, targets = _calculate_gae(traj_batch, last_val, last_done)

        # UPDATE NETWORK
        def _update_epoch(update_state, unused):
            def _update_minbatch(train_state, batch_info):
                init_hstate, traj_batch, advantages, targets = batch_info

                def _loss_fn(params, init_hstate, traj_batch, gae, targets):
                    _, pi, value = network.apply(params, init_hstate[0],
                                                 (traj_batch.obs, traj_batch.done))
                    log_prob = pi.log_prob(traj_batch.action)
                    value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
                        -config["CLIP_EPS"], config["CLIP_EPS"])
                    value_losses = jnp.square(value - targets)
                    value_losses_clipped = jnp.square(value_pred_clipped - targets)
                    value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()
                    ratio = jnp.exp(log_prob - traj_batch.log_prob)
                    gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                    loss_actor1 = ratio * gae
                    loss_actor2 = jnp.clip(ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"]) * gae
                    loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
                    entropy = pi.entropy().mean()
                    total_loss = loss_actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
                    return total_loss, (value_loss, loss_actor, entropy)

                grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                total_loss, grads = grad_fn(train_state.params, init_hstate, traj_batch,
                                            advantages, targets)
                train_state = train_state.apply_gradients(grads=grads)
                return train_state, total_loss

            train_state, init_hstate, traj_batch, advantages, targets, rng = update_state
            rng, _rng = jax.random.split(rng)
            permutation = jax.random.permutation(_rng, config["NUM_ENVS"])
            batch = (init_hstate, traj_batch, advantages, targets)
            shuffled_batch = jax.tree.map(lambda x: jnp.take(x, permutation, axis=1), batch)
            # NUM_MINIBATCHES minibatches of whole env sequences: [minibatch, time, envs, ...]
            minibatches = jax.tree.map(
                lambda x: jnp.swapaxes(
                    jnp.reshape(x, [x.shape[0], config["NUM_MINIBATCHES"], -1] + list(x.shape[2:])),
                    1, 0),
                shuffled_batch)
            train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
            return (train_state, init_hstate, traj_batch, advantages, targets, rng), total_loss

        init_hstate = initial_hstate[None, :]
        update_state = (train_state, init_hstate, traj_batch, advantages, targets, rng)
        update_state, loss_info = jax.lax.scan(_update_epoch, update_state, None, config["UPDATE_EPOCHS"])
        train_state = update_state[0]
        info = traj_batch.info
        metrics = {"train/episode_return": jt.Mean.of(info.episode_return, mask=info.done),
                   "train/loss": loss_info[0].mean()}
        return (train_state, env_state, last_obs, last_done, hstate), metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=float, default=CONFIG["TOTAL_TIMESTEPS"])
    args = parser.parse_args()
    module = PPORNN({**CONFIG, "TOTAL_TIMESTEPS": args.total_timesteps})
    trainer = jt.Trainer(strategy=args.strategy, max_env_steps=int(args.total_timesteps),
                         log_every_n_steps=50, seed=args.seed, enable_checkpointing=False)
    trainer.fit(module)


if __name__ == "__main__":
    main()
