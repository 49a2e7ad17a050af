"""Soft Actor-Critic on a continuous-control environment through jaxtrainer.Trainer.

    python recipes/sac.py                                   # gymnax Pendulum-v1, CPU
    python recipes/sac.py trainer.strategy=pmap trainer.seed=3
    python recipes/sac.py --config recipes/configs/sac_brax.yaml   # brax (GPU)

Every key of the config (default recipes/configs/sac.yaml) can be overridden as
``section.key=value``. The last line printed is
``eval/episode_return=<value> run_dir=<dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.algorithms.sac import SAC, SACConfig
from jaxtrainer.recipes import config

CONFIG = Path(__file__).parent / "configs" / "sac.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    env = config.make_env(cfg)
    algo = config.section(cfg, "algorithm")
    module = SAC(SACConfig(env=cfg.env.name, **algo), env=env)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
