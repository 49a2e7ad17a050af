"""The user contracts: :class:`Module` (one agent) and :class:`PopulationModule`, and
what a module may offer beyond them as ``typing.Protocol`` s (:class:`Population`,
:class:`Members`, :class:`RankedMembers`, :class:`HostEnv`, :class:`Wrapper`),
checked with ``isinstance``, with :func:`unwrap` to reach the module a wrapper runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax

State = Any
Metrics = dict[str, Any]


class Module:
    """A training algorithm as pure functions over a state pytree.

    Subclass it and implement :meth:`init_state` and :meth:`training_step`
    (and :meth:`evaluation_step` to be evaluated). Write them as for one device
    under ``jax.jit``: ``lax.scan``/``while_loop``/``cond`` with env states and
    Python-made zeros in their carries, ``jax.grad`` then
    :func:`~jaxtrainer.distributed.pmean`. The strategy traces them once per
    device with ``jax.pmap``'s semantics (inside ``jax.shard_map`` over the data
    axis :data:`jaxtrainer.distributed.AXIS_NAME`, without the varying-axis
    check): each device's gradient is its own, so
    ``pmean(jax.grad(loss)(params))`` is the average over devices, the gradient
    one device computes on all the data. Use :mod:`jaxtrainer.distributed`
    (``pmean``, ``local_size``, ``fold_in_device``) for anything that depends
    on the devices; all of it is the identity on one device. Sizes in the
    module's config are global.

    How state is laid out, in one line: a state leaf is **per device** when
    ``init_state`` computes it from the device (its key from
    :func:`~jaxtrainer.distributed.fold_in_device`, or
    :func:`~jaxtrainer.distributed.axis_index`) or sizes it with
    :func:`~jaxtrainer.distributed.local_size`; every other leaf is
    **replicated**. ``init_state`` receives the same key on every device, so
    parameters and optimizer state built from it alone are replicated, while
    environment states (built from ``fold_in_device(key)`` and sized with
    ``local_size(num_envs)``, step counters included) are per device.
    Per-device leaves are sharded along their leading axis, so
    ``trainer.state`` and checkpoints hold one logical copy whose shapes do not
    depend on the device count (a per-device scalar gains a leading axis of
    size ``num_devices``). A leaf that starts equal everywhere but is meant to
    be per device (a population's zero-initialised biases) is declared with
    :func:`~jaxtrainer.distributed.per_device`. A replicated leaf that
    ``training_step`` makes device-dependent (e.g. an un-averaged gradient) is
    a ``ValueError`` at trace time naming the leaf and the fixes; when the
    difference is noise that every device should draw alike (a perturbation
    of replicated parameters), set ``step_key_per_device = False``.

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
      stochastic_policy: whether :meth:`policy`'s ``act`` samples when given a key.
      headline_metric: the metric that says how training goes, shown by the
        progress bar (:class:`~jaxtrainer.callbacks.RichProgressBar`): the
        episode return here, an evolution strategy's mean fitness, a PBT
        population's best (``jaxtrainer plot`` picks it from a run's columns
        alike, :func:`jaxtrainer.rundir._run_kind.headline_metric`).
      env: the :class:`~jaxtrainer.envs.Env` the module acts in (``None``:
        none), which :meth:`policy` and the default :meth:`evaluation_step` use.
      eval_episodes: fresh episodes an evaluation of :meth:`policy` runs
        (global); ``None``: ``config.eval_episodes``, else 16.
      config: the module's hyperparameters (the shipped modules' config
        dataclass), or ``None``.
      num_envs: with ``global_view``, the envs whose leading axis is split over
        the devices (``None``: no leaf is split by it).
      TUNABLE: the names in ``state.hyperparams`` a population may vary per
        member and a resumed recipe may change.
      step_function_name: how errors name the step (``None``:
        ``<Module>.training_step``; a wrapper names what it runs).
      step_key_per_device: ``True`` (default): ``training_step``'s key is
        ``fold_in(step_key, device_index)``, different on every device.
        ``False``: every device gets the same ``step_key`` and the module
        derives per-device or per-member keys itself (e.g. so that results do
        not depend on the device count, as population evaluation needs, or
        so that noise added to replicated parameters is the same everywhere).
      global_view: ``False`` (default): the per-device view above. ``True``:
        ``init_state`` and ``training_step`` see the whole run's arrays, as one
        device would (``num_envs`` envs, whole minibatches, global counters),
        and XLA's SPMD partitioner splits the compiled step over the devices;
        the module calls no ``pmean``, ``local_size`` or ``fold_in_device``,
        and every strategy computes what one device computes (the same
        algorithm: same minibatch count and size, the same random draws;
        floating-point sums may differ in their last bits). Layout: a state leaf
        whose leading axis has ``num_envs`` entries (the module's attribute;
        env states, observations, recurrent carries, done flags, a replay
        buffer stored env-major) is split over the devices on that axis when
        it divides evenly; every other leaf is replicated. The split decides
        speed only, never values (a parameter whose leading axis happens to
        have ``num_envs`` entries is split too, and gathered where used). ``training_step``'s key is the one device 0
        of a per-device run gets. For code written for one device, such as
        PureJaxRL's scripts (see the porting guide).
    """

    env_steps_per_step: int = 0
    step_key_per_device: bool = True
    global_view: bool = False
    stochastic_policy: bool = False
    headline_metric: str = "train/episode_return"
    env: Any = None
    eval_episodes: int | None = None
    config: Any = None
    num_envs: int | None = None
    TUNABLE: tuple[str, ...] = ()
    step_function_name: str | None = None
    env_fields: tuple[str, ...] = ("env_state", "obs", "carry", "start")
    """The fields of a state dataclass that hold the envs in flight (their
    states, observations and, with memory, the recurrent carry and episode
    starts): what :meth:`resumed_state` takes afresh for a host env."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Module:
        # the constructor's arguments, so that a run started from Python can be
        # rebuilt by `jaxtrainer eval` and load_policy (jaxtrainer.rundir.module_record)
        self = super().__new__(cls)
        object.__setattr__(self, "_init_arguments", (args, kwargs))
        return self

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
        """The initial state, traced per device. ``key``: typed key, same on every device.

        A module whose :meth:`initial_hyperparams` returns values takes them here
        as a keyword, ``init_state(key, hyperparams=None)`` (``None``: its own)."""
        raise NotImplementedError

    def initial_hyperparams(self) -> dict[str, Any] | None:
        """The traced hyperparameters the state starts from, ``{name: float32[]}``
        (learning rates, coefficients, ``gamma``...), or ``None`` (default: none).

        A module that returns them keeps them in its state (``state.hyperparams``,
        read by ``training_step``, as populations set them per member) and
        builds its initial state from its ``init_state(key, hyperparams=...)``
        argument alone, optimizer states' learning rates included: the strategy
        passes these values to the init program as an argument, so no compiled
        program holds them as constants, and a run that changes only them loads
        every program from the compilation cache."""
        return None

    def resumed_state(self, state: State, fresh_state: Callable[[], State]) -> State:
        """The state a resumed run continues from, given the one its checkpoint
        restored. ``fresh_state()``: a new initial state (made on the run's
        devices by ``init_state``) for the parts that cannot be restored.

        Default: ``state`` unchanged, except for a module whose ``env`` is a host
        environment (``env.host``: Gymnasium, EnvPool), whose simulators live in
        the process that ran them and are not in the checkpoint: then the fields
        :attr:`env_fields` of ``state`` (a ``flax.struct`` dataclass) are taken
        from ``fresh_state()``, fresh envs whose episodes start anew, and all
        else (parameters, optimizer state, counters, replay buffer, observation
        statistics) is kept as restored.
        """
        if not (isinstance(self.env, HostEnv) and self.env.host) or not hasattr(state, "replace"):
            return state
        fresh = fresh_state()
        return state.replace(**{name: getattr(fresh, name) for name in self.env_fields
                                if hasattr(state, name)})

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
        """Evaluate ``state``; metrics as in :meth:`training_step`. Optional.

        ``key`` is the evaluation's key (a function of the seed and the step),
        the same on every device, so that an evaluation gives the same result
        on any device count: split episodes over the devices by their number
        (:func:`jaxtrainer.envs.evaluation.episode_share`) and give episode
        ``e`` the key ``jaxtrainer.distributed.keys.episode_key(key, e)``, as
        :func:`~jaxtrainer.envs.evaluation.evaluation_metrics` does.

        By default, for a module with :meth:`policy` and ``env``: the greedy
        policy on ``eval_episodes`` fresh episodes over all devices, completed
        episodes only (the env's :meth:`~jaxtrainer.envs.Env.evaluation_metrics`):
        ``eval/episode_return`` and ``eval/episode_length``.

        Raises:
          NotImplementedError: neither this method nor :meth:`policy` is defined.
        """
        if not self.has_policy():
            raise NotImplementedError(f"{type(self).__name__} defines neither evaluation_step "
                                      "nor policy")
        from jaxtrainer.policy import policy_spec

        spec = policy_spec(self)
        return spec.env.evaluation_metrics(spec.greedy, spec.params(state), key,
                                           spec.eval_episodes, spec.initial_carry)

    def has_evaluation(self) -> bool:
        """Whether :meth:`evaluation_step` is defined, or given by :meth:`policy`."""
        return (type(self).evaluation_step is not Module.evaluation_step
                or (self.has_policy() and self.env is not None))

    def policy(self, state: State) -> Any:
        """The policy of ``state``, for evaluation and use outside training. Optional.

        Returns ``act(obs, key=None) -> actions``, traceable: ``obs`` a batch
        ``[n, *env.observation_shape]`` of raw observations as the module's
        ``env`` returns them (``float32`` for most environments); ``actions``
        ``int32[n]`` for a discrete action space, ``int32[n, len(action_nvec)]``
        for a multi-discrete one, ``float32[n, action_size]`` within the action
        bounds for a continuous one. ``key=None`` acts as the
        module's evaluation does (greedy: the argmax or the mean action); a typed
        PRNG key samples where the policy is stochastic (set
        ``stochastic_policy = True`` then). Return a ``jax.tree_util.Partial``
        over the arrays ``act`` reads to have them passed to the compiled
        policy as arguments rather than baked in as constants
        (:func:`jaxtrainer.policy.acting` builds one).

        With it, and an ``env`` attribute (the :class:`~jaxtrainer.envs.Env`
        acted in), ``jaxtrainer eval``, :func:`jaxtrainer.load_policy` and
        ``Trainer.evaluate`` (for a module without ``evaluation_step``) use the
        module's policy; ``eval_episodes`` (attribute, or ``config.eval_episodes``;
        default 16) sets how many fresh episodes evaluation runs.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define policy")

    def has_policy(self) -> bool:
        """Whether this module defines :meth:`policy`."""
        return type(self).policy is not Module.policy

    def hparams(self) -> dict[str, Any]:
        """Hyperparameters to log once at the start of ``fit`` (flat or nested dict)."""
        return {}


class PopulationModule:
    """An evolution strategy as ``init_state / ask / evaluate / tell``.

    ``ask`` returns a population whose leaves have a leading axis of size
    ``population_size``; the PopulationTrainer evaluates members sharded over the
    devices (``evaluate`` sees one member) and calls ``tell`` with every real
    member's fitness (padding never reaches it): ``float32[P]``, or ``[P, M]``
    where ``evaluate`` returns ``M`` fitness values per member (a
    multi-objective search).

    Optional members the PopulationTrainer uses, declared here with their
    defaults: :meth:`evaluation_step` (e.g. the mean solution's return),
    :meth:`validate`, :meth:`configure_population` and
    ``env_steps_per_generation``; :meth:`policy` with ``env`` (and
    ``eval_episodes``, ``stochastic_policy``) as in :class:`Module`.

    Attributes:
      population_size: ``P``, set by :meth:`configure_population` (``None``: not yet).
      env_steps_per_generation: environment transitions one generation consumes
        (0: none), the PopulationTrainer's ``env_steps_per_step``.
      tell_extras: ``True``: ``tell`` is called as ``tell(state, population,
        fitness, extras)``, with ``extras`` the second outputs of ``evaluate``
        gathered over the real members (``{name: [P, ...]}``; e.g. the
        descriptors of a quality-diversity search).
      headline_metric: the metric the progress bar shows (``None``: the
        trainer's ``fitness/mean``).
    """

    population_size: int | None = None
    env_steps_per_generation: int = 0
    tell_extras: bool = False
    headline_metric: str | None = None
    env: Any = None
    eval_episodes: int | None = None
    config: Any = None
    stochastic_policy: bool = False

    def init_state(self, key: jax.Array) -> State:
        raise NotImplementedError

    def ask(self, state: State, key: jax.Array) -> tuple[Any, State]:
        raise NotImplementedError

    def evaluate(self, member: Any, key: jax.Array) -> tuple[jax.Array, Metrics]:
        raise NotImplementedError

    def tell(self, state: State, population: Any, fitness: jax.Array) -> tuple[State, Metrics]:
        raise NotImplementedError

    def validate(self, num_devices: int) -> None:
        """Check sizes against the device count before anything compiles (as
        :meth:`Module.validate`)."""

    def configure_population(self, population_size: int) -> None:
        """Receive ``P`` before anything is traced (the PopulationTrainer calls it once)."""

    def configure_budget(self, max_steps: int) -> None:
        """Receive the run's generations before anything is traced (as
        :meth:`Module.configure_budget`; the PopulationTrainer calls it once)."""

    def initial_hyperparams(self) -> dict[str, Any] | None:
        """The traced hyperparameters the state starts from (as :meth:`Module.initial_hyperparams`)."""
        return None

    def evaluation_step(self, state: State, key: jax.Array) -> Metrics:
        """Evaluate ``state`` (e.g. the mean solution). Optional.

        Raises:
          NotImplementedError: not defined."""
        raise NotImplementedError(f"{type(self).__name__} does not define evaluation_step")

    def has_evaluation(self) -> bool:
        """Whether :meth:`evaluation_step` is defined."""
        return type(self).evaluation_step is not PopulationModule.evaluation_step

    def policy(self, state: State) -> Any:
        """The policy of ``state`` (as :meth:`Module.policy`). Optional."""
        raise NotImplementedError(f"{type(self).__name__} does not define policy")

    def has_policy(self) -> bool:
        """Whether this module defines :meth:`policy`."""
        return type(self).policy is not PopulationModule.policy

    def hparams(self) -> dict[str, Any]:
        return {}


@runtime_checkable
class SweepModule(Protocol):
    """A population of configurations x seeds (:class:`jaxtrainer.population.Sweep`):
    ``members()`` gives one row per member (``member``, ``config``, ``seed``, the
    hyperparameters), which its run directory keeps as ``sweep_members.csv`` (so a
    sweep's run is told apart from a single run's)."""

    population_size: int

    def members(self) -> list[dict[str, Any]]: ...


@runtime_checkable
class Population(Protocol):
    """A module of ``population_size`` members: a population of members
    (:class:`Members`) or a PopulationTrainer's generation."""

    population_size: int


@runtime_checkable
class Members(Population, Protocol):
    """A population of members of one module, stacked on a leading member axis
    (:class:`jaxtrainer.population.MemberPopulation`: PBT, sweeps, searches).

    ``budget_per_member``: the budget is each member's (a sweep, a search), so
    env steps are counted per member; ``budget_share``: the fraction of it each
    member slot trains (a search's rounds)."""

    budget_per_member: bool
    budget_share: Any

    def member_state(self, state: State, member: int | None = None) -> State: ...

    def default_member(self, state: State) -> int: ...

    def describe_member(self, state: State, member: int) -> str | None: ...


@runtime_checkable
class RankedMembers(Members, Protocol):
    """Members ranked by a fitness they hold now (PBT, searches)."""

    def current_fitness(self, state: State) -> jax.Array: ...


@runtime_checkable
class HostEnv(Protocol):
    """An env that says whether its simulators run on the host (``host``:
    Gymnasium, EnvPool; :class:`jaxtrainer.envs.Env`): a module whose ``env``
    is one with ``host`` true has host envs, which a checkpoint cannot hold."""

    host: bool


@runtime_checkable
class Wrapper(Protocol):
    """A module that runs another, kept as ``module``: a PopulationTrainer's
    generation (its population module), a population of members (the module each
    member runs), an evaluation's statistics."""

    module: Any


def unwrap(module: Any, until: type | None = None) -> Any:
    """The module ``module`` runs: ``module.module`` followed while it is a
    :class:`Module` or :class:`PopulationModule` (:class:`Wrapper`), to the
    innermost; with ``until`` (a class or a runtime-checkable Protocol), the
    first module on the way that is an instance of it, else ``None``."""
    for _ in range(8):  # a few wrappers deep at most
        if until is not None and isinstance(module, until):
            return module
        inner = module.module if isinstance(module, Wrapper) else None
        if not isinstance(inner, Module | PopulationModule):
            break
        module = inner
    return module if until is None else None


def counted_members(module: Module) -> int:
    """How many members a printed env-step count of ``module`` is divided by:
    ``population_size`` for a population whose budget is per member (its
    ``budget_per_member`` is True: a sweep, a search), else 1."""
    return int(module.population_size) if isinstance(module, Members) and module.budget_per_member else 1


def members_of(module: Any) -> Members | None:
    """The population of members ``module`` is or wraps (PBT, a sweep, a search:
    :class:`Members`), found through the modules that wrap it (:func:`unwrap`), or ``None``."""
    return unwrap(module, Members)
