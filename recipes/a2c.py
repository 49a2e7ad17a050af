"""A2C on a gymnax environment through jaxtrainer.Trainer.

    python recipes/a2c.py                                   # CartPole-v1, every local device
    python recipes/a2c.py trainer.strategy=pmap trainer.seed=3

Every key of recipes/configs/a2c.yaml can be overridden as ``section.key=value``.
The last line printed is ``eval/episode_return=<value> run_dir=<dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from jaxtrainer import config
from jaxtrainer.algorithms.a2c import A2C, A2CConfig

CONFIG = Path(__file__).parent / "configs" / "a2c.yaml"


def main(argv: list[str]) -> dict[str, float]:
    cfg = config.load(CONFIG, argv)
    trainer = config.make_trainer(cfg)
    algo = OmegaConf.to_container(cfg.algorithm, resolve=True)
    # the learning rate anneals over the run's updates
    total_updates = config.training_steps(cfg, algo["num_envs"] * algo["num_steps"])
    module = A2C(A2CConfig(env=cfg.env.name, total_updates=total_updates, **algo))
    trainer.fit(module, ckpt_path=config.ckpt_path(cfg))
    result = trainer.evaluate(module)
    print(f"eval/episode_return={result['eval/episode_return']:.2f} run_dir={trainer.log_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
