"""TD3 gradient steps on a population's flat actors from one shared critic:
what :class:`~jaxtrainer.algorithms.CEMRL` improves its RL members with (step 2
of a generation; Pourchot and Sigaud 2019, arXiv:1810.01222, Algorithm 1;
reference code ``apourchot/CEM-RL``, ``es_grad.py``).

``critic_steps`` TD3 critic updates run in one block per RL member, whose
target actions come from that member (the reference trains the critic with
``actor_t`` = the member about to be improved), each followed by a Polyak
update of the target critic; then every member takes ``actor_steps`` steps of
``max E[Q_1(s, pi_theta(s))]`` on the final critic, vmapped, from a fresh Adam
state. Gradients are averaged over devices
(:func:`~jaxtrainer.distributed.averaged_update`), so the critic and the
members stay bitwise equal on every device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrainer.algorithms.replay import Transition
from jaxtrainer.algorithms.target_update import soft_update
from jaxtrainer.distributed._gradient_step import averaged_update


def improve_members(rl_members: jax.Array, critic_state: tuple[Any, Any, optax.OptState],
                    key: jax.Array, *, unravel: Callable[[jax.Array], Any],
                    critic_loss: Callable[..., tuple[jax.Array, dict]],
                    member_loss: Callable[[jax.Array, Any, Transition], jax.Array],
                    sample_critic_batch: Callable[[jax.Array], Transition],
                    sample_member_batches: Callable[[jax.Array], Transition],
                    critic_optimizer: optax.GradientTransformation,
                    actor_optimizer: optax.GradientTransformation, critic_steps: int,
                    actor_steps: int, tau: float,
                    ) -> tuple[jax.Array, tuple[Any, Any, optax.OptState], dict[str, jax.Array]]:
    """Critic blocks, then the members' actor steps (see the module docstring).

    Args:
      rl_members: ``float32[R, D]``, the members' flat parameters (replicated).
      critic_state: ``(critic_params, target_critic_params, critic_opt)``.
      key: this device's key (batches are sampled from this device's share).
      unravel: ``float32[D]`` -> the actor's parameter pytree.
      critic_loss: ``(critic_params, member_params, target_critic_params, batch,
        key) -> (loss, aux)``, TD3's with the member as the target actor.
      member_loss: ``(member_flat, critic_params, batch) -> float32[]``, the
        member's actor loss.
      sample_critic_batch: ``key -> batch`` (leaves ``[B / num_devices, ...]``).
      sample_member_batches: ``key -> batch`` of ``R`` batches at once (leaves
        ``[R * B / num_devices, ...]``, member-major).
      critic_optimizer, actor_optimizer: the optax transformations.
      critic_steps: critic updates (a multiple of ``R``); actor_steps: steps per member.
      tau: the target critic's Polyak rate.

    Returns:
      ``(improved float32[R, D], critic_state, losses)`` with ``losses["critic"]``,
      ``losses["actor"]``: ``float32[]`` means over the updates, averaged over devices.
    """
    num_rl = rl_members.shape[0]
    block = critic_steps // num_rl
    critic_key, actor_key = jax.random.split(key)

    def critic_step(carry, xs):
        critic, target, opt = carry
        k, step_key = xs
        sample_key, noise_key = jax.random.split(step_key)
        batch = sample_critic_batch(sample_key)
        member = unravel(rl_members[k // block])  # block k // block: that member
        critic, opt, loss, _ = averaged_update(critic_loss, critic, opt, critic_optimizer,
                                               member, target, batch, noise_key)
        return (critic, soft_update(target, critic, tau), opt), loss

    carry, critic_losses = jax.lax.scan(
        critic_step, critic_state,
        (jnp.arange(critic_steps), jax.random.split(critic_key, critic_steps)))
    critic = carry[0]

    def members_loss(members, batches):
        losses = jax.vmap(lambda m, b: member_loss(m, critic, b))(members, batches)
        return jnp.sum(losses), {}

    def actor_step(carry, step_key):
        members, opt = carry
        batches = jax.tree.map(  # one draw of R batches: [R, batch / num_devices, ...]
            lambda x: x.reshape((num_rl, -1) + x.shape[1:]), sample_member_batches(step_key))
        members, opt, loss, _ = averaged_update(members_loss, members, opt, actor_optimizer,
                                                batches)
        return (members, opt), loss / num_rl

    (improved, _), actor_losses = jax.lax.scan(
        actor_step, (rl_members, actor_optimizer.init(rl_members)),
        jax.random.split(actor_key, actor_steps))
    losses = {"critic": jnp.mean(critic_losses) if critic_steps else jnp.zeros(()),
              "actor": jnp.mean(actor_losses) if actor_steps else jnp.zeros(())}
    return improved, carry, losses
