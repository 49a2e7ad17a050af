"""Hyperparameter search of any :class:`jaxtrainer.Module` in one compiled program.

``members`` trials train at once, as the members of a population (the member
core of :class:`~jaxtrainer.population.PBT` and
:class:`~jaxtrainer.population.Sweep`: stacked, sharded over the devices,
vmapped). Their hyperparameters are traced values of the state, so no trial
compiles anything: the whole search is one training program.

* Trials are drawn before compiling (:func:`~jaxtrainer.population.spaces.sample_trials`:
  random or scrambled Sobol) into a table of every trial the search can run;
  member ``i`` starts as trial ``i``.
* Without ``rungs`` it is a random (or quasi-random) search: every trial trains
  the whole budget.
* With ``rungs`` (training steps per member), successive halving inside the
  program, as ASHA's rungs (Li et al. 2020, "A System for Massively Parallel
  Hyperparameter Tuning", Alg. 2) with a fixed member count: at each rung the
  members are ranked by ``fitness_metric`` averaged since the previous rung (a
  NaN or infinite value ranks last), and the worst ``fraction`` of them stop.
  Each stopped member's slot goes on with a new trial: ``replace="sample"``
  starts the next trial of the table from a fresh initial state (its own
  key, folded from the trial id); ``replace="exploit"`` copies a member of the
  best ``fraction`` and perturbs its hyperparameters (PBT's truncation exploit and
  explore, :meth:`~jaxtrainer.population.PBT.exploit_and_explore`, reused).
  The count of members and every shape stay fixed, so nothing recompiles.
* With ``rounds > 1`` the budget is split into rounds of ``max_steps //
  rounds`` updates (the last takes the remainder); each round every slot
  starts a new trial from a fresh initial state, and the rungs count from the
  round's start. ``sampler="optuna"``: the host writes each round's trials
  into the table before the round starts
  (:class:`~jaxtrainer.population.optuna_search.OptunaSearch` asks Optuna
  for them and tells it the results); still one program.
* Every trial's history is in the state: its hyperparameters (``table``), its
  metric at each rung it reached (``history``), the rung where it was
  stopped (``stopped``) and its metric when its round ended (``final``); :class:`~jaxtrainer.population.search_report.SearchReport`
  writes them to ``search.csv``.

Budget: ``Trainer(max_steps=N)`` trains each member slot for ``N`` updates; a
trial started at a rung trains for the rest of it. The Trainer's ``env_steps``
count every member (what is printed counts per member, as for a sweep).
Evaluation and the default member (``jaxtrainer eval``, ``load_policy``) are
PBT's: the member with the best current fitness, chosen without looking at the
evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtrainer.algorithms.hyperparams import get_hyperparams
from jaxtrainer.distributed import AXIS_NAME, per_device
from jaxtrainer.distributed._axis import AxisName
from jaxtrainer.distributed._members import rank
from jaxtrainer.distributed.keys import host_seed
from jaxtrainer.metrics import Last
from jaxtrainer.module import Module
from jaxtrainer.population.pbt import PBT, Hyperparam, PBTState
from jaxtrainer.population.spaces import SAMPLERS, Space, parse_space, sample_trials

__all__ = ["REPLACES", "Search", "SearchState"]

HOST_SAMPLER = "optuna"
"""The sampler whose trials the host writes into the table before each round."""

REPLACES = ("sample", "exploit")
"""What a stopped member's slot goes on with: the next sampled trial, or a
perturbed copy of a better member."""


@struct.dataclass
class SearchState(PBTState):
    """State of a search: :class:`~jaxtrainer.population.PBTState`'s fields
    (member leaves ``[P_pad, ...]``, sharded) and the trials' (the same on
    every device but ``trial``).

    Attributes:
      trial: ``int32[P_pad]`` the trial each member slot runs (sharded).
      table: ``{name: float32[T]}`` every trial's hyperparameters (``T`` trials).
      history: ``float32[T, max(R, 1)]`` each trial's fitness at each of the
        ``R`` rungs (NaN where it did not reach it).
      stopped: ``int32[T]`` the rung where the trial was stopped, ``-1`` if not.
      final: ``float32[T]`` the trial's fitness when its round ended (NaN while
        it runs, or when it was stopped).
      next_trial: ``int32[]`` the first trial not started yet.
    """

    trial: jax.Array
    table: dict[str, jax.Array]
    history: jax.Array
    stopped: jax.Array
    final: jax.Array
    next_trial: jax.Array


class Search(PBT):
    """Search ``space`` with ``members`` trials at a time (module docstring).

    Metrics: PBT's (every wrapped-module metric over the members,
    ``member/<i>/<hyperparameter>``, ``member/<i>/fitness``, ``fitness/*``),
    plus ``member/<i>/trial`` (``Last``: the trial member slot ``i`` runs) and
    ``search/trials`` (``Last``: trials started so far). ``evaluation_step``:
    PBT's (``eval/x`` of the member with the best current fitness).

    Args:
      module: a :class:`~jaxtrainer.Module` whose state has a ``hyperparams:
        dict[str, float32[]]`` field read by ``training_step`` (PPO's, A2C's,
        IMPALA's, DQN's, SAC's, TD3's, DDPG's ``TUNABLE``); its sizes are per member.
      space: ``{name: space}``, a space in any form of
        :func:`~jaxtrainer.population.spaces.parse_space` (``"loguniform(1e-5,1e-2)"``).
      members: trials training at once (>= 2).
      rungs: training steps (per member) at which the worst ``fraction`` stop,
        strictly increasing and >= 1; empty: no stopping.
      fraction: of the members stopped at each rung, ``0 < fraction <= 0.5``
        (``max(1, int(fraction * P))`` members).
      replace: ``"sample"`` or ``"exploit"`` (module docstring).
      sampler: ``"random"``, ``"sobol"`` or ``"optuna"`` (the host writes the
        trials: :class:`~jaxtrainer.population.optuna_search.OptunaSearch`).
      rounds: rounds the budget is split into (>= 1).
      seeds: members a trial runs on, each with its own seed (>= 1): the
        population is ``members * seeds``; a trial is ranked by the mean of
        its seeds' fitness, and its evaluation reported per seed (with the IQM
        over seeds in ``search.csv``). Not with ``replace="exploit"``.
      seed: of the sampler (the recipes pass ``trainer.seed``).
      fitness_metric: the training metric ranked on, higher is better.
      member_metrics, axis_name, vectorize: as :class:`~jaxtrainer.population.PBT`.

    Raises:
      ValueError: at construction, an empty or malformed space, ``members < 2``,
        bad rungs, fraction or rounds, an unknown ``replace`` or ``sampler``
        (listing the choices); at ``configure_budget``, a budget of fewer
        updates than rounds, or a rung not inside a round; in :meth:`validate`,
        what PBT's validation raises.
      TypeError: ``module`` is not a :class:`~jaxtrainer.Module`.
    """

    budget_per_member = True
    budget_share: Any = 1
    """The share of a recipe's per-run budget each member slot trains (the
    recipes' ``search.runs``: ``min(1, runs / members)``); 1 from Python."""

    def __init__(self, module: Module, space: Mapping[str, Any], members: int = 8,
                 rungs: Sequence[int] = (), fraction: float = 0.5, replace: str = "sample",
                 sampler: str = "random", seed: int = 0, rounds: int = 1, seeds: int = 1,
                 fitness_metric: str = "train/episode_return",
                 member_metrics: Sequence[str] = ("train/episode_return",),
                 axis_name: AxisName = AXIS_NAME, vectorize: bool = True) -> None:
        if not space:
            raise ValueError("search: the space is empty: name at least one hyperparameter, "
                             "e.g. search.space.lr=loguniform(1e-5,1e-2)")
        spaces: dict[str, Space] = {str(k): parse_space(str(k), v) for k, v in space.items()}
        if isinstance(members, bool) or not isinstance(members, int) or members < 2:
            raise ValueError(f"search.members={members!r}: expected an int >= 2")
        if replace not in REPLACES:
            raise ValueError(f"search.replace={replace!r}: choose one of {', '.join(REPLACES)}")
        rungs = tuple(int(r) for r in rungs)
        if any(r < 1 for r in rungs) or any(b <= a for a, b in zip(rungs, rungs[1:], strict=False)):
            raise ValueError(f"search.rungs={list(rungs)}: expected strictly increasing "
                             "training steps >= 1")
        if not 0.0 < fraction <= 0.5:
            raise ValueError(f"search.fraction={fraction!r}: expected 0 < fraction <= 0.5")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"search.rounds={rounds!r}: expected an int >= 1")
        if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
            raise ValueError(f"search.seeds={seeds!r}: expected an int >= 1")
        if seeds > 1 and replace == "exploit":
            raise ValueError(f"search.seeds={seeds} with search.replace=exploit: a copied member "
                             "is one seed; use replace=sample with several seeds")
        if sampler not in (*SAMPLERS, HOST_SAMPLER):
            raise ValueError(f"search.sampler={sampler!r}: choose one of "
                             f"{', '.join((*SAMPLERS, HOST_SAMPLER))}")
        placeholder = {name: Hyperparam(0.0, 1.0, log=False) for name in spaces}  # PBT checks the rest
        super().__init__(module, placeholder, members * seeds, 1, "truncation", "perturb", fraction,
                         fitness_metric=fitness_metric, member_metrics=member_metrics,
                         axis_name=axis_name, vectorize=vectorize)
        self.name, self.spaces = "search", spaces
        self.rungs, self.replace, self.sampler, self.seed = rungs, replace, sampler, int(seed)
        self.rounds, self.round_steps = rounds, None  # round_steps: at configure_budget
        self.seeds, self.trial_slots = seeds, members  # member i: trial slot i // seeds
        self.stopped_per_rung = max(1, int(self.truncation_fraction * members))
        self.trials_per_round = members + len(rungs) * self.stopped_per_rung
        self.trial_count = rounds * self.trials_per_round
        self.trials = sample_trials(spaces, self.trial_count,
                                    "random" if sampler == HOST_SAMPLER else sampler,
                                    host_seed(self.seed))

    @property
    def restarts_at_zero(self) -> bool:
        """Whether the first step starts round 0 (the host writes its trials)."""
        return self.sampler == HOST_SAMPLER

    def configure_budget(self, max_steps: int) -> None:
        """Each member slot trains ``max_steps`` updates: rounds of
        ``max_steps // rounds`` (the last takes the remainder).

        Raises:
          ValueError: fewer updates than rounds, or a rung not inside a round.
        """
        super().configure_budget(max_steps)
        if max_steps < self.rounds:
            raise ValueError(f"search.rounds={self.rounds}: the budget of {max_steps} updates "
                             "per member is less than one update a round")
        self.round_steps = max_steps // self.rounds
        late = [r for r in self.rungs if r >= self.round_steps]
        if late:
            raise ValueError(f"search.rungs: {late} updates is not inside a round of "
                             f"{self.round_steps} updates; rungs count from a round's start")

    def round_of(self, step: jax.Array) -> jax.Array:
        """The round that the update after ``step`` updates belongs to."""
        length = self.round_steps or np.iinfo(np.int32).max
        return jnp.minimum(step // length, self.rounds - 1)

    def trial_start(self, trial: int) -> int:
        """The update of its round at which ``trial`` started (host side): 0 for
        a round's first ``members`` trials, rung ``r``'s step for the trials
        started in the slots stopped there (trial ids are handed out in that
        order, ``stopped_per_rung`` a rung)."""
        k = int(trial) % self.trials_per_round
        if k < self.trial_slots or not self.rungs:
            return 0
        return self.rungs[min((k - self.trial_slots) // self.stopped_per_rung, len(self.rungs) - 1)]

    def describe_member(self, state: SearchState, member: int) -> str:
        """``"trial 27: lr=0.003, ent_coef=0.012"``: the trial member slot
        ``member`` runs and its hyperparameters (host side); with ``rounds > 1``
        also that it is a trial of the last round."""
        host = jax.device_get({"trial": state.trial, "table": state.table})
        trial = int(host["trial"][member])
        values = ", ".join(f"{n}={float(host['table'][n][trial]):.4g}" for n in self.spaces)
        seed = f" (seed {member % self.seeds + 1} of {self.seeds})" if self.seeds > 1 else ""
        rounds = (f" (of round {self.rounds}: earlier rounds' trials are no longer in the state; "
                  "their results are in search.csv)" if self.rounds > 1 else "")
        return f"trial {trial}{seed}: {values}{rounds}"

    def hparams(self) -> dict[str, Any]:
        spaces = {n: (f"choice({list(s.values)})" if hasattr(s, "values") else
                      f"{'loguniform' if s.log else 'uniform'}({s.low},{s.high})")
                  for n, s in self.spaces.items()}
        return {"search": {"members": self.trial_slots, "seeds": self.seeds,
                           "rungs": list(self.rungs),
                           "fraction": self.truncation_fraction, "replace": self.replace,
                           "sampler": self.sampler, "seed": self.seed, "space": spaces,
                           "rounds": self.rounds,
                           "fitness_metric": self.fitness_metric},
                "module": type(self.module).__name__, **self.module.hparams()}

    # ---- Module ----------------------------------------------------------------
    def init_state(self, key: jax.Array) -> SearchState:
        """Member ``i`` runs trial ``i`` (a padding member a copy of trial
        ``i mod P``), its state ``module.init_state(fold_in(fold_in(key, 0), i))``."""
        layout = self.layout
        ids = layout.ids()
        trial = self._trial_slot(ids)
        table = {name: jnp.asarray(values) for name, values in self.trials.items()}
        members = self.init_members(self._keys(jax.random.fold_in(key, 0), trial, ids), ids,
                                    {name: column[trial] for name, column in table.items()})
        local = layout.local_count
        fitness, window_total, window_count, trial = per_device((
            jnp.full((local,), -jnp.inf, jnp.float32), jnp.zeros((local,), jnp.float32),
            jnp.zeros((local,), jnp.float32), trial.astype(jnp.int32)))
        count = self.trial_count
        return SearchState(members, fitness, window_total, window_count, ids,
                           jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), None, trial,
                           table,
                           # one column at least: checkpoints hold no empty arrays
                           jnp.full((count, max(len(self.rungs), 1)), jnp.nan, jnp.float32),
                           jnp.full((count,), -1, jnp.int32), jnp.full((count,), jnp.nan, jnp.float32),
                           jnp.asarray(0 if self.restarts_at_zero else self.trial_slots, jnp.int32))

    def training_step(self, state: SearchState, key: jax.Array) -> tuple[SearchState, dict]:
        """At a round's start every slot starts a new trial; one update of
        every member; at a rung the worst members stop and their slots go on
        with new trials."""
        if self.rounds > 1 or self.restarts_at_zero:
            length = self.round_steps or np.iinfo(np.int32).max
            starts = (state.step % length == 0) & (state.step < self.rounds * length)
            if not self.restarts_at_zero:
                starts &= state.step > 0
            state = jax.lax.cond(starts, lambda s: self._new_round(s, jax.random.fold_in(key, 2)),
                                 lambda s: s, state)
        state, metrics = self.train_and_measure(state, jax.random.fold_in(key, 0))
        step = state.step
        if self.rungs:
            in_round = step - self.round_of(step - 1) * (self.round_steps or 0)
            at = jnp.asarray(self.rungs, jnp.int32) == in_round
            state = jax.lax.cond(at.any(), lambda s: self._rung(s, jnp.argmax(at),
                                                                jax.random.fold_in(key, 1)),
                                 lambda s: s, state)
        metrics["search/trials"] = Last.of(state.next_trial.astype(jnp.float32))
        trial = state.trial.astype(jnp.float32)
        metrics.update(self.per_member("member/", {"trial": Last(trial, jnp.ones_like(trial))}))
        return state, metrics

    def _trial_slot(self, ids: jax.Array) -> jax.Array:
        """The trial slot member ``ids`` belong to (``id // seeds``; a padding
        member repeats a real one's): ``int32[...]``."""
        return ((ids // self.seeds) % self.trial_slots).astype(jnp.int32)

    def _keys(self, key: jax.Array, trial: jax.Array, ids: jax.Array) -> jax.Array:
        """Initial-state keys of members ``ids`` running ``trial``: folded from
        the trial and the member's seed, whichever device holds it."""
        return self.layout.keys(key, trial * self.seeds + ids % self.seeds)

    def _running(self, state: SearchState) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(trials: int32[S_t], fitness: float32[S_t], members: float32[P])``
        of the ``S_t`` trial slots (each trial's fitness the mean of its seeds'
        finite ones, ``-inf`` without one) and of every real member."""
        layout, size = self.layout, self.population_size
        members = layout.unpad(layout.gather(self.current_fitness(state)))  # [P]
        per_seed = members.reshape(self.trial_slots, self.seeds)
        finite = jnp.isfinite(per_seed)
        count = finite.sum(axis=1)
        fitness = jnp.where(count > 0, jnp.where(finite, per_seed, 0.0).sum(axis=1) /
                            jnp.maximum(count, 1), -jnp.inf)
        trials = layout.unpad(layout.gather(state.trial))[:size:self.seeds]
        return trials, fitness, members

    def _new_round(self, state: SearchState, key: jax.Array) -> SearchState:
        """Record the running trials' final fitness (after round 0), then start
        the round's first trials, one a trial slot, from fresh initial states."""
        trials, fitness, _ = self._running(state)
        final = jnp.where(state.step > 0, state.final.at[trials].set(fitness), state.final)
        ids = self.layout.ids()
        first = self.round_of(state.step) * self.trials_per_round
        trial = first + self._trial_slot(ids)
        everyone = jnp.ones_like(ids, dtype=bool)
        members = self._fresh(state.members, everyone, trial, state.table, key)
        zeros = jnp.zeros_like(state.window_total)
        return state.replace(members=members, fitness=jnp.full_like(zeros, -jnp.inf),
                             window_total=zeros, window_count=zeros, parent=ids, trial=trial,
                             final=final, next_trial=first + self.trial_slots)

    def _rung(self, state: SearchState, rung: jax.Array, key: jax.Array) -> SearchState:
        """Record every running trial's fitness at ``rung``, stop the worst and
        start new trials in their slots."""
        layout, cut = self.layout, self.stopped_per_rung
        trials, fitness, members_fitness = self._running(state)
        history = state.history.at[trials, rung].set(fitness)
        if self.replace == "exploit":  # one seed: a trial slot is a member
            state, copied = self.exploit_and_explore(state, key)
            losing = copied[:self.trial_slots]
        else:
            losers = rank(fitness, worst_first=True)[:cut]  # trial slots, NaN/inf first
            losing = jnp.zeros((self.trial_slots,), bool).at[losers].set(True)
        slots = jnp.nonzero(losing, size=cut)[0]  # the stopped trial slots, in order
        new = state.next_trial + jnp.arange(cut, dtype=jnp.int32)
        stopped = state.stopped.at[trials[slots]].set(rung.astype(jnp.int32))
        ids = layout.ids()
        mine = losing[self._trial_slot(ids)] & layout.mask(ids)
        trial = trials.at[slots].set(new)[self._trial_slot(ids)]
        table = dict(state.table)
        zeros = jnp.zeros_like(state.window_total)
        if self.replace == "exploit":  # the explored values become the new trials' rows
            explored = layout.gather(get_hyperparams(state.members))
            table = {n: column.at[new].set(explored[n][slots].astype(column.dtype))
                     for n, column in table.items()}
        else:
            kept = members_fitness[jnp.minimum(ids, self.population_size - 1)]
            state = state.replace(members=self._fresh(state.members, mine, trial, table, key),
                                  fitness=jnp.where(mine, -jnp.inf, kept),
                                  parent=jnp.where(mine, ids, state.parent))
        return state.replace(trial=trial, table=table, history=history, stopped=stopped,
                             next_trial=state.next_trial + cut, window_total=zeros,
                             window_count=zeros)

    def _fresh(self, members: Any, mine: jax.Array, trial: jax.Array,
               table: dict[str, jax.Array], key: jax.Array) -> Any:
        """``members`` with the slots in ``mine`` restarted: a new initial state
        (key folded from the trial id) with the trial's hyperparameters."""
        ids = self.layout.ids()
        fresh = self.init_members(self._keys(key, trial, ids), ids,
                                  {name: column[trial] for name, column in table.items()})
        return jax.tree.map(
            lambda new, old: jnp.where(mine.reshape((-1,) + (1,) * (old.ndim - 1)), new, old),
            fresh, members)

