"""Names of :mod:`jaxtrainer.population`, each imported from its submodule on first use."""

from .front_report import FrontReport
from .map_elites import MAPElites, MAPElitesState, Repertoire, grid_centroids, isoline_variation
from .me_es import MEES, MEESState
from .members import MemberPopulation
from .mo_tasks import MOTask, make_mo_task
from .nsga2 import NSGA2, NSGA2State, crowding_distances, hypervolume, non_dominated_ranks
from .optuna_search import OptunaSearch
from .pbt import PBT, Hyperparam, PBTState
from .pga_me import PGAME, PGAMEState
from .qd_tasks import QDTask, make_task
from .search import Search, SearchState
from .search_report import SearchReport
from .spaces import Choice, parse_space, sample_trials
from .summary import SweepSummary
from .sweep import Sweep, SweepState
from .trainer import GenerationModule, PopulationTrainer

__all__ = [
    "Choice",
    "FrontReport",
    "GenerationModule",
    "Hyperparam",
    "MAPElites",
    "MAPElitesState",
    "MEES",
    "MEESState",
    "MOTask",
    "MemberPopulation",
    "NSGA2",
    "NSGA2State",
    "OptunaSearch",
    "PBT",
    "PBTState",
    "PGAME",
    "PGAMEState",
    "PopulationTrainer",
    "QDTask",
    "Repertoire",
    "Search",
    "SearchReport",
    "SearchState",
    "Sweep",
    "SweepState",
    "SweepSummary",
    "crowding_distances",
    "grid_centroids",
    "hypervolume",
    "isoline_variation",
    "make_mo_task",
    "make_task",
    "non_dominated_ranks",
    "parse_space",
    "sample_trials",
]
