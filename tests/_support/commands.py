"""What tests of the recipe commands share: the repository root, the tiniest PPO
overrides that still run a whole update, and a recipe script loaded as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]

TINY_PPO = ["trainer.max_env_steps=null", "algorithm.num_envs=2", "algorithm.num_steps=8",
            "algorithm.num_minibatches=2", "algorithm.update_epochs=1", "algorithm.hidden_sizes=[8]",
            "algorithm.eval_episodes=2", "trainer.enable_progress_bar=false",
            "trainer.strategy=single", "trainer.log_every_n_steps=2"]
"""``python recipes/ppo.py`` overrides: 2 envs x 8 steps, one device, a log every 2 steps."""


def recipe_script(name: str) -> ModuleType:
    """``recipes/<name>.py`` loaded as a module (its ``main(argv)`` runs the recipe in-process)."""
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
