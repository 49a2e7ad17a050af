"""XLA flags of every test process (this one and the ones tests start).

Tests compile far more than they run, so XLA:CPU's backend (LLVM) optimisation
is off (about 17% less wall time and 27% less CPU time on 2 cores: PBT and resume
tests), and fusions are emitted by XLA:CPU's older emitters instead of its new
MLIR fusion emitters (a tiny PPO fit in a fresh process: 2.8 s instead of 4.5 s;
a dozen test files on 2 workers: 137 s instead of 229 s). Every process gets the
same flags, so results compared across processes (bitwise resume, multi-process
runs) come from the same code generation.
"""

import os

EMITTERS_ENV = "JAXTRAINER_TESTS_EMITTERS"
"""``default`` in the pytest subprocess that runs a test marked
``default_emitters`` (tests/conftest.py): XLA:CPU's own fusion emitters, as users
get them. A test that compares two different programs bit for bit (1 and 4
devices, traced and constant hyperparameters, the eval command and
``Trainer.evaluate``) holds for the code they generate; the older emitters fuse
some multiply-adds otherwise (1 ulp apart)."""

OPTIMIZATION = "--xla_backend_optimization_level=0" + (
    "" if os.environ.get(EMITTERS_ENV) == "default" else " --xla_cpu_use_fusion_emitters=false")


def xla_flags(devices: int) -> str:
    """``XLA_FLAGS`` for a test process with ``devices`` fake CPU devices."""
    return f"--xla_force_host_platform_device_count={devices} {OPTIMIZATION}"
