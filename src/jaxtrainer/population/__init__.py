"""Populations: many members of one program, trained or evolved together.

One mechanism serves every population mode. Members are stacked on a leading
axis, split over the strategy's data axes, padded to a multiple of the device
count and gathered bit for bit by :class:`~jaxtrainer.distributed.MemberLayout`
(which CEM-RL and ERL use too); on top of it:

* :class:`PopulationTrainer` (:mod:`.trainer`) evolves a
  :class:`~jaxtrainer.PopulationModule` (ask/tell): one Trainer step is one
  generation;
* :class:`MemberPopulation` (:mod:`.members`) trains ``P`` copies of one
  :class:`~jaxtrainer.Module` inside one Trainer program, the core of
* :class:`PBT` (:mod:`.pbt`): population-based training, exploit/explore of
  traced hyperparameters, and
* :class:`Sweep` (:mod:`.sweep`): a grid of hyperparameters times seeds, with
  :class:`SweepSummary` (:mod:`.summary`) writing per-configuration statistics;
* :class:`Search` (:mod:`.search`): trials drawn from search spaces
  (:mod:`.spaces`), successive halving at rungs, with :class:`SearchReport`
  (:mod:`.search_report`) writing ``search.csv`` and :class:`OptunaSearch`
  (:mod:`.optuna_search`) choosing trials with Optuna's samplers;
* :class:`MAPElites` (:mod:`.map_elites`): quality-diversity search, a
  :class:`Repertoire` of elites per cell of descriptor space filled by a
  PopulationTrainer, on the tasks of :mod:`.qd_tasks` (``"arm"``,
  ``"walker2d_uni"``), and :class:`PGAME` (:mod:`.pga_me`), MAP-Elites with
  policy-gradient offspring along a TD3 critic, and :class:`MEES`
  (:mod:`.me_es`), MAP-Elites with OpenAI-ES offspring up the fitness or the
  novelty;
* :class:`NSGA2` (:mod:`.nsga2`): multi-objective search, a population of
  members with ``M`` fitness values each sorted into Pareto fronts, its
  hypervolume logged, on the tasks of :mod:`.mo_tasks` (``"zdt1"``), with
  :class:`FrontReport` (:mod:`.front_report`) writing and drawing its front.

Algorithms never import this package; the traced hyperparameters that members
differ in are read and written through :mod:`jaxtrainer.algorithms.hyperparams`.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
