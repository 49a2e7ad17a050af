"""A2C on a gymnax environment through jaxtrainer.Trainer.

    python recipes/a2c.py                                   # CartPole-v1, every local device
    python recipes/a2c.py trainer.strategy=pmap trainer.seed=3

Every key of recipes/configs/a2c.yaml can be overridden as ``section.key=value``.
The last line printed is ``eval/episode_return=<value> run_dir=<dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.algorithms.a2c import A2C, A2CConfig
from jaxtrainer.recipes import config

CONFIG = Path(__file__).parent / "configs" / "a2c.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    algo = config.section(cfg, "algorithm")
    # total_updates unset: the learning rate anneals over the Trainer's budget
    module = A2C(A2CConfig(env=cfg.env.name, **algo), env=config.make_env(cfg))
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
