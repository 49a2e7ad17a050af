"""Population-based training of PPO agents through jaxtrainer.Trainer.

    python recipes/pbt_ppo.py                              # CartPole-v1, 8 members, every local device
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python recipes/pbt_ppo.py trainer.strategy=pmap
    python recipes/pbt_ppo.py pbt.population_size=16 pbt.ready_every_n_steps=10

The members (each one single-device PPO agent with the sizes under
``algorithm:``) are sharded over the devices; every ``pbt.ready_every_n_steps``
updates the worst quarter copies the best quarter and perturbs the copied
hyperparameters (``pbt.hyperparams``). Every key of recipes/configs/pbt_ppo.yaml
can be overridden as ``section.key=value``. The last line printed is
``eval/episode_return=<value> run_dir=<dir>``, the evaluation return of the
member with the best training fitness.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.recipes import config, modules

CONFIG = Path(__file__).parent / "configs" / "pbt_ppo.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("pbt_ppo", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
