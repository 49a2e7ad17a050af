"""A plain-JAX actor-critic (advantage actor-critic, n-step returns) on CartPole-v1.

Written as for one device under ``jax.jit``: a ``lax.scan`` over env steps, a
reverse ``lax.scan`` for the returns, ``jax.grad`` then ``pmean``. The same
module runs under every strategy:

    python examples/actor_critic.py                      # one device
    python examples/actor_critic.py --strategy pmap      # every local device

Method: synchronous advantage actor-critic (Mnih et al. 2016, "Asynchronous
Methods for Deep Reinforcement Learning", A2C variant), n-step returns that
bootstrap from the critic at the rollout's end and at time-limit truncations.
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import jaxtrainer as jt
from jaxtrainer import distributed as jd
from jaxtrainer import envs


class Net(nn.Module):
    """Separate actor and critic MLPs: ``obs: float32[n, obs_dim]`` to
    ``(logits: float32[n, num_actions], value: float32[n])``."""

    num_actions: int

    @nn.compact
    def __call__(self, obs):
        actor = nn.Dense(self.num_actions)(nn.tanh(nn.Dense(64)(nn.tanh(nn.Dense(64)(obs)))))
        critic = nn.Dense(1)(nn.tanh(nn.Dense(64)(nn.tanh(nn.Dense(64)(obs)))))
        return actor, critic[..., 0]


class ActorCritic(jt.Module):
    """``num_envs`` (global) envs, ``rollout`` env steps each per update."""

    def __init__(self, env="CartPole-v1", num_envs=16, rollout=16, gamma=0.99, lr=1e-3,
                 ent_coef=0.01, eval_episodes=16):
        self.env, self.num_envs, self.rollout, self.gamma = envs.make(env), num_envs, rollout, gamma
        self.ent_coef, self.eval_episodes = ent_coef, eval_episodes
        self.net = Net(self.env.num_actions)
        self.opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(lr))
        self.env_steps_per_step = num_envs * rollout

    def init_state(self, key):
        params = self.net.init(key, jnp.zeros((1, *self.env.observation_shape)))
        obs, env = self.env.reset_batch(jd.fold_in_device(key), jd.local_size(self.num_envs))
        return {"params": params, "opt": self.opt.init(params), "obs": obs, "env": env}

    def training_step(self, state, key):
        def env_step(carry, key):
            obs, env, finished_return = carry
            logits, _ = self.net.apply(state["params"], obs)
            action = jax.random.categorical(key, logits)
            next_obs, env, info = self.env.step_batch(jax.random.fold_in(key, 1), env, action)
            finished_return += jnp.sum(jnp.where(info.done, info.episode_return, 0.0))
            return (next_obs, env, finished_return), (obs, action, info)

        (obs, env, finished_return), (obs_t, action_t, info) = jax.lax.scan(
            env_step, (state["obs"], state["env"], jnp.zeros(())),
            jax.random.split(key, self.rollout))

        def loss(params):
            logits, value = self.net.apply(params, obs_t)
            _, last_value = self.net.apply(params, obs)
            _, final_value = self.net.apply(params, info.final_obs)
            final_value = jnp.where(info.terminated, 0.0, jax.lax.stop_gradient(final_value))

            def discount(next_return, t):  # reverse scan: n-step returns
                reward, done, final = t
                ret = reward + self.gamma * jnp.where(done, final, next_return)
                return ret, ret

            _, returns = jax.lax.scan(discount, jax.lax.stop_gradient(last_value),
                                      (info.reward, info.done, final_value), reverse=True)
            advantage = returns - value
            log_prob = jax.nn.log_softmax(logits)
            entropy = -jnp.sum(jnp.exp(log_prob) * log_prob, -1).mean()
            chosen = jnp.take_along_axis(log_prob, action_t[..., None], -1)[..., 0]
            policy_loss = -jnp.mean(chosen * jax.lax.stop_gradient(advantage))
            return policy_loss + 0.5 * jnp.mean(advantage ** 2) - self.ent_coef * entropy

        grads = jd.pmean(jax.grad(loss)(state["params"]))  # the average over devices
        updates, opt = self.opt.update(grads, state["opt"])
        params = optax.apply_updates(state["params"], updates)
        episodes = jnp.sum(info.done)
        return ({"params": params, "opt": opt, "obs": obs, "env": env},
                {"train/episode_return": jt.Mean(finished_return, episodes.astype(jnp.float32))})

    def policy(self, state):
        """Greedy actions: ``act(obs: float32[n, 4], key=None) -> int32[n]``."""
        return lambda obs, key=None: jnp.argmax(self.net.apply(state["params"], obs)[0], -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--max-env-steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    trainer = jt.Trainer(strategy=args.strategy, max_env_steps=args.max_env_steps,
                         log_every_n_steps=100, eval_every_n_steps=500, seed=args.seed)
    module = ActorCritic()

    class Show(jt.Callback):
        def on_evaluation_end(self, trainer, module, metrics):
            print(f"env steps {trainer.env_steps}: greedy {metrics['eval/episode_return']:.1f}")

    trainer.callbacks.append(Show())
    trainer.fit(module)
    print("greedy evaluation:", trainer.evaluate(module)["eval/episode_return"])


if __name__ == "__main__":
    main()
