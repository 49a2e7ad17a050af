"""Optuna's samplers choosing a :class:`~jaxtrainer.population.Search`'s trials, round by round.

A search with ``sampler="optuna"`` and ``rounds=R`` trains ``P`` trials at a
time in one compiled program. Before each round :class:`OptunaSearch` asks
the study for the round's trials (the ``P`` it starts with and one for each
slot a rung frees) and writes their hyperparameters into the state's trial
table (same shapes and shardings: nothing recompiles); when the round ends it
evaluates every member (the Trainer's evaluation program: greedy episodes,
compiled once) and tells the study each trial's result: its evaluation
(``eval/episode_return`` by default), ``PRUNED`` for a trial stopped at a
rung, ``FAIL`` for a non-finite value. The study lives in Optuna's storage, by
default ``<run>/study.db`` (SQLite), or any database URL Optuna takes; each
trial records its search trial id and the run's id (a random token drawn when
the run starts and kept in its checkpoints, never a path) as user attributes,
so a resumed run (``ckpt_path``) tells the trials it was running and asks only
for rounds not asked yet, also when its run directory was moved or copied to
another machine: the study grows, and no trial is asked twice. A search that
completes its budget leaves no trial of its own ``RUNNING``: one it asked but
did not finish (a resume from an earlier checkpoint, with fewer rounds) is
told ``FAIL``.

Samplers: ``tpe`` (``optuna.samplers.TPESampler``, Bergstra et al. 2011,
"Algorithms for Hyper-Parameter Optimization"), ``cmaes``
(``CmaEsSampler``, needs the ``cmaes`` package) and ``random``.
"""

from __future__ import annotations

import math
import os
import uuid
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxtrainer.callbacks.base import Callback
from jaxtrainer.distributed.keys import host_seed

if TYPE_CHECKING:
    from jaxtrainer.module import Module
    from jaxtrainer.trainer import Trainer

_OPTUNA_SAMPLERS = ("tpe", "cmaes", "random")
_OBJECTIVES = ("evaluation", "fitness")
"""What a trial's value is: its greedy evaluation when its round ends, or its
fitness (the ranked training metric averaged since its last rung)."""
_STUDY_FILE = "study.db"
_TRIAL_ATTR, _RUN_ATTR = "search_trial", "search_run"


def check_sampler(name: str) -> str:
    """``name`` if it is one of :data:`_OPTUNA_SAMPLERS`.

    Raises:
      ValueError: an unknown name (listing :data:`_OPTUNA_SAMPLERS`).
    """
    if name not in _OPTUNA_SAMPLERS:
        raise ValueError(f"search.sampler={name!r} with search.method=optuna: choose one of "
                         f"{', '.join(_OPTUNA_SAMPLERS)}")
    return name


def _check_storage(url: str) -> None:
    """Open Optuna's storage at ``url`` once (creating its tables, as the run
    would), so that a URL that cannot serve is refused before anything runs.

    Raises:
      ValueError: ``url`` is not a database URL, names a driver that is not
        installed, or a database that cannot be opened (the reason given).
    """
    import optuna

    try:
        optuna.storages.RDBStorage(url).engine.dispose()
    except Exception as e:  # sqlalchemy's and Optuna's own errors
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"search.storage={url!r}: {reason}; expected a database URL Optuna can "
                         "open, e.g. sqlite:///searches/study.db (a file in an existing "
                         "directory) or postgresql://user@host/db with its driver installed") from None


def _make_sampler(name: str, seed: int) -> Any:
    """Optuna's sampler ``name`` (:func:`check_sampler`) seeded with ``seed``."""
    import optuna

    check_sampler(name)
    samplers = {"tpe": optuna.samplers.TPESampler, "cmaes": optuna.samplers.CmaEsSampler,
                "random": optuna.samplers.RandomSampler}
    return samplers[name](seed=seed)


def _suggest(trial: Any, name: str, space: Any) -> float:
    """``trial``'s value of hyperparameter ``name`` in ``space`` (a
    :class:`~jaxtrainer.population.spaces.Choice` is categorical)."""
    if hasattr(space, "values"):
        return float(trial.suggest_categorical(name, list(space.values)))
    return float(trial.suggest_float(name, space.low, space.high, log=space.log))


def _with_rows(column: jax.Array, first: int, rows: np.ndarray) -> jax.Array:
    """``column`` (replicated: every device holds all of it) with ``rows``
    written from index ``first``, as an array of the same sharding (on any
    number of processes: built from this process's replica)."""
    host = np.array(column.addressable_data(0))
    host[first:first + len(rows)] = rows
    return jax.make_array_from_callback(host.shape, column.sharding, lambda index: host[index])


class OptunaSearch(Callback):
    """Ask Optuna for a search's trials and tell it their results (module docstring).

    Args:
      sampler: one of :data:`_OPTUNA_SAMPLERS`.
      storage: Optuna's storage URL; ``None``: ``sqlite:///<run>/study.db``.
      study_name: the study's name in the storage (loaded if it exists).
      seed: of the sampler.
      metric: the evaluation metric told (each member's ``member/<i>/<metric>``).
      objective: ``"evaluation"`` (each trial's ``metric``, evaluated when its
        round ends) or ``"fitness"`` (its training fitness: no evaluation runs
        at round ends; greedy evaluations can differ between device layouts
        where float rounding flips a nearly tied action, training does not).

    Attributes:
      study: the ``optuna.Study`` (global-zero process; ``None`` elsewhere).

    Raises:
      TypeError: in ``setup``, a module that is not a ``Search`` with
        ``sampler="optuna"``.
      ValueError: an unknown ``sampler`` or a ``storage`` that cannot be
        opened (:func:`_check_storage`); in ``setup``, a round length that
        ``log_every_n_steps`` does not divide (rounds end at log intervals).
    """

    order = 80  # before the recipes' final evaluation (90), which reuses this one

    def __init__(self, sampler: str = "tpe", storage: str | None = None,
                 study_name: str = "search", seed: int = 0,
                 metric: str = "eval/episode_return", objective: str = "evaluation") -> None:
        check_sampler(sampler)
        if storage is not None:
            _check_storage(storage)
        if objective not in _OBJECTIVES:
            raise ValueError(f"OptunaSearch: objective={objective!r}: choose one of "
                             f"{', '.join(_OBJECTIVES)}")
        self.objective = objective
        self.sampler, self.storage, self.study_name, self.seed = sampler, storage, study_name, seed
        self.metric = metric
        self.study: Any = None
        self.run_id: str | None = None
        self._evaluated: tuple[int, dict[str, float]] | None = None

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        from jaxtrainer.population.search import HOST_SAMPLER, Search

        if not isinstance(module, Search) or module.sampler != HOST_SAMPLER:
            raise TypeError(f"OptunaSearch chooses the trials of a Search(sampler="
                            f"{HOST_SAMPLER!r}), got {type(module).__name__}")
        if stage != "fit":
            return
        # a new run draws its id; a resumed one gets it back from the checkpoint
        # (load_state_dict), or, saved before runs had ids, is known by its path
        self.run_id = uuid.uuid4().hex if trainer.ckpt_path is None else None
        interval = trainer.planner.log_every_n_steps  # this fit's (a Budget's rounds divide it)
        if module.round_steps % interval:
            raise ValueError(f"OptunaSearch: a round of {module.round_steps} updates does not end "
                             f"on a log interval (trainer.log_every_n_steps={interval}): choose "
                             "a log interval dividing it")
        if not trainer.is_global_zero:
            return
        import optuna

        os.makedirs(trainer.log_dir, exist_ok=True)
        storage = self.storage or f"sqlite:///{os.path.join(trainer.log_dir, _STUDY_FILE)}"
        self.study = optuna.create_study(storage=storage, study_name=self.study_name,
                                         sampler=_make_sampler(self.sampler, host_seed(self.seed)),
                                         direction="maximize", load_if_exists=True)
        asked = len(self.study.get_trials(deepcopy=False))
        if asked:  # a resumed study: a sampler seeded as before would draw its first trials again
            self.study.sampler = _make_sampler(self.sampler, host_seed(self.seed + asked))

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.run_id = state_dict.get("run_id")

    def _run(self, trainer: Trainer) -> str:
        """This run's identity in the study: its id (an absolute path only for a
        run saved before runs had ids)."""
        return self.run_id or os.path.abspath(trainer.log_dir)

    def needs_state(self, trainer: Trainer, module: Any, step: int) -> bool:
        return step % module.round_steps == 0

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        self._ask_if_due(trainer, module)

    def on_evaluation_end(self, trainer: Trainer, module: Module, metrics: dict[str, float]) -> None:
        self._evaluated = (trainer.global_step, dict(metrics))

    def on_train_steps_end(self, trainer: Trainer, module: Any, metrics: dict[str, float]) -> None:
        step, length = trainer.global_step, module.round_steps
        if trainer.state_ahead or not (step >= trainer.max_steps or
                                       (step % length == 0 and step // length < module.rounds)):
            return
        evaluation: dict[str, float] = {}
        if self.objective == "evaluation":
            if self._evaluated is None or self._evaluated[0] != step:
                trainer.run_evaluation(module)  # every member's greedy return (on_evaluation_end)
            evaluation = self._evaluated[1]
        self._tell(trainer, module, min((step - 1) // length, module.rounds - 1), evaluation)
        self._ask_if_due(trainer, module)

    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """A search that spent its budget closes its trials still open (``FAIL``)."""
        if self.study is None or trainer.global_step < trainer.max_steps:
            return  # stopped early: a resume finishes them
        import optuna

        running = optuna.trial.TrialState.RUNNING
        for number in self._numbers(trainer).values():
            if self.study.trials[number].state == running:
                self.study.tell(number, state=optuna.trial.TrialState.FAIL)

    # ---- asking and telling --------------------------------------------------------
    def _numbers(self, trainer: Trainer) -> dict[int, int]:
        """``{search trial id: Optuna trial number}`` of this run's asked trials."""
        return {int(t.user_attrs[_TRIAL_ATTR]): t.number for t in self.study.get_trials(deepcopy=False)
                if t.user_attrs.get(_RUN_ATTR) == self._run(trainer)}

    def _ask_if_due(self, trainer: Trainer, module: Any) -> None:
        """At a round's start, write its trials into the table: asked now, or
        (a resume at that boundary) those asked before it stopped."""
        step, length = trainer.global_step, module.round_steps
        if step % length or step // length >= module.rounds:
            return
        first = step // length * module.trials_per_round
        ids = range(first, first + module.trials_per_round)
        rows = {name: np.zeros(len(ids), np.float32) for name in module.spaces}
        if self.study is not None:
            asked = self._numbers(trainer)
            for k, t in enumerate(ids):
                if t in asked:
                    params = self.study.trials[asked[t]].params
                    values = {n: float(params[n]) for n in module.spaces}
                else:
                    trial = self.study.ask()
                    trial.set_user_attr(_TRIAL_ATTR, t)
                    trial.set_user_attr(_RUN_ATTR, self._run(trainer))
                    values = {n: _suggest(trial, n, s) for n, s in module.spaces.items()}
                for n in module.spaces:
                    rows[n][k] = values[n]
        rows = trainer.strategy.broadcast(rows)
        trainer.update_state(lambda state: state.replace(
            table={n: _with_rows(column, first, rows[n]) for n, column in state.table.items()}))

    def _tell(self, trainer: Trainer, module: Any, round_index: int,
              evaluation: dict[str, float]) -> None:
        """Tell the study the results of round ``round_index``'s trials: the
        evaluation of each member still running one, pruned for the others."""
        if self.study is None:
            return
        import optuna

        from jaxtrainer.population.search_report import search_rows, trial_evals

        state = trainer.peek_state()
        evals = trial_evals(state, module, evaluation, self.metric)
        done = {r["trial"]: r for r in search_rows(state, module, trainer.global_step, evals)
                if r["rung"] == "final" or r["status"] == "stopped"}
        asked = self._numbers(trainer)
        first = round_index * module.trials_per_round
        for t in range(first, first + module.trials_per_round):
            if t not in asked or t not in done:
                continue
            number, row = asked[t], done[t]
            if self.study.trials[number].state != optuna.trial.TrialState.RUNNING:
                continue  # told before a resume
            if row["status"] == "stopped":
                self.study.tell(number, state=optuna.trial.TrialState.PRUNED)
            elif math.isfinite(self._value(row)):
                self.study.tell(number, self._value(row))
            else:
                self.study.tell(number, state=optuna.trial.TrialState.FAIL)

    def _value(self, row: dict[str, Any]) -> float:
        """A final row's value for the study (NaN without one)."""
        if self.objective == "fitness":
            return float(row["fitness"])
        return float(row["eval"]) if isinstance(row["eval"], float) else math.nan
