"""The Trainer and the fit it runs.

:class:`Trainer` (``trainer.py``) keeps the order of hooks, the counters and resume;
beside it: ``fit_setup`` (checks and the run directory before anything compiles),
``fit_run`` (a fit from start to failure), ``fit_loop`` (the loop of compiled calls),
``planner`` (log intervals, fused calls, run-ahead; plain Python), ``compile_ahead``
(compiling the programs in the background), ``hook_replay`` (hooks a preemption left
unfinished) and ``connectors/`` (what the Trainer writes into and restores from a
checkpoint).
"""

from jaxtrainer.runtime._signals import Preempted
from jaxtrainer.trainer.trainer import Trainer

__all__ = ["Preempted", "Trainer"]
