"""IMPALA (synchronous, V-trace) on a gymnax environment through jaxtrainer.Trainer.

    python recipes/impala.py                                   # CartPole-v1, every local device
    python recipes/impala.py trainer.strategy=pmap trainer.seed=3

Every key of recipes/configs/impala.yaml can be overridden as ``section.key=value``.
The last line printed is ``eval/episode_return=<value> run_dir=<dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.recipes import config, modules

CONFIG = Path(__file__).parent / "configs" / "impala.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("impala", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
