"""JaxMARL's feedforward IPPO baseline on MPE, loaded from a JaxMARL checkout as it is.

``load_baseline(root)`` imports ``root/baselines/IPPO/ippo_ff_mpe.py`` (unmodified; its
per-update ``wandb.log`` made a no-op, as its config's ``WANDB_MODE: disabled`` leaves
it, and ``hydra``, which only its command line uses, stubbed when missing) and reads its
``config/ippo_ff_mpe.yaml``. Used by ``benchmarks/marl_ippo.py`` (one seed a run, on a
CPU) and ``benchmarks/accelerator/_jaxmarl_ippo_original.py`` (its own ``main``'s seeds
in one program, on a chip). It imports neither jaxtrainer nor anything of JaxMARL's but
what the baseline file imports.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from omegaconf import OmegaConf

BASELINE = Path("baselines") / "IPPO" / "ippo_ff_mpe.py"
BASELINE_CONFIG = Path("baselines") / "IPPO" / "config" / "ippo_ff_mpe.yaml"


def load_baseline(root: Path) -> tuple[types.ModuleType, dict]:
    """JaxMARL's IPPO MPE baseline module (from ``root``, a JaxMARL checkout) and its
    config as a dict (read by OmegaConf, as its Hydra command line reads it), every key
    but wandb's (``ENTITY``, ``PROJECT``, ``WANDB_MODE``).

    Raises:
      SystemExit: ``root`` lacks the baseline's file (the message says how to get it).
    """
    path, cfg_path = Path(root) / BASELINE, Path(root) / BASELINE_CONFIG
    if not path.is_file() or not cfg_path.is_file():
        raise SystemExit(f"--baseline {root}: no {BASELINE} or {BASELINE_CONFIG} there; get "
                         "JaxMARL with: git clone https://github.com/FLAIROx/JaxMARL "
                         "/tmp/jaxmarl_src")
    if importlib.util.find_spec("hydra") is None:  # only its command line uses it
        sys.modules["hydra"] = types.SimpleNamespace(main=lambda **kw: (lambda f: f))
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo_ff_mpe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.wandb = types.SimpleNamespace(log=lambda metrics: None)
    cfg = OmegaConf.to_container(OmegaConf.load(cfg_path))  # as Hydra reads it: 1e7 a float
    return module, {k: v for k, v in cfg.items() if k not in ("ENTITY", "PROJECT", "WANDB_MODE")}
