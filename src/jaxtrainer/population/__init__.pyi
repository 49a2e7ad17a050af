"""Names of :mod:`jaxtrainer.population`, each imported from its submodule on first use."""

from .map_elites import MAPElites, MAPElitesState, Repertoire, grid_centroids, isoline_variation
from .members import MemberPopulation
from .optuna_search import OptunaSearch
from .pbt import PBT, Hyperparam, PBTState
from .qd_tasks import QDTask, make_task
from .search import Search, SearchState
from .search_report import SearchReport
from .spaces import Choice, parse_space, sample_trials
from .summary import SweepSummary
from .sweep import Sweep, SweepState
from .trainer import GenerationModule, PopulationTrainer

__all__ = [
    "Choice",
    "GenerationModule",
    "Hyperparam",
    "MAPElites",
    "MAPElitesState",
    "MemberPopulation",
    "OptunaSearch",
    "PBT",
    "PBTState",
    "PopulationTrainer",
    "QDTask",
    "Repertoire",
    "Search",
    "SearchReport",
    "SearchState",
    "Sweep",
    "SweepState",
    "SweepSummary",
    "grid_centroids",
    "isoline_variation",
    "make_task",
    "parse_space",
    "sample_trials",
]
