"""XLA flags of every test process (this one and the ones tests start).

Tests compile far more than they run, so XLA:CPU's backend (LLVM) optimisation
is off: about 17% less wall time and 27% less CPU time on 2 cores (PBT and resume
tests). Every process gets the same flags, so results compared across processes
(bitwise resume, multi-process runs) come from the same code generation.
"""

OPTIMIZATION = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def xla_flags(devices: int) -> str:
    """``XLA_FLAGS`` for a test process with ``devices`` fake CPU devices."""
    return f"--xla_force_host_platform_device_count={devices} {OPTIMIZATION}"
