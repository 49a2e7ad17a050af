"""The ``search:`` section of the recipes whose algorithm has traced
hyperparameters: a hyperparameter search in one compiled program
(:class:`~jaxtrainer.population.Search`)::

    jaxtrainer fit ppo search.method=asha search.members=32 \\
        'search.space.lr=loguniform(1e-5,1e-2)' 'search.space.ent_coef=uniform(0,0.05)'

* ``search.method``: ``random`` or ``sobol`` (every trial trains the whole
  budget; trials drawn at random or from a scrambled Sobol sequence),
  ``asha`` (successive halving at ``search.rungs``; trials drawn by
  ``search.sampler``: ``random``, the default, or ``sobol``), or ``optuna``
  (each round's trials asked of an Optuna study, ``search.sampler``: ``tpe``,
  the default, ``cmaes`` or ``random``; the study in ``search.storage``, by
  default ``<run>/study.db``); ``null``: no search.
* ``search.seeds``: seeds each trial runs with (``members x seeds`` member
  slots; ranked by the mean over seeds, reported with the IQM and its 95%
  interval over seeds).
* ``search.rounds``: rounds the budget is split into; each round every member
  slot starts a new trial (``optuna`` asks for them between rounds).
* ``search.members``: trials training at once.
* ``search.runs``: the search's budget, in runs of ``trainer.max_env_steps``
  (per seed): each member slot trains ``min(1, runs / members)`` of a run, so
  32 members share 8 runs' env steps (a quarter of a run each) while 8 or
  fewer train a whole run each; ``null``: a whole run per member slot.
* ``search.space.<name>``: ``uniform(low,high)``, ``loguniform(low,high)`` or
  ``choice([v1,v2,...])`` for an ``algorithm:`` key that is a traced
  hyperparameter (the algorithm's ``TUNABLE``).
* ``search.rungs``: env steps per member at which the worst
  ``search.fraction`` of the members stop (``asha`` only; ``null``: at 1/8,
  1/4 and 1/2 of the budget).
* ``search.fraction``: the share of the members stopped at each rung (``asha``).
* ``search.replace``: what a stopped member's slot goes on with: ``sample``
  (new trials) or ``exploit`` (perturbed copies of better members; ``asha``).
* ``search.sampler``: how trials are drawn: ``random`` or ``sobol`` for
  ``asha`` (``null``: ``random``); ``tpe``, ``cmaes`` or ``random`` for
  ``optuna`` (``null``: ``tpe``).
* ``search.storage``: the Optuna study's database URL (``optuna`` only;
  ``null``: ``sqlite`` in ``<run>/study.db``).

The budget keys keep their meaning per run: ``trainer.max_env_steps`` (or
``trainer.max_steps``) is what one run trains for, and each member slot trains
its share (``search.runs``; said when ``fit`` starts if below a whole run). The run holds
``search.csv`` (:class:`~jaxtrainer.population.search_report.SearchReport`);
the recipe's last line is the evaluation of the member with the best fitness.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from omegaconf import DictConfig, OmegaConf

from jaxtrainer.recipes import _catalog as catalog
from jaxtrainer.trainer.budget import Budget

SECTION = "search"
SEARCH_RECIPES = frozenset({"ppo", "a2c", "impala", "dqn", "sac", "td3", "ddpg", "openes"})
"""Recipes whose module keeps traced hyperparameters in ``state.hyperparams``."""

ES_RECIPES = frozenset({"openes"})
"""Recipes of an evolution strategy (a PopulationTrainer run) that can search
(its ``learning_rate`` and ``std`` are traced; CMA-ES adapts its own): in a
search each member is a whole ES run, one training step a generation of every
member (as the ``pbt_openes`` recipe's members)."""

GENERATION_KEYS = {"max_generations": "max_steps", "log_every_n_generations": "log_every_n_steps",
                   "eval_every_n_generations": "eval_every_n_steps"}
"""An ES recipe's ``trainer:`` keys and the Trainer's names for them in a search."""

METHODS = ("random", "sobol", "asha", "optuna")
DEFAULTS: dict[str, Any] = {"method": None, "members": 8, "space": {}, "rungs": None,
                            "fraction": 0.5, "replace": "sample", "sampler": None, "rounds": 1,
                            "seeds": 1, "storage": None, "runs": 8}
"""The section :func:`with_section` adds: no search."""

DEFAULT_RUNGS = (8, 4, 2)
"""Without ``search.rungs``, ``asha`` stops members at 1/8, 1/4 and 1/2 of the budget."""


def with_section(cfg: Any, recipe: str | None) -> Any:
    """``cfg`` with a ``search:`` section (:data:`DEFAULTS`) when ``recipe`` is
    in :data:`SEARCH_RECIPES` and ``cfg`` (a mapping config) has none."""
    if recipe not in SEARCH_RECIPES or not isinstance(cfg, DictConfig) or SECTION in cfg:
        return cfg
    return OmegaConf.merge(cfg, {SECTION: DEFAULTS})


def is_open_key(dotted: str) -> bool:
    """Whether ``dotted`` names a space, ``search.space.<name>`` (any traced
    hyperparameter may be searched)."""
    parts = dotted.split(".")
    return len(parts) == 3 and parts[0] == SECTION and parts[1] == "space" and bool(parts[2])


def active(cfg: DictConfig) -> bool:
    """Whether ``cfg`` asks for a search (``search.method`` set).

    Raises:
      ValueError: ``search.space`` entries without a ``search.method``.
    """
    node = cfg.get(SECTION) if isinstance(cfg, DictConfig) else None
    if not isinstance(node, DictConfig):
        return False
    if node.get("method") is None and node.get("space"):
        raise ValueError(f"search.space.{next(iter(node.space))} is set but search.method is "
                         f"null: choose one of {', '.join(METHODS)}, e.g. search.method=asha")
    return node.get("method") is not None


def budget_share(node: Any) -> Fraction:
    """The share of a run each member slot trains: ``min(1, runs / members)``
    of the ``search:`` section ``node`` (1 when ``runs`` is null).

    Raises:
      ValueError: ``search.runs`` not a positive int.
    """
    runs, members = node.get("runs"), node.get("members")
    if runs is None or isinstance(members, bool) or not isinstance(members, int) or members < 1:
        return Fraction(1)  # a bad search.members is Search's to name
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"search.runs={runs!r}: expected a positive int (the search's budget "
                         "in runs of trainer.max_env_steps) or null (a whole run per member)")
    return min(Fraction(1), Fraction(runs, members))


def host_rounds(cfg: DictConfig) -> int | None:
    """The rounds (``search.rounds``) at whose ends an Optuna search's host tells
    the results and asks for the next trials, for the Trainer's ``Budget``: each
    round ends on a log boundary. ``None``: another method, or a bad
    ``search.rounds`` (:class:`~jaxtrainer.population.Search` names it), or no
    search (a sweep, or a recipe without a ``search:`` section)."""
    if not active(cfg):
        return None
    node = cfg[SECTION]
    rounds = node.get("rounds", 1)
    if node.get("method") != "optuna" or isinstance(rounds, bool) or not isinstance(rounds, int) \
            or rounds < 1:
        return None
    return rounds


def _member_steps(cfg: DictConfig, env_steps_per_step: int) -> int | None:
    """Each member slot's budget in training steps, from the ``trainer:``
    section and its :func:`budget_share`."""
    trainer = cfg.get("trainer") or {}
    steps = trainer.get("max_steps")
    budget = Budget(steps if steps is not None else trainer.get("max_generations"),
                    trainer.get("max_env_steps"), per_member=True, share=budget_share(cfg[SECTION]))
    return budget.total().in_steps(env_steps_per_step) if budget.is_set else None


def rung_steps(cfg: DictConfig, env_steps_per_step: int) -> tuple[int, ...]:
    """``search.rungs`` (env steps per member) as training steps, or the
    :data:`DEFAULT_RUNGS` fractions of the member budget; ``()`` unless ``asha``.

    Raises:
      ValueError: ``search.rungs`` not a strictly increasing list of env
        steps, or a rung below one training step (``env_steps_per_step`` env steps).
    """
    node = cfg[SECTION]
    if node.method not in ("asha", "optuna") or (node.get("rungs") is None and node.method != "asha"):
        return ()
    if node.get("rungs") is None:
        budget = (_member_steps(cfg, env_steps_per_step) or 0) // max(int(node.get("rounds", 1)), 1)
        return tuple(sorted({budget // d for d in DEFAULT_RUNGS if budget // d >= 1}))
    rungs = OmegaConf.to_container(node.rungs) if not isinstance(node.rungs, int) else [node.rungs]
    if not isinstance(rungs, list) or not all(isinstance(r, int) and not isinstance(r, bool)
                                              for r in rungs):
        raise ValueError(f"search.rungs={rungs!r}: expected a list of env steps per member, "
                         "e.g. search.rungs=[50000,100000]")
    if any(b <= a for a, b in zip(rungs, rungs[1:], strict=False)):
        raise ValueError(f"search.rungs={rungs}: expected strictly increasing env steps per member")
    low = [r for r in rungs if r < env_steps_per_step]
    if low:
        raise ValueError(f"search.rungs: {low} env steps is below one training step "
                         f"({env_steps_per_step} env steps per member)")
    return tuple(r // env_steps_per_step for r in rungs)


def wrap(recipe: str, cfg: DictConfig, module: Any) -> Any:
    """``module``, or the :class:`~jaxtrainer.population.Search` of it that
    ``cfg``'s ``search:`` section asks for (sampler seeded with ``trainer.seed``).

    Raises:
      ValueError: a search asked of a recipe outside :data:`SEARCH_RECIPES`, an
        unknown ``search.method`` (listing :data:`METHODS`), a search beside a
        sweep, no ``search.space``, a ``search.space`` entry that names no
        ``algorithm:`` key (the message lists them), a sampler of another
        method, or what :class:`~jaxtrainer.population.Search` rejects.
      ImportError: ``search.method=optuna`` without optuna (naming the extra).
    """
    if not active(cfg):
        return module
    catalog.refuse_recipe(recipe, "search (search.method)", SEARCH_RECIPES)
    node = cfg[SECTION]
    if node.method not in METHODS:
        raise ValueError(f"search.method={node.method!r}: choose one of {', '.join(METHODS)}")
    sweep = cfg.get("sweep") or {}
    if sweep.get("seeds") is not None or sweep.get("hyperparams"):
        raise ValueError("search.method and a sweep (sweep.seeds, sweep.hyperparams) are both "
                         "set: a run is either a search or a sweep")
    algorithm = cfg.get("algorithm") or {}
    space = OmegaConf.to_container(node.space, resolve=True) if node.get("space") else {}
    if not space:
        raise ValueError(f"search.method={node.method} needs at least one search.space.<name>, "
                         "e.g. 'search.space.lr=loguniform(1e-5,1e-2)'")
    for name in space:
        if name not in algorithm:
            raise catalog.unknown_algorithm_key(f"search.space.{name}", name, algorithm, module)
    from jaxtrainer.population.search import Search

    fitness: dict[str, Any] = {}
    if recipe in ES_RECIPES:  # a member is an ES run; its fitness the mean return of a generation
        from jaxtrainer.distributed import AXIS_NAME
        from jaxtrainer.population import GenerationModule

        size = int(cfg.trainer.population_size)
        module.configure_population(size)
        module = GenerationModule(module, size, (AXIS_NAME,))
        fitness = {"fitness_metric": "fitness/mean", "member_metrics": ("fitness/mean",)}
    sampler = {"asha": node.get("sampler") or "random", "optuna": "optuna"}.get(node.method,
                                                                                 node.method)
    if node.method == "optuna":
        from jaxtrainer.population.optuna_search import check_sampler

        check_sampler(node.get("sampler") or "tpe")
        try:
            import optuna  # noqa: F401
        except ImportError:
            raise ImportError('search.method=optuna needs optuna: pip install -e ".[search]" (in a '
                              'checkout; pip install "jaxtrainer[search]" otherwise)') from None
    elif node.method == "asha" and node.get("sampler") not in (None, "random", "sobol"):
        raise ValueError(f"search.sampler={node.sampler!r} with search.method=asha: choose one "
                         "of random, sobol")
    found = Search(module, space, members=node.members,
                   rungs=rung_steps(cfg, int(module.env_steps_per_step)),
                   fraction=float(node.fraction), replace=str(node.replace), sampler=str(sampler),
                   seed=int(cfg.trainer.get("seed", 0) or 0), rounds=node.get("rounds", 1),
                   seeds=node.get("seeds", 1), **fitness)
    found.budget_share = budget_share(node)
    return found


def make_trainer(cfg: DictConfig, **overrides: Any) -> Any:
    """The Trainer of a search of an ES recipe (:data:`ES_RECIPES`): its
    ``trainer:`` section with :data:`GENERATION_KEYS` renamed (a training step
    is one generation of every member) and without the PopulationTrainer's
    ``population_size``, ``member_map`` and ``map_batch_size`` (each member's ES
    population is ``trainer.population_size``, vmapped); keyword ``overrides``
    win, as in :func:`jaxtrainer.recipes.config.make_trainer`.

    Raises:
      ValueError: ``trainer.member_map`` other than ``vmap``, or what
        :func:`jaxtrainer.recipes.config.make_trainer` rejects.
    """
    from jaxtrainer.recipes import config

    section = OmegaConf.to_container(cfg.trainer)
    for key in ("population_size", "map_batch_size"):
        section.pop(key, None)
    if section.pop("member_map", "vmap") != "vmap":
        raise ValueError(f"trainer.member_map={cfg.trainer.member_map!r} with search.method: a "
                         "search vmaps every member's ES population; use trainer.member_map=vmap")
    renamed = OmegaConf.merge({k: v for k, v in cfg.items() if k != "trainer"},
                              {"trainer": {GENERATION_KEYS.get(k, k): v for k, v in section.items()}})
    return config.make_trainer(renamed, **overrides)


def before_fit(trainer: Any, module: Any, cfg: DictConfig | None = None) -> None:
    """Prepare ``trainer`` for a search ``module`` (nothing for any other; its
    budget is each member's already, each slot training ``module.budget_share``
    of it, :func:`jaxtrainer.recipes.config.make_trainer`): the share is said in
    one line when below a whole run; a :class:`~jaxtrainer.population.search_report.SearchReport`
    is added unless one is there; for ``search.method=optuna``, an
    :class:`~jaxtrainer.population.optuna_search.OptunaSearch` (``cfg``'s
    sampler and storage, seeded with ``trainer.seed``); its rounds end on log
    boundaries by the Trainer's budget (:func:`host_rounds`)."""
    import jax

    from jaxtrainer.population.optuna_search import OptunaSearch
    from jaxtrainer.population.search import HOST_SAMPLER, Search
    from jaxtrainer.population.search_report import SearchReport

    if not isinstance(module, Search):
        return
    share, budget = module.budget_share, trainer.budget
    total = budget.total(module.population_size)
    if share < 1 and budget.is_set and jax.process_index() == 0:
        runs = share * module.trial_slots
        each = (f"{int(budget.max_env_steps * share):,} env steps of a run's {budget.max_env_steps:,}"
                if budget.max_env_steps is not None else f"{total.max_steps:,} updates")
        print(f"jaxtrainer: search of {module.trial_slots} trials at once sharing {runs} runs' "
              f"budget (search.runs): each member slot trains {each}", flush=True)
    if not any(isinstance(cb, SearchReport) for cb in trainer.callbacks):
        trainer.add_callback(SearchReport())
    if module.sampler == HOST_SAMPLER and not any(isinstance(cb, OptunaSearch)
                                                  for cb in trainer.callbacks):
        node = cfg[SECTION] if cfg is not None else {}
        trainer.add_callback(OptunaSearch(node.get("sampler") or "tpe", node.get("storage"),
                                          seed=module.seed))


def final_note(module: Any) -> str:
    """For the line before a recipe's last: ``" (the member with the best fitness)"`` for a search."""
    from jaxtrainer.population.search import Search

    return f" (the member with the best {module.fitness_metric})" if isinstance(module, Search) else ""
