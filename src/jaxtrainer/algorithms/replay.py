"""A uniform replay buffer that lives inside the jitted training step.

Storage and sampling are flashbax's trajectory buffer (``instadeepai/flashbax``
0.1.3, ``flashbax/buffers/trajectory_buffer.py``) used as an item buffer: rows are
the environments, the time axis is a ring of ``capacity / num_envs`` slots, and
items are sequences of length 1. flashbax's functions are pure, so they run
unchanged inside ``jax.shard_map(check_vma=True)``; this module adds the device
split and the layout the strategies need:

* sizes are **global**: each device stores the transitions of its own
  ``num_envs / num_devices`` envs (rows), every row keeps the same
  ``capacity / num_envs`` most recent transitions, and each device samples
  ``batch_size / num_devices`` of the global batch from its own rows;
* the stored transitions are per-device (sharded on the env axis, so the
  global buffer is ``[num_envs, capacity / num_envs, ...]`` whatever the device
  count and checkpoints restore on any device count), while the write index and
  the full flag are identical on every device (replicated);
* sampling is uniform over the slots written so far (rows and times), never an
  unwritten one, and covers the whole buffer once it is full;
* or, with ``priority_exponent``, prioritised (Schaul et al. 2016, "Prioritized
  Experience Replay", arXiv:1511.05952, the proportional variant): flashbax's
  prioritised trajectory buffer (``prioritised_trajectory_buffer.py``, a sum
  tree per device) samples an item with probability ``p_i^alpha / sum_k
  p_k^alpha``; new items get the largest priority recorded so far, and
  :meth:`ReplayBuffer.set_priorities` sets the sampled ones' after an update.
  Each device's sum tree covers its own rows, so a device samples its share of
  the batch by its own transitions' priorities.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.distributed import local_size, per_device

if TYPE_CHECKING:
    from jaxtrainer import envs
    from jaxtrainer.algorithms.normalization import RunningStatistics


@dataclasses.dataclass(frozen=True)
class EnvsAndReplay:
    """The envs and the replay of an off-policy module's state, composed (after
    its own fields) into SAC's, TD3's and CrossQ's states
    (:func:`~jaxtrainer.algorithms._config_parts.composes`) and written by
    :meth:`~jaxtrainer.algorithms.offpolicy.OffPolicyModule.training_step`.

    Attributes:
      env_state, obs: this device's envs (sharded; ``obs`` raw).
      buffer: the replay buffer of raw transitions (:class:`ReplayBuffer`'s state:
        stored transitions sharded, write index replicated).
      obs_stats: :class:`~jaxtrainer.algorithms.normalization.RunningStatistics`
        of every observation collected (replicated) with
        ``normalize_observations``; ``None`` (no leaves) without.
    """

    env_state: envs.EnvState
    obs: jax.Array
    buffer: Any
    obs_stats: RunningStatistics | None = None


@struct.dataclass
class Transition:
    """One transition, or a batch with leading axes on every leaf.

    Attributes:
      obs: observation acted on.
      action: action taken (``int32[]`` discrete, ``float32[action_size]`` continuous).
      reward: ``float32[]``.
      next_obs: the observation reached, before any auto-reset (the env's
        ``final_obs``), so time-limit truncation can bootstrap from it.
      terminated: ``bool[]``, a terminal state was reached (no bootstrap).
      done: ``bool[]``, the episode ended here (terminated or cut by the time
        limit), or ``None``: stored only by learners that need episode
        boundaries inside a sampled sequence (n-step returns).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    terminated: jax.Array
    done: jax.Array | None = None


class ReplayBuffer:
    """Uniform experience replay over ``capacity`` transitions (global).

    Use inside ``Module.init_state`` / ``training_step``::

        state = buffer.init(example_transition)   # per device
        state = buffer.add(state, transitions)   # leaves [num_envs / num_devices, ...]
        batch = buffer.sample(state, key)         # leaves [batch_size / num_devices, ...]

    Args:
      capacity: transitions kept over all devices; a multiple of ``num_envs``.
      batch_size: global sample size per :meth:`sample`.
      num_envs: environments that each :meth:`add` brings one transition from,
        over all devices.
      sequence_length: :meth:`sample` draws runs of this many consecutive
        transitions of one env (n-step returns); 1: single transitions.
      priority_exponent: ``None``: uniform sampling; a number ``alpha >= 0``:
        prioritised sampling (module docstring; Schaul et al.'s 0.6, Rainbow's
        0.5).
      replicated: ``True``: every device keeps the whole buffer and samples the
        whole batch (sizes are not split over the devices, no leaf is
        per-device), for state that is the same on every device, such as a
        population module's (:class:`~jaxtrainer.population.PGAME`'s critic
        data); sampling then draws the same batch on any device count.

    Raises:
      ValueError: ``capacity`` is not a positive multiple of ``num_envs``, or
        ``sequence_length`` is not a positive int smaller than ``capacity / num_envs``,
        or ``priority_exponent`` is negative.
    """

    def __init__(self, capacity: int, batch_size: int, num_envs: int,
                 sequence_length: int = 1, priority_exponent: float | None = None,
                 replicated: bool = False) -> None:
        if num_envs < 1 or capacity < num_envs or capacity % num_envs:
            raise ValueError(
                f"ReplayBuffer: capacity={capacity} must be a positive multiple of "
                f"num_envs={num_envs} (every env keeps capacity / num_envs transitions)")
        if batch_size < 1:
            raise ValueError(f"ReplayBuffer: batch_size={batch_size}: expected a positive int")
        self.capacity = int(capacity)
        self.batch_size = int(batch_size)
        self.num_envs = int(num_envs)
        self.slots_per_env = self.capacity // self.num_envs
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, int) \
                or not 1 <= sequence_length < self.slots_per_env:
            raise ValueError(f"ReplayBuffer: sequence_length={sequence_length!r}: expected an int "
                             f"in [1, {self.slots_per_env}) (capacity / num_envs slots per env)")
        self.sequence_length = sequence_length
        if priority_exponent is not None:
            priority_exponent = arguments.number("ReplayBuffer: priority_exponent",
                                                 priority_exponent, low=0)
        self.priority_exponent = priority_exponent
        self.replicated = bool(replicated)

    @property
    def prioritised(self) -> bool:
        """Whether sampling is prioritised (``priority_exponent`` given)."""
        return self.priority_exponent is not None

    def validate(self, num_devices: int, owner: str = "ReplayBuffer") -> None:
        """Raise ValueError naming the size when ``num_envs`` or ``batch_size``
        does not split over ``num_devices``."""
        arguments.split_over_devices(owner, num_devices, num_envs=self.num_envs,
                                 batch_size=self.batch_size)

    def _fbx(self) -> Any:
        """flashbax's buffer for this device's share (sizes resolved at trace time)."""
        import flashbax  # here, not at module level: on-policy runs never pay its import

        if self.replicated:
            rows, batch = self.num_envs, self.batch_size
        else:
            rows, batch = local_size(self.num_envs, "num_envs"), local_size(self.batch_size,
                                                                             "batch_size")
        sizes = dict(add_batch_size=rows, sample_batch_size=batch,
                     sample_sequence_length=self.sequence_length, period=1,
                     min_length_time_axis=self.sequence_length,
                     max_length_time_axis=self.slots_per_env)
        if not self.prioritised:
            return flashbax.make_trajectory_buffer(**sizes)
        # flashbax's sum-tree updates: a scan on CPU, a scatter (bincount) on GPU and TPU
        device = jax.default_backend() if jax.default_backend() in ("gpu", "tpu") else "cpu"
        return flashbax.make_prioritised_trajectory_buffer(
            **sizes, priority_exponent=float(self.priority_exponent), device=device)

    def init(self, example: Transition, like: Any = None) -> Any:
        """An empty buffer for transitions shaped like ``example`` (one transition,
        no batch axis). The stored experience, ``[num_envs / num_devices, slots,
        ...]``, is sized by the device count, so a strategy lays it out per
        device, and so are a prioritised buffer's priorities (its sum tree); the
        write index stays replicated.

        ``like``: only for one's own ``jax.shard_map(check_vma=True)`` code: given
        a per-device value, the experience is typed per-device
        (:func:`~jaxtrainer.distributed.per_device`), as the check wants."""
        state = self._fbx().init(example)
        if like is not None:
            state = state.replace(experience=per_device(state.experience))
        if self.prioritised:  # each device's priorities are its own rows'
            state = state.replace(sum_tree_state=per_device(state.sum_tree_state))
        return state

    def add(self, state: Any, transitions: Transition) -> Any:
        """Write one transition per env: leaves ``[num_envs / num_devices, ...]``.
        Overwrites the oldest slot of every row once the buffer is full. Leaves
        are stored in the dtypes of :meth:`init`'s example (e.g. a float64
        action under ``jax_enable_x64`` is stored as the example's float32)."""
        return self.add_steps(state, jax.tree.map(lambda x: x[:, None], transitions))

    def add_steps(self, state: Any, transitions: Transition) -> Any:
        """Write ``T`` consecutive transitions per env: leaves ``[num_envs /
        num_devices, T, ...]`` (time second, ``T <= capacity / num_envs``), as
        ``T`` calls of :meth:`add` in time order."""
        batch = jax.tree.map(lambda x, stored: jax.lax.convert_element_type(x, stored.dtype),
                             transitions, state.experience)
        return self._fbx().add(state, batch)

    def sample(self, state: Any, key: jax.Array) -> Transition:
        """``batch_size / num_devices`` transitions drawn uniformly, with replacement,
        from this device's written slots (leaves ``[B, ...]``); with
        ``sequence_length`` L > 1, runs of L consecutive transitions of one env
        (leaves ``[B, L, ...]``, flashbax's sequences: never across the write
        position). Call only after at least :meth:`add` L times."""
        experience = self._fbx().sample(state, key).experience
        return self._items(experience)

    def _items(self, experience: Any) -> Any:
        if self.sequence_length > 1:
            return experience
        return jax.tree.map(lambda x: x[:, 0], experience)

    def sample_prioritised(self, state: Any, key: jax.Array,
                           ) -> tuple[Transition, jax.Array, jax.Array]:
        """With ``priority_exponent``: ``(batch, indices: int32[B],
        probabilities: float32[B])``, the batch as :meth:`sample`'s, drawn by
        priority (stratified over the sum tree, flashbax's sampler), with the
        sampled items' indices (for :meth:`set_priorities`) and their sampling
        probabilities on this device (for importance weights)."""
        sample = self._fbx().sample(state, key)
        return self._items(sample.experience), sample.indices, sample.probabilities

    def set_priorities(self, state: Any, indices: jax.Array, priorities: jax.Array) -> Any:
        """``state`` with the items ``indices`` (from :meth:`sample_prioritised`)
        given ``priorities: float32[B]`` (e.g. ``|TD error| + epsilon``; raised
        to ``priority_exponent`` here). A zero priority is never sampled."""
        return self._fbx().set_priorities(state, indices, priorities)

    @staticmethod
    def size(state: Any) -> jax.Array:
        """``int32[]``: transitions written per env row (at most ``capacity / num_envs``)."""
        rows = jax.tree.leaves(state.experience)[0].shape[1]
        return jax.numpy.where(state.is_full, rows, state.current_index)
