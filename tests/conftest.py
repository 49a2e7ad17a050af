"""Test setup: 4 fake CPU devices (set before jax is imported anywhere)."""

import os

from tests._support._xla import EMITTERS_ENV, xla_flags

# the user's XLA_FLAGS, before this file adds to them (xdist workers inherit both)
_GIVEN_XLA_FLAGS = os.environ.setdefault("JAXTRAINER_TESTS_GIVEN_XLA_FLAGS",
                                         os.environ.get("XLA_FLAGS", ""))
os.environ["XLA_FLAGS"] = (_GIVEN_XLA_FLAGS + " " + xla_flags(4)).strip()
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import subprocess  # noqa: E402
import sys  # noqa: E402
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
# One cache for the workers of a run: a program compiles once (JAX keys the
# entries by XLA_FLAGS too, so the default-emitter processes find only their own).
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


def _in_a_process_with_default_emitters(item: pytest.Item) -> None:
    """Run ``item`` alone in a pytest subprocess whose XLA:CPU uses its own
    fusion emitters (``default_emitters``); its failure is this test's."""
    env = dict(os.environ, XLA_FLAGS=_GIVEN_XLA_FLAGS, **{EMITTERS_ENV: "default"})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         item.nodeid], cwd=item.config.rootpath, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"under XLA:CPU's default fusion emitters (pytest subprocess, status "
                    f"{proc.returncode}):\n{(proc.stdout + proc.stderr)[-6000:]}", pytrace=False)


def pytest_collection_modifyitems(config, items):
    if os.environ.get(EMITTERS_ENV) == "default":
        return
    for item in items:
        if item.get_closest_marker("default_emitters"):
            item.runtest = lambda item=item: _in_a_process_with_default_emitters(item)
