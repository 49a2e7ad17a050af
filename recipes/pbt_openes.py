"""Population-based training of OpenAI-ES runs through jaxtrainer.Trainer.

    python recipes/pbt_openes.py                           # CartPole-v1, 4 ES runs, every local device
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python recipes/pbt_openes.py trainer.strategy=pmap
    python recipes/pbt_openes.py pbt.population_size=8 algorithm.population_size=64

Each member is one OpenAI-ES run (evosax's Open_ES, as recipes/openes.py, with
the sizes under ``algorithm:``) wrapped as a Module whose training step is one
generation (:class:`jaxtrainer.population.GenerationModule`); the members are
sharded over the devices, and every ``pbt.ready_every_n_steps`` generations the
worst quarter copies the best quarter's search distribution and optimizer state
and perturbs the copied learning rate and search std (``pbt.hyperparams``,
traced values in ``ESState.hyperparams``: one program trains every member).
Every key of recipes/configs/pbt_openes.yaml can be overridden as
``section.key=value``. The last line printed is
``eval/episode_return=<value> run_dir=<dir>``, the evaluation return of the mean
policy of the member with the best training fitness. See ``recipes/openes.py``
for the CPU compile setting (``JAXTRAINER_FAST_COMPILE``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from openes import fast_cpu_compile  # noqa: E402

CONFIG = Path(__file__).parent / "configs" / "pbt_openes.yaml"


def main(argv: list[str]) -> dict[str, float]:
    from jaxtrainer.recipes import config, modules

    path, argv = config.config_arg(argv, CONFIG)
    cfg = config.load(path, argv, defaults=CONFIG)
    trainer = config.make_trainer(cfg)
    module = modules.build_module("pbt_openes", cfg)
    return config.fit_and_report(trainer, module, cfg)


if __name__ == "__main__":
    fast_cpu_compile()
    from jaxtrainer.recipes import config  # after the XLA flags are set

    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
