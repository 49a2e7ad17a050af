"""TD3 on a continuous-control environment through jaxtrainer.Trainer.

    python recipes/td3.py                                   # gymnax Pendulum-v1, CPU
    python recipes/td3.py trainer.strategy=pmap trainer.seed=3
    python recipes/td3.py --config my_td3.yaml env.name=brax/ant    # another YAML file

Every key of the config (default recipes/configs/td3.yaml) can be overridden as
``section.key=value``. The last line printed is
``eval/episode_return=<value> run_dir=<dir>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxtrainer.recipes import config, modules

CONFIG = Path(__file__).parent / "configs" / "td3.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("td3", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
