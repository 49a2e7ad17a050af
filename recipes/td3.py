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

from omegaconf import OmegaConf

from jaxtrainer import config, envs
from jaxtrainer.algorithms.td3 import TD3, TD3Config

CONFIG = Path(__file__).parent / "configs" / "td3.yaml"


def main(argv: list[str]) -> dict[str, float]:
    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv)
    trainer = config.make_trainer(cfg)
    env_kwargs = OmegaConf.to_container(cfg.env, resolve=True)
    name = env_kwargs.pop("name")
    env = envs.make(name, **env_kwargs)
    algo = OmegaConf.to_container(cfg.algorithm, resolve=True)
    module = TD3(TD3Config(env=name, **algo), env=env)
    trainer.fit(module, ckpt_path=config.ckpt_path(cfg))
    result = trainer.evaluate(module)
    print(f"eval/episode_return={result['eval/episode_return']:.2f} run_dir={trainer.log_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
