"""DDPG on a continuous-control environment through jaxtrainer.Trainer.

    python recipes/ddpg.py                                  # gymnax Pendulum-v1, CPU
    python recipes/ddpg.py trainer.strategy=pmap trainer.seed=3
    python recipes/ddpg.py algorithm.twin_critics=true      # an ablation toward TD3

DDPG (Lillicrap et al. 2016) is TD3 with one critic, no target policy
smoothing and no delayed actor updates (``jaxtrainer.algorithms.DDPG``).
Every key of the config (default recipes/configs/ddpg.yaml) can be overridden as
``section.key=value``. The last line printed is
``eval/episode_return=<value> run_dir=<dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.recipes import config, modules

CONFIG = Path(__file__).parent / "configs" / "ddpg.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("ddpg", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
