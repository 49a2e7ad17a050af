"""Population-based training of SAC agents through jaxtrainer.Trainer.

    python recipes/pbt_sac.py                              # Pendulum-v1, 4 members, every local device
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python recipes/pbt_sac.py trainer.strategy=pmap
    python recipes/pbt_sac.py pbt.population_size=8 pbt.ready_every_n_steps=1000

The members (each one single-device SAC agent with the sizes under
``algorithm:``) are sharded over the devices; every ``pbt.ready_every_n_steps``
training steps the worst quarter copies the best quarter (networks, optimizer
states, replay buffer, hyperparameters) and perturbs the copied hyperparameters
(``pbt.hyperparams``: SAC's learning rates and ``tau``, traced values in the
state, so one program trains every member). Every key of
recipes/configs/pbt_sac.yaml can be overridden as ``section.key=value``. The
last line printed is ``eval/episode_return=<value> run_dir=<dir>``, the
evaluation return of the member with the best training fitness.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.recipes import config, modules

CONFIG = Path(__file__).parent / "configs" / "pbt_sac.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("pbt_sac", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
