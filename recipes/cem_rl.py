"""CEM-RL (evolutionary + TD3 gradient steps) on a continuous-control environment
through jaxtrainer.Trainer; one training step is one generation.

    python recipes/cem_rl.py                                   # gymnax Pendulum-v1, CPU
    python recipes/cem_rl.py trainer.strategy=pmap trainer.seed=3
    python recipes/cem_rl.py --config recipes/configs/cem_rl_brax.yaml    # brax, for a GPU

Every key of the config (default recipes/configs/cem_rl.yaml) can be overridden as
``section.key=value``. The last line printed is
``eval/episode_return=<value> run_dir=<dir>`` (the CEM mean actor, greedy).
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.recipes import config, modules

CONFIG = Path(__file__).parent / "configs" / "cem_rl.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("cem_rl", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
