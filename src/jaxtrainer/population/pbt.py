"""Population-based training (PBT) of any :class:`jaxtrainer.Module`, across devices.

Jaderberg et al. 2017, "Population Based Training of Neural Networks"
(arXiv:1711.09846): a population of agents trains in parallel; every
``ready_every_n_steps`` updates each member is ranked by its recent return,
*exploit* replaces the worst members by copies of the best (weights, optimizer
state, hyperparameters: the whole member state, as a checkpoint would hold it)
and *explore* perturbs the copies' hyperparameters. Defaults follow the paper's
truncation selection and Ray Tune's ``PopulationBasedTraining``
(``ray/tune/schedulers/pbt.py``): ``quantile_fraction = 0.25``,
perturbation factors ``(0.8, 1.2)``, ``resample_probability = 0.25``.

How it runs (a *population mode of the Trainer*, not the PopulationTrainer):
:class:`PBT` is the member core that it shares with
:class:`~jaxtrainer.population.Sweep`
(:class:`~jaxtrainer.population.members.MemberPopulation`: stacking,
padding, vmapped steps, member metrics) plus fitness and exploit/explore. It is
an ordinary :class:`~jaxtrainer.Module` whose state holds all
members' states stacked on a leading member axis, **sharded over the devices**
(each device holds ``P_pad / num_devices`` members and trains them with
``vmap``). A member's state stays on its device between exploit steps; only at
a ready step are fitness values and the member states gathered (bit for bit,
:meth:`jaxtrainer.distributed.MemberLayout.gather`) so that losers on any device
can copy winners on any other. The PopulationTrainer's ask/evaluate/tell contract
would instead move every member's full training state through replicated
``ask``/``tell`` each generation. One ``Trainer`` step = one ``training_step`` of
every member; ``Trainer(max_steps=N)`` trains each member for ``N`` updates.

Hyperparameters are traced values, never constants: a module is PBT-ready when
its state has a ``hyperparams: dict[str, float32[]]`` field that its
``training_step`` reads (the ``TUNABLE`` names of
:class:`~jaxtrainer.algorithms.PPO`, :class:`~jaxtrainer.algorithms.A2C`,
:class:`~jaxtrainer.algorithms.SAC`, :class:`~jaxtrainer.algorithms.TD3`,
:class:`~jaxtrainer.algorithms.DDPG` and :class:`~jaxtrainer.algorithms.DQN`,
learning rates set in the optimizer state through ``optax.inject_hyperparams``;
an evolution strategy's ``learning_rate`` and ``std``,
:class:`~jaxtrainer.algorithms.es.ESState`, with the ES wrapped as a module by
:class:`~jaxtrainer.population.GenerationModule`), so exploit and explore change
numbers in the state and nothing recompiles.

Each member's module code is traced inside
:func:`jaxtrainer.distributed.member_scope`: its ``pmean``/``local_size``/
``fold_in_device`` behave as on one device, so a data-parallel module trains as
``P`` independent single-device agents. Member ``i``'s keys depend on
(seed, step, i) only. A population that does not divide the device count is
padded at the end (:class:`~jaxtrainer.distributed.MemberLayout`): padding
members train but are never ranked, never copied from or into, and never reach
a metric.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer import _arguments as arguments
from jaxtrainer.algorithms.hyperparams import get_hyperparams, set_hyperparams
from jaxtrainer.distributed import AXIS_NAME, per_device
from jaxtrainer.distributed._axis import AxisName
from jaxtrainer.metrics import Last, Max, Mean
from jaxtrainer.module import Module
from jaxtrainer.population.members import MemberPopulation, mean_parts

__all__ = ["EXPLOITS", "EXPLORES", "PBT", "Hyperparam", "PBTState"]

EXPLOITS = ("truncation", "binary_tournament", "cso")
EXPLORES = ("perturb", "resample")


@dataclasses.dataclass(frozen=True)
class Hyperparam:
    """Search space of one tuned hyperparameter.

    Initial values are drawn from the prior (log-uniform when ``log``, else
    uniform on ``[low, high]``); explore keeps every value in ``[low, high]``.

    Raises:
      ValueError: ``low >= high``, or ``log`` with ``low <= 0``.
    """

    low: float
    high: float
    log: bool = True

    def __post_init__(self) -> None:
        if not float(self.low) < float(self.high):
            raise ValueError(f"Hyperparam(low={self.low}, high={self.high}): need low < high")
        if self.log and self.low <= 0:
            raise ValueError(f"Hyperparam(low={self.low}, log=True): a log-uniform prior "
                             "needs low > 0; pass log=False")

    @classmethod
    def of(cls, spec: Any) -> Hyperparam:
        """A :class:`Hyperparam`, a ``(low, high)`` pair (log-uniform when ``low > 0``)
        or a mapping ``{"low", "high", "log"}`` (e.g. from YAML)."""
        if isinstance(spec, Hyperparam):
            return spec
        if isinstance(spec, Mapping):
            return cls(float(spec["low"]), float(spec["high"]), bool(spec.get("log", True)))
        try:
            low, high = (float(v) for v in spec)
        except (TypeError, ValueError):
            raise ValueError(f"hyperparameter space {spec!r}: expected (low, high), "
                             "{'low':, 'high':, 'log':} or a Hyperparam") from None
        return cls(low, high, low > 0)

    def sample(self, key: jax.Array) -> jax.Array:
        """One draw from the prior: ``float32[]``."""
        if self.log:
            u = jax.random.uniform(key, (), jnp.float32, jnp.log(self.low), jnp.log(self.high))
            return jnp.clip(jnp.exp(u), self.low, self.high)
        return jax.random.uniform(key, (), jnp.float32, self.low, self.high)

    def clip(self, value: jax.Array) -> jax.Array:
        return jnp.clip(value, self.low, self.high)

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """Points ``u: float[n]`` of ``[0, 1)`` mapped onto the space (its
        inverse CDF: log-uniform when ``log``): ``float32[n]``, host side."""
        u = np.asarray(u, np.float64)
        if self.log:
            lo, hi = np.log(self.low), np.log(self.high)
            return np.clip(np.exp(lo + u * (hi - lo)), self.low, self.high).astype(np.float32)
        return (self.low + u * (self.high - self.low)).astype(np.float32)


@struct.dataclass
class PBTState:
    """State of a PBT population; member leaves are ``[P_pad, ...]`` (sharded).

    Attributes:
      members: the wrapped module's states stacked on a leading member axis.
      fitness: ``float32[P_pad]`` fitness measured at the last ready step
        (``-inf`` before the first), inherited by a member that copies a winner.
      window_total, window_count: ``float32[P_pad]`` the fitness metric summed
        (total and sample count) since the last ready step.
      parent: ``int32[P_pad]`` the member each one last copied (its own index
        when it has not copied yet).
      step: ``int32[]`` updates done (replicated).
      exploits: ``int32[]`` member copies made so far (replicated).
      velocity: with ``exploit="cso"``, ``{name: float32[P_pad]}`` each member's
        velocity of each tuned hyperparameter (in log space for a log space;
        sharded); ``None`` otherwise.
    """

    members: Any
    fitness: jax.Array
    window_total: jax.Array
    window_count: jax.Array
    parent: jax.Array
    step: jax.Array
    exploits: jax.Array
    velocity: dict[str, jax.Array] | None


class PBT(MemberPopulation):
    """Population-based training of ``module`` (see the module docstring).

    Metrics of :meth:`training_step` (per update, reduced by the Trainer over a
    log interval by their reductions, see :mod:`jaxtrainer.metrics`):
      * every metric of the wrapped module over the ``P`` real members, with
        its own reduction: a :class:`~jaxtrainer.metrics.Mean` (or plain
        scalar) such as ``train/episode_return`` pools the members' samples,
        ``Max``/``Min``/``Sum`` take the max/min/sum over members, ``Last``
        (e.g. a learning rate) the mean of the members' current values;
      * ``member/<i>/<name>`` for every ``name`` in ``member_metrics`` (its own
        reduction) and every tuned hyperparameter (``Last``: its value after
        the interval), and ``member/<i>/fitness`` (``Last``), for ``i < P``;
      * ``fitness/max`` (``Max``: the best current fitness of the interval),
        ``fitness/min`` (``Min``: the worst) and ``fitness/mean``, over real
        members with a finite current fitness (this window's mean of
        ``fitness_metric``, else the last measured one);
        ``pbt/exploits`` (``Last``): member copies made so far.

    :meth:`evaluation_step` evaluates every member with the wrapped module's
    ``evaluation_step`` and reports, for each of its metrics ``eval/x``:
    ``eval/x`` of the member with the best current fitness (chosen without
    looking at the evaluation), ``eval/x_max`` over members, ``eval/x_mean``
    and ``member/<i>/eval/x``.

    Args:
      module: any :class:`~jaxtrainer.Module` whose state has a
        ``hyperparams: dict[str, float32[]]`` field (or, for a dict state, key)
        read by ``training_step``.
        Its sizes are per member (each member is one single-device agent).
      hyperparams: ``{name: space}`` the hyperparameters to tune, names from the
        state's ``hyperparams``; a space is a :class:`Hyperparam`, ``(low,
        high)`` or ``{"low", "high", "log"}``. Initial values are drawn from it.
      population_size: ``P`` members, global (>= 2).
      ready_every_n_steps: updates between exploit/explore rounds (>= 1).
      exploit: ``"truncation"`` (the bottom ``truncation_fraction`` of members
        each copy a uniformly drawn member of the top fraction) or
        ``"binary_tournament"`` (each member copies a uniformly drawn other
        member whose fitness is higher). Jaderberg et al. Sec. 4.1. Or
        ``"cso"``, the competitive swarm optimiser (Cheng & Jin 2015, "A Competitive
        Swarm Optimizer for Large Scale Optimization", Eq. 4-5 without the
        swarm-mean term; EvoRL's PBT-CSO, ``EMI-Group/evorl``,
        ``pbt_cso_param_ppo.py``), replacing exploit *and* explore: members meet
        in random pairs; the loser of each pair copies the winner's state and
        takes the hyperparameters ``x_l + v_l'``, ``v_l' = r1 v_l + r2 (x_w - x_l)``
        (``r1, r2 ~ U[0, 1)`` per member and hyperparameter; ``x`` in log space
        for a log space; clipped to the space), its velocity kept in the state.
        Needs an even ``population_size``; ``explore``, ``perturb_factors`` and
        ``resample_probability`` are unused.
      explore: ``"perturb"`` (multiply by a factor drawn from
        ``perturb_factors``, clip to the space; with probability
        ``resample_probability`` redraw from the prior instead) or
        ``"resample"`` (always redraw).
      fitness_metric: the wrapped module's training metric ranked on (higher
        is better), averaged over the updates since the last ready step.
      member_metrics: wrapped-module metrics also logged per member.
      axis_name: the mesh axis (or axes) the members are sharded over.
      vectorize: ``True``: ``vmap`` each device's members (fast); ``False``:
        ``lax.map`` them, one member's program after another
        (:class:`~jaxtrainer.population.members.MemberPopulation`).
        Members whose step cannot be batched inside ``shard_map`` need
        ``False``: an evosax ES (:class:`~jaxtrainer.population.GenerationModule`)
        whose fitness shaping ranks with ``jax.scipy.stats.rankdata`` (OpenAI-ES's
        centered ranks), whose ``lax.cond`` JAX 0.10 cannot batch there.

    Raises:
      ValueError: at construction, a bad population size, interval, fraction,
        factor, probability, space, or an unknown ``exploit``/``explore`` (the
        message lists the choices); in :meth:`validate` (before compiling) a
        hyperparameter or ``fitness_metric`` the module does not have (listing
        the ones it has), or the wrapped module's own size checks.
    """

    headline_metric = "fitness/max"  # the population's best member

    def __init__(
        self,
        module: Module,
        hyperparams: Mapping[str, Any],
        population_size: int = 8,
        ready_every_n_steps: int = 10,
        exploit: str = "truncation",
        explore: str = "perturb",
        truncation_fraction: float = 0.25,
        perturb_factors: Sequence[float] = (0.8, 1.2),
        resample_probability: float = 0.25,
        fitness_metric: str = "train/episode_return",
        member_metrics: Sequence[str] = ("train/episode_return",),
        axis_name: AxisName = AXIS_NAME,
        vectorize: bool = True,
    ) -> None:
        if isinstance(population_size, bool) or not isinstance(population_size, int) \
                or population_size < 2:
            raise ValueError(f"PBT: population_size={population_size!r}: expected an int >= 2")
        if isinstance(ready_every_n_steps, bool) or not isinstance(ready_every_n_steps, int) \
                or ready_every_n_steps < 1:
            raise ValueError(f"PBT: ready_every_n_steps={ready_every_n_steps!r}: "
                             "expected an int >= 1")
        if exploit not in EXPLOITS:
            raise ValueError(f"PBT: exploit={exploit!r}: choose one of {EXPLOITS}")
        if explore not in EXPLORES:
            raise ValueError(f"PBT: explore={explore!r}: choose one of {EXPLORES}")
        arguments.number("truncation_fraction", truncation_fraction, 0.0, 0.5, low_open=True)
        if isinstance(perturb_factors, (str, bytes)) or not isinstance(perturb_factors, Sequence) \
                or not perturb_factors or not all(
                    isinstance(f, numbers.Real) and not isinstance(f, bool) and f > 0
                    for f in perturb_factors):
            raise arguments.ArgumentError("perturb_factors", perturb_factors,
                                          ": expected a list of positive numbers")
        factors = tuple(float(f) for f in perturb_factors)
        arguments.number("resample_probability", resample_probability, 0.0, 1.0)
        if exploit == "cso" and population_size % 2:
            raise ValueError(f"PBT: exploit='cso' meets members in pairs: population_size="
                             f"{population_size} is odd (use an even size)")
        if not hyperparams:
            raise ValueError("PBT: hyperparams is empty: name at least one hyperparameter "
                             "to tune, e.g. {'lr': (1e-4, 1e-2)}")
        super().__init__(module, population_size, axis_name, name="PBT", vectorize=vectorize)
        self.spaces = {str(name): Hyperparam.of(space) for name, space in hyperparams.items()}
        self.ready_every_n_steps = ready_every_n_steps
        self.exploit = exploit
        self.explore = explore
        self.truncation_fraction = float(truncation_fraction)
        self.perturb_factors = factors
        self.resample_probability = float(resample_probability)
        self.fitness_metric = fitness_metric
        self.member_metrics = tuple(member_metrics)

    # ---- checks ----------------------------------------------------------------
    def validate(self, num_devices: int) -> None:
        """Check the wrapped module and the tuned names, shape-only, before compiling.

        Raises:
          ValueError: see the class docstring.
        """
        self.validate_members(num_devices, self.spaces,
                              (self.fitness_metric, *self.member_metrics))

    def hparams(self) -> dict[str, Any]:
        return {
            "pbt": {
                "population_size": self.population_size,
                "ready_every_n_steps": self.ready_every_n_steps,
                "exploit": self.exploit, "explore": self.explore,
                "truncation_fraction": self.truncation_fraction,
                "perturb_factors": list(self.perturb_factors),
                "resample_probability": self.resample_probability,
                "fitness_metric": self.fitness_metric,
                "vectorize": self.vectorize,
                "hyperparams": {n: dataclasses.asdict(s) for n, s in self.spaces.items()},
            },
            "module": type(self.module).__name__,
            **self.module.hparams(),
        }

    # ---- Module ----------------------------------------------------------------
    def init_state(self, key: jax.Array) -> PBTState:
        """Member ``i``: ``module.init_state(fold_in(fold_in(key, 0), i))`` with each
        tuned hyperparameter drawn from its prior with ``fold_in(fold_in(key, 1), i)``."""
        ids = self.layout.ids()
        init_keys = self.layout.keys(jax.random.fold_in(key, 0), ids)
        hp_keys = self.layout.keys(jax.random.fold_in(key, 1), ids)
        draws = {name: jax.vmap(lambda k, j=j, s=space: s.sample(jax.random.fold_in(k, j)))(hp_keys)
                 for j, (name, space) in enumerate(self.spaces.items())}
        members = self.init_members(init_keys, ids, draws)  # every leaf sharded, even constants
        local = self.layout.local_count
        per_member = per_device((jnp.full((local,), -jnp.inf, jnp.float32),
                                 jnp.zeros((local,), jnp.float32),
                                 jnp.zeros((local,), jnp.float32)))
        velocity = None if self.exploit != "cso" else per_device(
            {name: jnp.zeros((local,), jnp.float32) for name in self.spaces})
        return PBTState(members, *per_member, ids, jnp.zeros((), jnp.int32),
                        jnp.zeros((), jnp.int32), velocity)

    def default_member(self, state: PBTState) -> int:
        """The member with the best current fitness (:meth:`current_fitness`),
        the one ``evaluation_step`` reports. Host side."""
        return self._best(jax.device_get(state.replace(members=None)))  # host copies

    def _best(self, small: PBTState) -> int:
        """:meth:`default_member` of a host copy of the state without its members."""
        return int(self.layout.rank(jnp.asarray(self.current_fitness(small)))[0])

    def describe_member(self, state: PBTState, member: int) -> str:
        """``"fitness (train/episode_return) 412.5, the best; lr=0.0031, ent_coef=0.012"``:
        member ``member``'s current fitness (:meth:`current_fitness` of
        ``fitness_metric``), whether it is the best (the member evaluated and
        loaded when none is named), and its tuned hyperparameters. Host side."""
        small = jax.device_get(state.replace(members=None))
        fitness = np.asarray(self.current_fitness(small))[:self.population_size]
        best = ", the best" if member == self._best(small) else ""  # one fetch of the state
        tuned = {n: np.asarray(v)[member] for n, v in jax.device_get(
            get_hyperparams(state.members)).items() if n in self.spaces}  # host: any sharding
        values = ", ".join(f"{n}={float(tuned[n]):.4g}" for n in self.spaces if n in tuned)
        return f"fitness ({self.fitness_metric}) {float(fitness[member]):.4g}{best}; {values}"

    def current_fitness(self, state: PBTState) -> jax.Array:
        """This window's mean of the fitness metric, else the last measured fitness."""
        count = state.window_count
        return jnp.where(count > 0, state.window_total / jnp.maximum(count, 1.0), state.fitness)

    def training_step(self, state: PBTState, key: jax.Array) -> tuple[PBTState, dict]:
        """One update of every member (vmapped over this device's members), then,
        every ``ready_every_n_steps`` updates, exploit and explore."""
        pbt_key = jax.random.fold_in(key, 1)
        state, metrics = self.train_and_measure(state, jax.random.fold_in(key, 0))
        ready = state.step % self.ready_every_n_steps == 0
        state = jax.lax.cond(ready, lambda s: self._exploit_and_explore(s, pbt_key),
                             lambda s: s, state)
        metrics["pbt/exploits"] = Last.of(state.exploits.astype(jnp.float32))
        return state, metrics

    def train_and_measure(self, state: Any, key: jax.Array) -> tuple[Any, dict]:
        """One update of every member (member ``i`` with ``fold_in(key, i)``),
        the fitness metric added to the window, the step counted: ``(state,
        metrics)`` (the metrics of the class docstring but ``pbt/exploits``)."""
        ids = self.layout.ids()
        members, inner = self.train_members(state.members, self.layout.keys(key, ids))
        total, count = mean_parts(inner[self.fitness_metric])
        state = state.replace(members=members, window_total=state.window_total + total,
                              window_count=state.window_count + count, step=state.step + 1)
        return state, self._metrics(state, ids, inner)

    # ---- exploit / explore ---------------------------------------------------
    def select(self, fitness: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Which member each member becomes.

        Args:
          fitness: ``float32[P]`` of the real members (NaN ranks lowest).
          key: the same on every device.

        Returns:
          ``(source: int32[P], copied: bool[P])``: member ``i`` continues as
          (a copy of) member ``source[i]``; ``copied[i]`` when ``source[i] != i``.
        """
        size = self.population_size
        fitness = jnp.where(jnp.isnan(fitness), -jnp.inf, fitness)  # NaN loses every tournament
        own = jnp.arange(size, dtype=jnp.int32)
        if self.exploit == "truncation":
            cut = max(1, int(self.truncation_fraction * size))
            order = self.layout.rank(fitness, worst_first=True)
            losers, winners = order[:cut], order[size - cut:]
            picks = winners[jax.random.randint(key, (cut,), 0, cut)]
            source = own.at[losers].set(picks.astype(jnp.int32))
        elif self.exploit == "binary_tournament":  # compare with one drawn other member
            offset = jax.random.randint(key, (size,), 1, size)
            other = (own + offset) % size
            source = jnp.where(fitness[other] > fitness, other, own).astype(jnp.int32)
        else:  # cso: random pairs; the loser (the second on a tie) copies the winner
            first, second = jax.random.permutation(key, size).reshape(2, size // 2)
            wins = fitness[first] > fitness[second]
            winner, loser = jnp.where(wins, first, second), jnp.where(wins, second, first)
            source = own.at[loser].set(winner.astype(jnp.int32))
        return source, source != own

    def explore_hyperparams(self, hyperparams: dict[str, jax.Array],
                            key: jax.Array) -> dict[str, jax.Array]:
        """New values for ONE copied member: ``{name: float32[]}`` -> same, each
        tuned value perturbed or resampled (class docstring) and within its space."""
        out = dict(hyperparams)
        for j, (name, space) in enumerate(self.spaces.items()):
            k_choice, k_resample, k_prior = jax.random.split(jax.random.fold_in(key, j), 3)
            prior = space.sample(k_prior)
            if self.explore == "resample":
                new = prior
            else:
                factors = jnp.asarray(self.perturb_factors, jnp.float32)
                factor = factors[jax.random.randint(k_choice, (), 0, len(self.perturb_factors))]
                perturbed = space.clip(hyperparams[name] * factor)
                redraw = jax.random.uniform(k_resample) < self.resample_probability
                new = jnp.where(redraw, prior, perturbed)
            out[name] = new.astype(hyperparams[name].dtype)
        return out

    def swarm_step(self, own: dict[str, jax.Array], winner: dict[str, jax.Array],
                   velocity: dict[str, jax.Array],
                   key: jax.Array) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """The competitive swarm optimiser's move of ONE losing member
        (``exploit="cso"``): ``(hyperparams, velocity)``, each ``{name:
        float32[]}`` over the tuned names, from its own values ``own``, its
        winner's ``winner`` and its ``velocity`` (class docstring)."""
        new_x, new_v = {}, {}
        for j, (name, space) in enumerate(self.spaces.items()):
            r1, r2 = jax.random.uniform(jax.random.fold_in(key, j), (2,))
            to = (lambda x: jnp.log(x)) if space.log else (lambda x: x)
            x, x_win = to(own[name].astype(jnp.float32)), to(winner[name].astype(jnp.float32))
            v = r1 * velocity[name] + r2 * (x_win - x)
            moved = jnp.exp(x + v) if space.log else x + v
            new_x[name] = space.clip(moved).astype(own[name].dtype)
            new_v[name] = v
        return new_x, new_v

    def _exploit_and_explore(self, state: PBTState, key: jax.Array) -> PBTState:
        return self.exploit_and_explore(state, key)[0]

    def exploit_and_explore(self, state: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        """One exploit/explore round on ``state`` (a :class:`PBTState` or a state
        with its fields): ``(state, copied: bool[P_pad])``, ``copied`` the same
        on every device (padding members never copy)."""
        layout = self.layout
        size, padded = layout.size, layout.padded_size
        ids = layout.ids()
        fitness = layout.gather(self.current_fitness(state))  # [P_pad]
        source, copied = self.select(layout.unpad(fitness), jax.random.fold_in(key, 0))
        # padding members continue as themselves
        source = jnp.concatenate([source, jnp.arange(size, padded, dtype=jnp.int32)])
        copied = jnp.concatenate([copied, jnp.zeros((padded - size,), bool)])
        everyone = layout.gather(state.members)  # [P_pad, ...] on every device
        src = source[ids]
        mine = copied[ids]
        members = jax.tree.map(
            lambda all_, local: jnp.where(mine.reshape((-1,) + (1,) * (local.ndim - 1)),
                                          jnp.take(all_, src, axis=0), local),
            everyone, state.members)
        current = get_hyperparams(members)
        velocity = state.velocity
        if self.exploit == "cso":
            own = get_hyperparams(state.members)
            winner = {name: layout.gather(own[name])[src] for name in self.spaces}
            explored, moved = jax.vmap(self.swarm_step)(
                {name: own[name] for name in self.spaces}, winner, velocity,
                layout.keys(jax.random.fold_in(key, 1), ids))
            velocity = {name: jnp.where(mine, moved[name], v) for name, v in velocity.items()}
        else:
            explored = jax.vmap(self.explore_hyperparams)(
                current, layout.keys(jax.random.fold_in(key, 1), ids))
        hp = {name: jnp.where(mine, explored[name], value) if name in explored else value
              for name, value in current.items()}
        members = set_hyperparams(members, hp)
        zeros = jnp.zeros_like(state.window_total)
        return state.replace(
            members=members, fitness=fitness[src], window_total=zeros, window_count=zeros,
            velocity=velocity,
            parent=jnp.where(mine, src, state.parent),
            exploits=state.exploits + jnp.sum(copied).astype(jnp.int32)), copied

    # ---- metrics ---------------------------------------------------------------
    def _metrics(self, state: PBTState, ids: jax.Array, inner: dict[str, Any]) -> dict:
        real = self.layout.mask(ids)
        metrics: dict[str, Any] = {}
        for name, value in inner.items():
            metrics[name] = self.over_members(value, real)
        fitness = self.current_fitness(state)
        metrics.update(self.layout.fitness_metrics(fitness, jnp.isfinite(fitness)))
        safe = jnp.where(jnp.isfinite(fitness), fitness, 0.0)
        per_member = {name: inner[name] for name in self.member_metrics}
        per_member.update({name: Last(value, jnp.ones_like(value)) for name, value
                           in get_hyperparams(state.members).items() if name in self.spaces})
        per_member["fitness"] = Last(safe, jnp.isfinite(fitness).astype(jnp.float32))
        metrics.update(self.per_member("member/", per_member))
        return metrics

    # ---- evaluation ------------------------------------------------------------
    def evaluation_step(self, state: PBTState, key: jax.Array) -> dict[str, Mean]:
        """Every member's ``module.evaluation_step`` (member ``i`` with
        ``fold_in(key, i)``); metrics as in the class docstring."""
        layout = self.layout
        ids = layout.ids()
        inner = self.evaluate_members(state.members, self.evaluation_keys(state, key))
        best = layout.rank(layout.gather(self.current_fitness(state)))[0]
        real = layout.mask(ids)
        is_best = ids == best
        metrics: dict[str, Any] = {}
        for name, value in inner.items():
            total, count = mean_parts(value)
            metrics[name] = Mean(total, count).over_members(is_best)
            metrics[f"{name}_mean"] = Mean(total, count).over_members(real)
            per = total / jnp.maximum(count, 1.0)
            metrics[f"{name}_max"] = Max.of(per, real & (count > 0))
        metrics.update(self.per_member("member/", inner))
        return metrics
