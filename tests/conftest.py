"""Test setup: 4 fake CPU devices (set before jax is imported anywhere)."""

import os

from tests._xla import xla_flags

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + xla_flags(4)).strip()
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import tempfile  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

assert jax.device_count() == 4, "tests expect 4 fake CPU devices"

# Many tests compile the same program several times (straight run, resume,
# other budgets: budgets are traced, so the program is identical). A throwaway
# persistent compilation cache for this test process keeps the suite inside
# its time budget on 2 cores; subprocess tests compile for themselves.
# Recipes run in subprocesses share it (they turn the cache on, and the
# environment variable points them here instead of the user's ~/.cache).
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run
_CACHE = (os.path.join(tempfile.gettempdir(), f"jaxtrainer-tests-cache-{_RUN}") if _RUN
          else tempfile.mkdtemp(prefix="jaxtrainer-tests-cache-"))
os.makedirs(_CACHE, exist_ok=True)
os.environ["JAXTRAINER_COMPILATION_CACHE"] = _CACHE
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


@pytest.fixture
def run_dir(tmp_path):
    """A fresh default_root_dir per test."""
    return tmp_path / "runs"
