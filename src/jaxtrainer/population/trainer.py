"""PopulationTrainer: evolve a :class:`~jaxtrainer.PopulationModule` with a Trainer.

One *generation* is one Trainer step. The population module is wrapped in a
:class:`GenerationModule` (a plain :class:`~jaxtrainer.Module`) whose
``training_step`` runs::

    population, state = ask(state, fold_in(gen_key, 0))         # replicated, P members
    local    = layout.local(layout.pad(population))              # this device's L of P_pad
    keys     = layout.keys(fold_in(gen_key, 1))                  # member i: fold_in(., i)
    fitness, extras = layout.gather(vmap(evaluate)(local, keys))  # P_pad, bit for bit
    state, metrics  = tell(state, population, layout.unpad(fitness))  # padding never reaches tell
                      # (tell_extras: tell(..., layout.unpad(extras)), e.g. descriptors)

with ``layout`` the population's
:class:`~jaxtrainer.distributed._members.MemberLayout` over the strategy's data
axes. ``gen_key = fold_in(fold_in(key(seed), TRAIN_STREAM), generation)`` is the
same on every device (``step_key_per_device = False``), so member ``i``'s key
depends only on (seed, generation, i), and fitness is gathered bit for bit:
fitness arrays and the final state are identical on 1, 2 or 4 devices.
Everything else (callbacks, loggers, the progress bar, checkpoints, resume,
evaluation) is the Trainer's.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrainer import _arguments as arguments
from jaxtrainer.callbacks.base import Callback
from jaxtrainer.distributed._members import MemberLayout
from jaxtrainer.metrics import Last, Mean, Metric
from jaxtrainer.module import Module, PopulationModule
from jaxtrainer.strategies import Strategy
from jaxtrainer.strategies.base import DevicesArg
from jaxtrainer.trainer import Trainer

_MEMBER_MAPS = ("vmap", "map")


class GenerationModule(Module):
    """A :class:`PopulationModule` as a :class:`Module` whose step is one generation.

    Built by :class:`PopulationTrainer`; callbacks receive it as ``module`` (the
    wrapped population module is its ``module``, also read as
    :attr:`population_module`; :func:`jaxtrainer.module.unwrap` reaches it).

    Logged metrics (per generation, reduced over the generations of a log
    interval by their reductions, see :mod:`jaxtrainer.metrics`):
      ``fitness/mean`` (mean over the ``P`` real members and the interval's
      generations), ``fitness/max`` and ``fitness/min`` (the best and worst
      member of the interval: :class:`~jaxtrainer.metrics.Max` /
      :class:`~jaxtrainer.metrics.Min`), or ``fitness/<j>/mean`` (and ``/max``,
      ``/min``) for each objective ``j`` where ``evaluate`` returns ``M``
      fitness values (``float32[M]``: a multi-objective search, ``tell`` gets
      ``fitness: [P, M]``); ``population_size``: ``P`` (padding
      excluded, :class:`~jaxtrainer.metrics.Last`); every scalar metric
      ``evaluate`` returns, averaged over real members as ``member/<name>``; and
      the scalar or :class:`~jaxtrainer.metrics.Metric` values ``tell``
      returns, under their own names and with their own reductions (a plain
      scalar is averaged).

    The state keeps the dtypes ``init_state`` gave it: a leaf that ``ask`` or
    ``tell`` returns in another width of the same kind (e.g. float64 under
    ``jax_enable_x64``) is cast back, another kind or shape is a TypeError
    naming the leaf and ``<PopulationModule>.ask/tell``.

    Args:
      population_module: the evolution strategy.
      population_size: ``P``, global.
      data_axes: mesh axes members are split over (the strategy's data axes).
      member_map: ``"vmap"`` (all of a device's members at once) or ``"map"``
        (``lax.map``, ``map_batch_size`` at a time, for memory-bound members).
    """

    step_key_per_device = False
    headline_metric = "fitness/mean"

    def __init__(
        self,
        population_module: PopulationModule,
        population_size: int,
        data_axes: tuple[str, ...],
        member_map: str = "vmap",
        map_batch_size: int | None = None,
    ) -> None:
        self.module = population_module
        self.population_size = population_size
        self.data_axes = data_axes
        self.member_map = member_map
        self.map_batch_size = map_batch_size
        self.layout = MemberLayout(population_size, 1, data_axes)  # set per run by validate
        self.env_steps_per_step = int(population_module.env_steps_per_generation)
        self.headline_metric = population_module.headline_metric or self.headline_metric

    @property
    def population_module(self) -> PopulationModule:
        """The population module this generation runs (its ``module``)."""
        return self.module

    def validate(self, num_devices: int) -> None:
        """Check that ``ask`` returns ``population_size`` members (shape-only trace).

        Raises:
          ValueError: the population's leading axis differs from ``population_size``.
        """
        self.layout = MemberLayout(self.population_size, int(num_devices), self.data_axes)
        pm = self.module
        pm.validate(num_devices)

        def probe(key):
            return pm.ask(pm.init_state(key), key)[0]

        population = jax.eval_shape(probe, jax.random.key(0))
        sizes = {x.shape[0] if x.ndim else None for x in jax.tree.leaves(population)}
        if sizes != {self.population_size}:
            raise ValueError(
                f"{type(pm).__name__}.ask returned a population with leading sizes "
                f"{sorted(sizes, key=str)}, expected population_size={self.population_size} "
                "on every leaf"
            )

    def configure_budget(self, max_steps: int) -> None:
        """The run's generations, passed on to the population module."""
        self.module.configure_budget(max_steps)

    def init_state(self, key: jax.Array) -> Any:
        return self.module.init_state(key)

    def _evaluate_local(self, members: Any, keys: jax.Array) -> tuple[jax.Array, Any]:
        """``evaluate`` of this device's members: vmapped, or one ``lax.map``
        batch of ``map_batch_size`` after another (``member_map="map"``)."""
        fn = self.module.evaluate
        if self.member_map == "map":
            return jax.lax.map(lambda a: fn(*a), (members, keys), batch_size=self.map_batch_size)
        return jax.vmap(fn)(members, keys)

    def training_step(self, state: Any, key: jax.Array) -> tuple[Any, dict[str, Any]]:
        pm, layout = self.module, self.layout
        population, state = pm.ask(state, jax.random.fold_in(key, 0))
        local = layout.local(layout.pad(population))
        evaluated = self._evaluate_local(local, layout.keys(jax.random.fold_in(key, 1)))
        fitness, extras = layout.unpad(layout.gather(evaluated))
        if pm.tell_extras:
            state, tell_metrics = pm.tell(state, population, fitness, dict(extras or {}))
        else:
            state, tell_metrics = pm.tell(state, population, fitness)
        metrics: dict[str, Any] = {
            **_fitness_metrics(layout, fitness),
            "population_size": Last.of(jnp.asarray(layout.size, jnp.float32)),
        }
        for name, value in (extras or {}).items():
            if isinstance(value, jax.Array) and value.ndim == 1:  # not a pytree (transitions)
                metrics[f"member/{name}"] = Mean.of(value)
        for name, value in (tell_metrics or {}).items():
            if isinstance(value, Metric) or jnp.ndim(value) == 0:
                metrics[name] = value
        return state, metrics

    @property
    def step_function_name(self) -> str:  # type: ignore[override]
        """How the strategy's errors name this step (e.g. a state leaf whose
        dtype ``tell`` changed): the population module's ``ask``/``tell``."""
        name = type(self.module).__name__
        return f"{name}.ask/{name}.tell (one PopulationTrainer generation)"

    def has_evaluation(self) -> bool:
        return self.module.has_evaluation()

    def evaluation_step(self, state: Any, key: jax.Array) -> dict[str, Any]:
        return self.module.evaluation_step(state, key)

    def hparams(self) -> dict[str, Any]:
        return {"population_module": type(self.module).__name__,
                "population_size": self.population_size,
                **self.module.hparams()}


def _fitness_metrics(layout: MemberLayout, fitness: jax.Array) -> dict[str, Any]:
    """:meth:`MemberLayout.fitness_metrics` of ``fitness: [P]``; of each objective
    ``j`` of a multi-objective ``fitness: [P, M]`` as ``fitness/<j>/mean`` (and
    ``/max``, ``/min``, ``/invalid``)."""
    if fitness.ndim == 1:
        return layout.fitness_metrics(fitness)
    return {name.replace("fitness/", f"fitness/{j}/", 1): value
            for j in range(fitness.shape[1])
            for name, value in layout.fitness_metrics(fitness[:, j]).items()}


class GenerationEndDispatcher(Callback):
    """Calls ``on_generation_end(trainer, module, metrics)`` on every callback that
    defines it, after ``on_train_steps_end`` (added by :class:`PopulationTrainer`).

    ``metrics`` is the interval's dict plus ``generation`` (generations done).
    """

    writes_run_dir = False  # it reads metrics only

    order = 99  # after ordinary callbacks, before ModelCheckpoint (100)

    def needs_state(self, trainer: Trainer, module: Module, step: int) -> bool:
        return False  # each forwarded-to callback answers for itself

    def on_train_steps_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        metrics = {**metrics, "generation": float(trainer.global_step)}
        for cb in trainer.callbacks:
            hook = getattr(cb, "on_generation_end", None)
            if cb is not self and callable(hook):
                hook(trainer, module, metrics)


_IN_STEPS = {"max_steps": "max_generations", "max_env_steps": "max_generations",
            "budget": "max_generations", "log_every_n_steps": "log_every_n_generations",
            "eval_every_n_steps": "eval_every_n_generations"}
"""The Trainer's arguments counted in steps, and the PopulationTrainer's own for each."""


def _passed_on() -> list[inspect.Parameter]:
    """The Trainer's arguments a PopulationTrainer passes on: all but ``self``,
    ``strategy``, ``devices`` (its own, positional) and those counted in steps,
    as keyword-only arguments with the Trainer's defaults."""
    return [p.replace(kind=p.KEYWORD_ONLY)
            for name, p in inspect.signature(Trainer.__init__).parameters.items()
            if name not in {"self", "strategy", "devices", *_IN_STEPS}]


def _takes_trainer_arguments(init: Any) -> Any:
    """``init`` (taking ``**trainer_arguments``) with the signature ``help``,
    ``inspect.signature`` and the recipes' ``trainer:`` keys read: its own
    arguments, then each Trainer argument it passes on."""
    own = [p for p in inspect.signature(init).parameters.values() if p.kind is not p.VAR_KEYWORD]
    init.__signature__ = inspect.Signature(own + _passed_on(), return_annotation=None)
    return init


def _check_passed_on(given: dict[str, Any]) -> None:
    """Raise TypeError naming a keyword the PopulationTrainer does not pass on."""
    taken = [p.name for p in _passed_on()]
    for name in given:
        if name in _IN_STEPS:
            raise TypeError(f"PopulationTrainer counts generations: got {name}={given[name]!r}; "
                            f"use {_IN_STEPS[name]}")
        if name not in taken:
            raise TypeError(f"PopulationTrainer got an unexpected keyword argument {name!r}"
                            f"{arguments.did_you_mean(name, taken)}")


class PopulationTrainer(Trainer):
    """Evolve a :class:`~jaxtrainer.PopulationModule` on any device layout.

    A :class:`~jaxtrainer.Trainer` whose step is one generation (see the module
    docstring for the program): ``ask`` on replicated state, members evaluated
    split over the strategy's data axes (vmapped on each device), fitness
    gathered bit for bit, ``tell``. A population that does not divide the device
    count is padded with copies of its last member; padded members are evaluated
    but never reach ``tell``, the fitness statistics or any logged count. Results do not depend on the device count: same seed, same
    fitness arrays and final state on 1, 2 or 4 devices.

    Callbacks and loggers work as in the Trainer (``step`` = generations done),
    plus ``on_generation_end(trainer, module, metrics)``, called once per fused
    interval of ``log_every_n_generations`` generations with that interval's
    metrics (each reduced over its generations by its reduction: means
    averaged, ``fitness/max`` the interval's best) and ``generation``; set
    ``log_every_n_generations=1`` to get every generation's metrics.

    Args:
      population_size: ``P``, global number of members per generation (>= 1).
      strategy, devices: as in :class:`~jaxtrainer.Trainer`.
      max_generations: generations to run (the Trainer's ``max_steps``).
      log_every_n_generations: generations per log interval (callbacks get
        metrics reduced over each interval, see :class:`GenerationModule`).
      eval_every_n_generations: run the population module's ``evaluation_step``
        every this many generations (``None``: only via :meth:`evaluate`).
      member_map: ``"vmap"`` or ``"map"`` (``lax.map`` over a device's members,
        ``map_batch_size`` at a time). Part of the numerics: compare runs with the
        same choice.
      **trainer_arguments: every other :class:`~jaxtrainer.Trainer` argument but
        those counted in steps (``callbacks``, ``seed``, ``default_root_dir``, ...),
        by keyword, passed on to it with the Trainer's defaults;
        ``inspect.signature(PopulationTrainer)`` lists them.

    Raises:
      ValueError: ``population_size < 1``, a bad budget or interval, an unknown
        strategy or ``member_map``; at construction, before compiling. ``fit``
        raises ValueError when ``ask`` returns another number of members.
      TypeError: a Trainer argument counted in steps (``max_steps``, ...), or
        a keyword the Trainer does not take (naming it).
    """

    @_takes_trainer_arguments
    def __init__(self, population_size: int, strategy: str | Strategy = "auto",
                 devices: DevicesArg = "auto", max_generations: int | None = None,
                 log_every_n_generations: int = 10, eval_every_n_generations: int | None = None,
                 *, member_map: str = "vmap", map_batch_size: int | None = None,
                 **trainer_arguments: Any) -> None:
        _check_passed_on(trainer_arguments)
        # Checked here under their own names; the Trainer checks everything it is passed.
        if isinstance(population_size, bool) or not isinstance(population_size, int) \
                or population_size < 1:
            raise arguments.ArgumentError("population_size", population_size,
                                          ": expected an int >= 1")
        if max_generations is None:
            raise ValueError("no budget: set max_generations")
        max_generations = arguments.positive_int("max_generations", max_generations)
        log_every_n_generations = arguments.positive_int("log_every_n_generations",
                                                         log_every_n_generations, False)
        eval_every_n_generations = arguments.positive_int("eval_every_n_generations",
                                                          eval_every_n_generations)
        if not isinstance(member_map, str) or member_map not in _MEMBER_MAPS:
            raise arguments.ArgumentError("member_map", member_map,
                                          f": choose one of {_MEMBER_MAPS}")
        map_batch_size = arguments.positive_int("map_batch_size", map_batch_size)
        super().__init__(
            strategy=strategy, devices=devices, max_steps=max_generations,
            log_every_n_steps=log_every_n_generations, eval_every_n_steps=eval_every_n_generations,
            **trainer_arguments)
        self.population_size = population_size
        self.member_map = member_map
        self.map_batch_size = map_batch_size
        self.config.update(population_size=population_size, max_generations=max_generations,
                           member_map=member_map)
        self.add_callback(GenerationEndDispatcher())
        self._wrappers: dict[int, tuple[PopulationModule, GenerationModule]] = {}

    @property
    def max_generations(self) -> int:
        return self.budget.max_steps

    @property
    def generation(self) -> int:
        """Generations done so far (``global_step``)."""
        return self.global_step

    def wrap(self, module: PopulationModule | GenerationModule) -> GenerationModule:
        """The :class:`GenerationModule` this trainer runs for ``module`` (cached,
        so compiled programs are reused across ``fit`` and ``evaluate``).

        Raises:
          TypeError: ``module`` is not a :class:`PopulationModule`.
        """
        if isinstance(module, GenerationModule):
            return module
        if not isinstance(module, PopulationModule):
            raise TypeError(f"PopulationTrainer expects a jaxtrainer.PopulationModule, "
                            f"got {type(module).__name__}")
        cached = self._wrappers.get(id(module))
        if cached is None:
            module.configure_population(self.population_size)
            self.strategy.setup()
            wrapper = GenerationModule(module, self.population_size, self.strategy.data_axes,
                                       self.member_map, self.map_batch_size)
            cached = self._wrappers[id(module)] = (module, wrapper)
        return cached[1]

    def fit(self, module: PopulationModule, ckpt_path: str | os.PathLike | None = None) -> None:  # type: ignore[override]
        """Evolve ``module`` for ``max_generations`` (or resume from ``ckpt_path``).

        Raises:
          TypeError: ``module`` is not a :class:`PopulationModule`.
          ValueError: ``ask`` returns another number of members than
            ``population_size``, or the module's own checks fail; before compiling.
        """
        super().fit(self.wrap(module), ckpt_path=ckpt_path)

    def evaluate(self, module: PopulationModule, ckpt_path: str | os.PathLike | None = None, *,  # type: ignore[override]
                 seed: int | None = None) -> dict[str, float]:
        """Run the population module's ``evaluation_step`` on the current state
        (after ``fit``), a checkpoint, or a fresh ``init_state`` (``seed``: as
        :meth:`Trainer.evaluate`)."""
        return super().evaluate(self.wrap(module), ckpt_path=ckpt_path, seed=seed)
