"""Double DQN on a gymnax environment through jaxtrainer.Trainer.

    python recipes/dqn.py                                   # CartPole-v1, every local device
    python recipes/dqn.py trainer.strategy=pmap trainer.seed=3
    python recipes/dqn.py algorithm.tau=0.005 algorithm.target_update_interval=8

Every key of recipes/configs/dqn.yaml can be overridden as ``section.key=value``.
The last line printed is ``eval/episode_return=<value> run_dir=<dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from jaxtrainer import config
from jaxtrainer.algorithms.dqn import DQN, DQNConfig

CONFIG = Path(__file__).parent / "configs" / "dqn.yaml"


def main(argv: list[str]) -> dict[str, float]:
    cfg = config.load(CONFIG, argv)
    trainer = config.make_trainer(cfg)
    module = DQN(DQNConfig(env=cfg.env.name, **OmegaConf.to_container(cfg.algorithm, resolve=True)))
    trainer.fit(module, ckpt_path=config.ckpt_path(cfg))
    result = trainer.evaluate(module)
    print(f"eval/episode_return={result['eval/episode_return']:.2f} run_dir={trainer.log_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
