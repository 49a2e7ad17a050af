"""OpenAI-ES neuroevolution on a gymnax environment through jaxtrainer.PopulationTrainer.

    python recipes/openes.py                                  # CartPole-v1, every local device
    python recipes/openes.py trainer.strategy=shard_map trainer.population_size=128
    python recipes/openes.py algorithm.name=SNES algorithm.learning_rate=null   # any evosax ES
    python recipes/openes.py trainer.ckpt_path=last           # resume the newest run

Every key of recipes/configs/openes.yaml can be overridden as ``section.key=value``.
The last line printed is ``eval/episode_return=<value> run_dir=<dir>``.

On CPU the recipe lowers XLA's LLVM optimisation level before JAX starts: these
runs are short, so compiling faster pays more than faster code (about 2x less
compile time). Set ``JAXTRAINER_FAST_COMPILE=0`` to keep XLA's default.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def fast_cpu_compile() -> None:
    """Add ``--xla_backend_optimization_level=0`` to XLA_FLAGS on machines without
    an NVIDIA GPU, unless ``JAXTRAINER_FAST_COMPILE=0``. Must run before JAX's
    backend starts (before importing jaxtrainer)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if (os.environ.get("JAXTRAINER_FAST_COMPILE", "1") != "0" and shutil.which("nvidia-smi") is None
            and "xla_backend_optimization_level" not in flags):
        os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()


def run(config_file: Path, argv: list[str], recipe: str = "openes") -> dict[str, float]:
    """Load ``config_file`` with ``argv`` overrides, evolve, evaluate, print the last
    line; ``recipe`` names the module to build (``openes`` or ``cma_es``)."""
    from jaxtrainer.recipes import config, modules

    chosen, argv = config.config_arg(argv, config_file)
    cfg = config.load(chosen, argv, defaults=config_file)
    trainer = config.make_population_trainer(cfg)  # fit_and_report resumes from ckpt_path
    module = modules.build_module(recipe, cfg)
    return config.fit_and_report(trainer, module, cfg)


def main(argv: list[str]) -> dict[str, float]:
    return run(Path(__file__).parent / "configs" / "openes.yaml", argv, recipe="openes")


if __name__ == "__main__":
    fast_cpu_compile()
    from jaxtrainer.recipes import config  # after the XLA flags are set

    config.cli(main, sys.argv[1:], exit_when_done=True)  # a bad config: one line, status 2
