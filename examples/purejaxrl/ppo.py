"""PureJaxRL's ``purejaxrl/ppo.py`` (PPO, discrete actions), ported to jaxtrainer.

Source: ``luchris429/purejaxrl``, ``purejaxrl/ppo.py`` (Apache-2.0); the method is
PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms") with GAE
(Schulman et al. 2016). The algorithm is unchanged: the same network, losses,
GAE, epochs, shuffling, minibatch count and size, learning-rate schedule and
config keys. What the port changed, all at the edges of ``train``:

1. ``make_train(config)`` / ``train(rng)`` became the class ``PPO(jt.Module)``:
   the config's derived sizes (``NUM_UPDATES``, ``MINIBATCH_SIZE``), the env,
   network and optimizer are made in ``__init__``; the part of ``train`` before
   the loop ("INIT NETWORK", "INIT ENV") is ``init_state(key)``; the body of
   ``_update_step`` is ``training_step(state, key)``.
2. ``global_view = True``: the module sees global arrays (``NUM_ENVS`` envs,
   whole minibatches) under every strategy and XLA splits the work over the
   devices, so no size in the update changes and no ``pmean`` is added.
   ``num_envs = NUM_ENVS`` tells the strategy which state leaves hold one row
   per env (split over devices); ``env_steps_per_step = NUM_ENVS * NUM_STEPS``
   lets ``Trainer(max_env_steps=TOTAL_TIMESTEPS)`` count the budget.
3. The runner state lost its ``rng``: the state is ``(train_state, env_state,
   last_obs)`` and the step's key arrives as ``training_step``'s argument
   (``rng = key`` starts the body, which then splits it as before).
4. The env: ``gymnax.make`` + ``FlattenObservationWrapper`` + ``LogWrapper``
   became ``jaxtrainer.envs.make(ENV_NAME)``; ``jax.vmap(env.reset)`` over split
   keys became ``env.reset_batch(key, NUM_ENVS)``; ``jax.vmap(env.step)`` became
   ``env.step_batch(key, env_state, action)`` returning ``(obs, env_state,
   info)``, with ``reward = info.reward`` and ``done = info.done`` (terminated or
   truncated, the done gymnax returns: PureJaxRL's terminal-only bootstrapping).
   gymnax's space queries: ``env.action_space(env_params).n`` is
   ``env.num_actions``, ``env.observation_space(env_params).shape`` is
   ``env.observation_shape``.
5. Metrics: instead of returning ``traj_batch.info`` (and the ``DEBUG``
   callback printing it), the step returns ``train/episode_return``, the mean
   return of the episodes completed in the rollout
   (``jt.Mean.of(info.episode_return, mask=info.done)``), and the mean loss.
6. The outer ``jax.lax.scan(_update_step, ...)`` and ``jax.jit(train)`` went:
   ``Trainer(max_env_steps=TOTAL_TIMESTEPS, strategy=...)`` runs the loop.

Run:  python examples/purejaxrl/ppo.py [--strategy pmap] [--seed 0]
"""

from __future__ import annotations

import argparse
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
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
}
"""PureJaxRL's ``ppo.py`` settings (without ``DEBUG``, which printed returns)."""


class ActorCritic(nn.Module):
    """Separate 2 x 64 actor and critic MLPs: ``obs: float32[..., obs_dim]`` to a
    categorical ``pi`` over ``action_dim`` actions and ``value: float32[...]``."""

    action_dim: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        act = nn.relu if self.activation == "relu" else nn.tanh

        def dense(features, scale):
            return nn.Dense(features, kernel_init=orthogonal(scale), bias_init=constant(0.0))

        actor = act(dense(64, np.sqrt(2))(x))
        actor = act(dense(64, np.sqrt(2))(actor))
        pi = distrax.Categorical(logits=dense(self.action_dim, 0.01)(actor))
        critic = act(dense(64, np.sqrt(2))(x))
        critic = act(dense(64, np.sqrt(2))(critic))
        critic = dense(1, 1.0)(critic)
        return pi, jnp.squeeze(critic, axis=-1)


class Transition(NamedTuple):
    done: jnp.ndarray
    action: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    log_prob: jnp.ndarray
    obs: jnp.ndarray
    info: Any


class PPO(jt.Module):
    """PureJaxRL's PPO as a module; ``config`` holds PureJaxRL's keys (sizes global)."""

    global_view = True

    def __init__(self, config: dict | None = None):
        config = dict(CONFIG if config is None else config)
        config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
        config["MINIBATCH_SIZE"] = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
        self.config = config
        self.num_envs = config["NUM_ENVS"]
        self.env_steps_per_step = config["NUM_ENVS"] * config["NUM_STEPS"]
        self.env = envs.make(config["ENV_NAME"])
        self.network = ActorCritic(self.env.num_actions, activation=config["ACTIVATION"])

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
        network_params = network.init(_rng, jnp.zeros(env.observation_shape))
        train_state = TrainState.create(apply_fn=network.apply, params=network_params, tx=self.tx)
        # INIT ENV
        rng, _rng = jax.random.split(rng)
        obsv, env_state = env.reset_batch(_rng, config["NUM_ENVS"])
        return (train_state, env_state, obsv)

    def training_step(self, runner_state, key):
        config, env, network = self.config, self.env, self.network
        rng = key

        # COLLECT TRAJECTORIES
        def _env_step(runner_state, unused):
            train_state, env_state, last_obs, rng = runner_state
            # SELECT ACTION
            rng, _rng = jax.random.split(rng)
            pi, value = network.apply(train_state.params, last_obs)
            action = pi.sample(seed=_rng)
            log_prob = pi.log_prob(action)
            # STEP ENV
            rng, _rng = jax.random.split(rng)
            obsv, env_state, info = env.step_batch(_rng, env_state, action)
            transition = Transition(info.done, action, value, info.reward, log_prob, last_obs, info)
            return (train_state, env_state, obsv, rng), transition

        train_state, env_state, last_obs = runner_state
        (train_state, env_state, last_obs, rng), traj_batch = jax.lax.scan(
            _env_step, (train_state, env_state, last_obs, rng), None, config["NUM_STEPS"])

        # CALCULATE ADVANTAGE
        _, last_val = network.apply(train_state.params, last_obs)

        def _calculate_gae(traj_batch, last_val):
            def _get_advantages(gae_and_next_value, transition):
                gae, next_value = gae_and_next_value
                done, value, reward = transition.done, transition.value, transition.reward
                delta = reward + config["GAMMA"] * next_value * (1 - done) - value
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - done) * gae
                return (gae, value), gae

            _, advantages = jax.lax.scan(_get_advantages, (jnp.zeros_like(last_val), last_val),
                                         traj_batch, reverse=True, unroll=16)
            return advantages, advantages + traj_batch.value

        advantages, targets = _calculate_gae(traj_batch, last_val)

        # UPDATE NETWORK
        def _update_epoch(update_state, unused):
            def _update_minbatch(train_state, batch_info):
                traj_batch, advantages, targets = batch_info

                def _loss_fn(params, traj_batch, gae, targets):
                    pi, value = network.apply(params, traj_batch.obs)
                    log_prob = pi.log_prob(traj_batch.action)
                    # value loss, clipped around the rollout's values
                    value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
                        -config["CLIP_EPS"], config["CLIP_EPS"])
                    value_losses = jnp.square(value - targets)
                    value_losses_clipped = jnp.square(value_pred_clipped - targets)
                    value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()
                    # clipped surrogate on minibatch-standardised advantages
                    ratio = jnp.exp(log_prob - traj_batch.log_prob)
                    gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                    loss_actor1 = ratio * gae
                    loss_actor2 = jnp.clip(ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"]) * gae
                    loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
                    entropy = pi.entropy().mean()
                    total_loss = loss_actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
                    return total_loss, (value_loss, loss_actor, entropy)

                grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                total_loss, grads = grad_fn(train_state.params, traj_batch, advantages, targets)
                train_state = train_state.apply_gradients(grads=grads)
                return train_state, total_loss

            train_state, traj_batch, advantages, targets, rng = update_state
            rng, _rng = jax.random.split(rng)
            # Batching and Shuffling
            batch_size = config["MINIBATCH_SIZE"] * config["NUM_MINIBATCHES"]
            assert batch_size == config["NUM_STEPS"] * config["NUM_ENVS"], \
                "batch size must be equal to number of steps * number of envs"
            permutation = jax.random.permutation(_rng, batch_size)
            batch = (traj_batch, advantages, targets)
            batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
            shuffled_batch = jax.tree.map(lambda x: jnp.take(x, permutation, axis=0), batch)
            # Mini-batch Updates
            minibatches = jax.tree.map(
                lambda x: jnp.reshape(x, [config["NUM_MINIBATCHES"], -1] + list(x.shape[1:])),
                shuffled_batch)
            train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
            return (train_state, traj_batch, advantages, targets, rng), total_loss

        update_state = (train_state, traj_batch, advantages, targets, rng)
        update_state, loss_info = jax.lax.scan(_update_epoch, update_state, None, config["UPDATE_EPOCHS"])
        train_state = update_state[0]
        info = traj_batch.info
        metrics = {"train/episode_return": jt.Mean.of(info.episode_return, mask=info.done),
                   "train/loss": loss_info[0].mean()}
        return (train_state, env_state, last_obs), metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=float, default=CONFIG["TOTAL_TIMESTEPS"])
    args = parser.parse_args()
    module = PPO({**CONFIG, "TOTAL_TIMESTEPS": args.total_timesteps})
    trainer = jt.Trainer(strategy=args.strategy, max_env_steps=int(args.total_timesteps),
                         log_every_n_steps=50, seed=args.seed, enable_checkpointing=False)
    trainer.fit(module)


if __name__ == "__main__":
    main()
