"""ERL (a genetic algorithm of actors + a TD3 learner whose actor joins the
population) on a continuous-control environment through jaxtrainer.Trainer; one
training step is one generation.

    python recipes/erl.py                                      # gymnax Pendulum-v1, CPU
    python recipes/erl.py trainer.strategy=pmap trainer.seed=3
    python recipes/erl.py algorithm.twin_critics=false algorithm.policy_noise=0 algorithm.policy_delay=1

Every key of the config (default recipes/configs/erl.yaml) can be overridden as
``section.key=value``. The last line printed is
``eval/episode_return=<value> run_dir=<dir>`` (the champion, greedy).
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.recipes import config, modules

CONFIG = Path(__file__).parent / "configs" / "erl.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("erl", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
