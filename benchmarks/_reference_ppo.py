"""The reference our PPO is measured against: PureJaxRL's single-file PPO.

A from-scratch re-implementation of the computation of ``purejaxrl/ppo.py``
(``luchris429/purejaxrl``), the fused ``jax.jit(lax.scan)`` loop JAX RL users
compare against, kept here so the benchmark needs neither that repository nor
its ``distrax`` dependency. The choices that matter for speed are PureJaxRL's:

* gymnax's ``env.step`` (auto-reset inside) vmapped over ``num_envs``, episode
  returns and lengths tracked in a wrapper state as its ``LogWrapper`` does, and
  every step's episode info returned from the scan (its ``metric``);
* separate 2 x 64 tanh actor and critic MLPs, orthogonal init (``sqrt(2)``,
  0.01 for the policy head, 1.0 for the value head), a categorical policy;
* terminal-only bootstrapping: ``delta = r + gamma * V(s') * (1 - done) - V(s)``
  with ``done`` set on termination *and* on truncation, one value pass over the
  last observation of the rollout;
* GAE in a reverse ``lax.scan`` (``unroll=16``), advantages standardised per
  minibatch, PPO's clipped surrogate, the clipped value loss, an entropy bonus;
* ``update_epochs`` epochs of a permutation of the flattened batch cut into
  ``num_minibatches`` minibatches, global-norm clip 0.5 then Adam (eps 1e-5)
  with the learning rate annealed linearly per update.

:func:`make_train` returns ``train(key) -> (runner_state, metrics)`` for
``num_updates`` updates.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState


class ActorCritic(nn.Module):
    num_actions: int

    @nn.compact
    def __call__(self, x):
        def mlp(x, out, scale):
            for _ in range(2):
                x = nn.tanh(nn.Dense(64, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            return nn.Dense(out, kernel_init=nn.initializers.orthogonal(scale))(x)

        logits = mlp(x, self.num_actions, 0.01)
        value = mlp(x, 1, 1.0)
        return logits, jnp.squeeze(value, -1)


def _log_prob(logits, action):
    logp = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(logp, action[..., None], -1)[..., 0]


def _entropy(logits):
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(logp) * logp, -1)


def make_train(cfg: dict[str, Any]):
    """``cfg``: ``env``, ``num_envs``, ``num_steps``, ``num_updates``, ``update_epochs``,
    ``num_minibatches``, ``lr``, ``gamma``, ``gae_lambda``, ``clip_eps``, ``ent_coef``,
    ``vf_coef``, ``max_grad_norm`` (PureJaxRL's CartPole values by default)."""
    cfg = {"env": "CartPole-v1", "num_envs": 4, "num_steps": 128, "num_updates": 976,
           "update_epochs": 4, "num_minibatches": 4, "lr": 2.5e-4, "gamma": 0.99,
           "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 0.01, "vf_coef": 0.5,
           "max_grad_norm": 0.5, **cfg}
    env, env_params = gymnax.make(cfg["env"])
    n, t = cfg["num_envs"], cfg["num_steps"]
    batch_size = n * t
    network = ActorCritic(env.action_space(env_params).n)

    def schedule(count):
        per_update = cfg["num_minibatches"] * cfg["update_epochs"]
        return cfg["lr"] * (1.0 - (count // per_update) / cfg["num_updates"])

    def env_step(key, log_state, action):
        env_state, ep_return, ep_length = log_state
        # gymnax 1.x reports termination and truncation apart; PureJaxRL's gymnax
        # reported one ``done`` (either), which is what its GAE masks with
        obs, env_state, reward, terminated, truncated, _ = env.step(key, env_state, action,
                                                                   env_params)
        done = jnp.logical_or(terminated, truncated)
        ep_return, ep_length = ep_return + reward, ep_length + 1
        info = {"returned_episode_returns": ep_return, "returned_episode_lengths": ep_length,
                "returned_episode": done}
        keep = 1 - done
        return obs, (env_state, ep_return * keep, ep_length * keep), reward, done, info

    def train(key):
        key, init_key, reset_key = jax.random.split(key, 3)
        params = network.init(init_key, jnp.zeros(env.observation_space(env_params).shape))
        tx = optax.chain(optax.clip_by_global_norm(cfg["max_grad_norm"]),
                         optax.adam(schedule, eps=1e-5))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, n), env_params)
        log_state = (env_state, jnp.zeros(n), jnp.zeros(n, jnp.int32))

        def update(runner, _):
            def rollout_step(runner, _):
                train_state, log_state, obs, key = runner
                key, act_key, step_key = jax.random.split(key, 3)
                logits, value = network.apply(train_state.params, obs)
                action = jax.random.categorical(act_key, logits)
                log_prob = _log_prob(logits, action)
                next_obs, log_state, reward, done, info = jax.vmap(env_step)(
                    jax.random.split(step_key, n), log_state, action)
                transition = (done, action, value, reward, log_prob, obs, info)
                return (train_state, log_state, next_obs, key), transition

            runner, traj = jax.lax.scan(rollout_step, runner, None, t)
            train_state, log_state, last_obs, key = runner
            done, action, value, reward, log_prob, obs, info = traj
            _, last_value = network.apply(train_state.params, last_obs)

            def gae_step(carry, step):
                gae, next_value = carry
                done_t, value_t, reward_t = step
                delta = reward_t + cfg["gamma"] * next_value * (1 - done_t) - value_t
                gae = delta + cfg["gamma"] * cfg["gae_lambda"] * (1 - done_t) * gae
                return (gae, value_t), gae

            _, advantages = jax.lax.scan(gae_step, (jnp.zeros_like(last_value), last_value),
                                         (done, value, reward), reverse=True, unroll=16)
            targets = advantages + value

            def loss_fn(params, mb):
                obs, action, old_value, old_log_prob, adv, target = mb
                logits, value = network.apply(params, obs)
                value_clipped = old_value + jnp.clip(value - old_value, -cfg["clip_eps"],
                                                     cfg["clip_eps"])
                value_loss = 0.5 * jnp.maximum(jnp.square(value - target),
                                               jnp.square(value_clipped - target)).mean()
                ratio = jnp.exp(_log_prob(logits, action) - old_log_prob)
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                surrogate = jnp.minimum(
                    ratio * adv, jnp.clip(ratio, 1 - cfg["clip_eps"], 1 + cfg["clip_eps"]) * adv)
                return (-surrogate.mean() + cfg["vf_coef"] * value_loss
                        - cfg["ent_coef"] * _entropy(logits).mean())

            def epoch(carry, _):
                train_state, key = carry
                key, perm_key = jax.random.split(key)
                perm = jax.random.permutation(perm_key, batch_size)
                batch = (obs, action, value, log_prob, advantages, targets)
                minibatches = jax.tree.map(
                    lambda x: jnp.take(x.reshape((batch_size,) + x.shape[2:]), perm, axis=0)
                    .reshape((cfg["num_minibatches"], -1) + x.shape[2:]), batch)

                def minibatch_step(train_state, mb):
                    loss, grads = jax.value_and_grad(loss_fn)(train_state.params, mb)
                    return train_state.apply_gradients(grads=grads), loss

                train_state, losses = jax.lax.scan(minibatch_step, train_state, minibatches)
                return (train_state, key), losses

            (train_state, key), _ = jax.lax.scan(epoch, (train_state, key), None,
                                                 cfg["update_epochs"])
            return (train_state, log_state, last_obs, key), info

        runner = (train_state, log_state, obs, key)
        return jax.lax.scan(update, runner, None, cfg["num_updates"])

    return train
