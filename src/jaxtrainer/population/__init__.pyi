"""Names of :mod:`jaxtrainer.population`, each imported from its submodule on first use."""

from .members import MemberPopulation
from .optuna_search import OptunaSearch
from .pbt import PBT, Hyperparam, PBTState
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
    "MemberPopulation",
    "OptunaSearch",
    "PBT",
    "PBTState",
    "PopulationTrainer",
    "Search",
    "SearchReport",
    "SearchState",
    "Sweep",
    "SweepState",
    "SweepSummary",
    "parse_space",
    "sample_trials",
]
