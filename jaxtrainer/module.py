"""The user contracts: :class:`Module` (one agent) and :class:`PopulationModule`."""

from __future__ import annotations

from typing import Any

import jax

State = Any
Metrics = dict[str, Any]


class Module:
    """A training algorithm as pure functions over a state pytree.

    Subclass it and implement :meth:`init_state` and :meth:`training_step`
    (and :meth:`evaluation_step` to be evaluated). The strategy traces these
    functions once per device inside ``jax.shard_map`` over the data axis
    :data:`jaxtrainer.distributed.AXIS_NAME`; use :mod:`jaxtrainer.distributed`
    (``pmean``, ``local_size``, ``fold_in_device``, ``gradient_update``) for
    anything that depends on the devices. Sizes in the module's config are global.

    How state is laid out:
      ``init_state`` receives the same key on every device. Leaves computed from
      it alone (parameters, optimizer state) are identical on every device and
      are *replicated*; leaves that depend on the device (anything built from
      :func:`~jaxtrainer.distributed.fold_in_device` or
      :func:`~jaxtrainer.distributed.axis_index`, such as environment states) are
      *sharded* along their leading axis. The strategy infers this from JAX's
      varying-manual-axes types, so ``trainer.state`` and checkpoints hold one
      logical copy whose shapes do not depend on the device count (a sharded
      scalar gains a leading axis of size ``num_devices``). A replicated leaf that
      ``training_step`` makes device-dependent (e.g. an un-averaged gradient) is an
      error raised at trace time, naming the leaf; when the difference is noise
      that every device should draw alike (a perturbation of replicated
      parameters), set ``step_key_per_device = False``.

    How state keeps its types:
      the state keeps the dtypes (and per-device shapes) ``init_state`` gave it.
      A leaf that ``training_step`` returns in another width of the same kind
      (float32 -> float64 under ``jax_enable_x64``, int32 -> int64, a
      weak-typed Python scalar) is cast back to its ``init_state`` dtype by the
      strategy; a change of kind (float -> int, int -> bool, ...) or of shape is
      a ``TypeError`` at trace time naming the leaf, both dtypes and
      ``<Module>.training_step``.

    Attributes:
      env_steps_per_step: environment transitions one ``training_step`` consumes
        over all devices (0 for modules that use no environment). Drives
        ``Trainer(max_env_steps=...)`` and the ``env_steps`` metric.
      step_key_per_device: ``True`` (default): ``training_step``'s key is
        ``fold_in(step_key, device_index)``, different on every device.
        ``False``: every device gets the same ``step_key`` and the module
        derives per-device or per-member keys itself (e.g. so that results do
        not depend on the device count, as population evaluation needs, or
        so that noise added to replicated parameters is the same everywhere).
    """

    env_steps_per_step: int = 0
    step_key_per_device: bool = True

    def configure_budget(self, max_steps: int) -> None:
        """Receive the run's budget before anything is traced. Optional.

        ``Trainer.fit`` (and ``Trainer.evaluate``) call it once with ``max_steps``:
        the number of training steps the run will take in all (the smaller of the
        Trainer's ``max_steps`` and ``max_env_steps // env_steps_per_step``; on a
        resume, the whole run's count, not what is left). Schedules that span the
        run read it here, as a Lightning module reads
        ``trainer.estimated_stepping_batches`` (e.g. :class:`~jaxtrainer.algorithms.PPO`
        anneals its learning rate over it when ``total_updates`` is ``None``).
        """

    def validate(self, num_devices: int) -> None:
        """Check global sizes against the device count before anything compiles.

        Raises:
          ValueError: a global size cannot be split over ``num_devices``.
        """

    def init_state(self, key: jax.Array) -> State:
        """The initial state, traced per device. ``key``: typed key, same on every device."""
        raise NotImplementedError

    def training_step(self, state: State, key: jax.Array) -> tuple[State, Metrics]:
        """One update. ``key`` is unique to (seed, global step, device).

        Returns the new state (same structure, dtypes and shapes as
        ``init_state``'s; wider dtypes of the same kind are cast back) and
        metrics: ``jax.Array`` scalars (averaged) or values of
        :mod:`jaxtrainer.metrics` that carry their reduction over the steps of a
        log interval and over devices: :class:`~jaxtrainer.metrics.Mean`
        (``Mean.of(values, mask)``), :class:`~jaxtrainer.metrics.Sum`,
        :class:`~jaxtrainer.metrics.Max` (e.g. a best-so-far fitness),
        :class:`~jaxtrainer.metrics.Min` and :class:`~jaxtrainer.metrics.Last`
        (e.g. a learning rate). A metric keeps one reduction at every step.
        """
        raise NotImplementedError

    def evaluation_step(self, state: State, key: jax.Array) -> Metrics:
        """Evaluate ``state``; metrics as in :meth:`training_step`. Optional."""
        raise NotImplementedError(f"{type(self).__name__} does not define evaluation_step")

    def has_evaluation(self) -> bool:
        return type(self).evaluation_step is not Module.evaluation_step

    def hparams(self) -> dict[str, Any]:
        """Hyperparameters to log once at the start of ``fit`` (flat or nested dict)."""
        return {}


class PopulationModule:
    """An evolution strategy as ``init_state / ask / evaluate / tell``.

    ``ask`` returns a population whose leaves have a leading axis of size
    ``population_size``; the PopulationTrainer evaluates members sharded over the
    devices (``evaluate`` sees one member) and calls ``tell`` with every real
    member's fitness (padding never reaches it).

    Optional members the PopulationTrainer uses when present:
    ``evaluation_step(state, key) -> metrics`` (e.g. the mean solution's return),
    ``validate(num_devices)``, ``configure_population(population_size)`` and
    ``env_steps_per_generation: int``.
    """

    def init_state(self, key: jax.Array) -> State:
        raise NotImplementedError

    def ask(self, state: State, key: jax.Array) -> tuple[Any, State]:
        raise NotImplementedError

    def evaluate(self, member: Any, key: jax.Array) -> tuple[jax.Array, Metrics]:
        raise NotImplementedError

    def tell(self, state: State, population: Any, fitness: jax.Array) -> tuple[State, Metrics]:
        raise NotImplementedError

    def hparams(self) -> dict[str, Any]:
        return {}
