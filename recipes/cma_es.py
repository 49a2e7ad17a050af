"""CMA-ES neuroevolution on a gymnax environment through jaxtrainer.PopulationTrainer.

    python recipes/cma_es.py                                  # CartPole-v1, 30-parameter policy
    python recipes/cma_es.py algorithm.hidden_sizes=[8] trainer.population_size=64
    python recipes/cma_es.py trainer.ckpt_path=last           # resume the newest run

Every key of recipes/configs/cma_es.yaml can be overridden as ``section.key=value``.
The last line printed is ``eval/episode_return=<value> run_dir=<dir>``. See
``recipes/openes.py`` for the CPU compile setting (``JAXTRAINER_FAST_COMPILE``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from openes import fast_cpu_compile, run  # noqa: E402


def main(argv: list[str]) -> dict[str, float]:
    return run(Path(__file__).parent / "configs" / "cma_es.yaml", argv, recipe="cma_es")


if __name__ == "__main__":
    fast_cpu_compile()
    from jaxtrainer.recipes import config  # after the XLA flags are set

    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
