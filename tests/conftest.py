"""Test setup: 4 fake CPU devices (set before jax is imported anywhere)."""

import os

from tests._support._xla import EMITTERS_ENV, xla_flags

# the user's XLA_FLAGS, before this file adds to them (xdist workers inherit both)
_GIVEN_XLA_FLAGS = os.environ.setdefault("JAXTRAINER_TESTS_GIVEN_XLA_FLAGS",
                                         os.environ.get("XLA_FLAGS", ""))
os.environ["XLA_FLAGS"] = (_GIVEN_XLA_FLAGS + " " + xla_flags(4)).strip()
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import json  # noqa: E402
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


_REPORTS_ENV = "JAXTRAINER_TESTS_REPORTS"
"""In a default-emitters pytest subprocess: the file each test's outcome is appended to."""
_OUTCOMES: dict[str, tuple[str, str]] = {}
"""Default-emitters tests run so far in this process: nodeid -> (outcome, report text)."""


def _in_a_process_with_default_emitters(item: pytest.Item) -> None:
    """Run ``item`` in a pytest subprocess whose XLA:CPU uses its own fusion emitters
    (``default_emitters``); its failure is this test's. The subprocess runs every
    selected default-emitters test of ``item``'s file not run yet (one interpreter,
    one set of module fixtures), and each test reports its own outcome."""
    if item.nodeid not in _OUTCOMES:
        group = [i.nodeid for i in item.session.items if i.path == item.path
                 and i.get_closest_marker("default_emitters") and i.nodeid not in _OUTCOMES]
        with tempfile.TemporaryDirectory() as tmp:
            reports = os.path.join(tmp, "reports.jsonl")
            env = dict(os.environ, XLA_FLAGS=_GIVEN_XLA_FLAGS,
                       **{EMITTERS_ENV: "default", _REPORTS_ENV: reports})
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                 *group], cwd=item.config.rootpath, env=env, capture_output=True, text=True)
            seen: dict[str, tuple[str, str]] = {}
            if os.path.exists(reports):
                with open(reports) as f:
                    for line in f:
                        nodeid, outcome, text = json.loads(line)
                        if seen.get(nodeid, ("passed",))[0] == "passed" or outcome == "failed":
                            seen[nodeid] = (outcome, text)
        for nodeid in group:
            _OUTCOMES[nodeid] = seen.get(nodeid, ("failed", (
                f"no outcome (pytest subprocess, status {proc.returncode}):\n"
                + (proc.stdout + proc.stderr)[-6000:])))
    outcome, text = _OUTCOMES[item.nodeid]
    if outcome == "skipped":
        pytest.skip(text)
    if outcome != "passed":
        pytest.fail(f"under XLA:CPU's default fusion emitters (pytest subprocess):\n{text[-6000:]}",
                    pytrace=False)


def pytest_runtest_logreport(report):
    path = os.environ.get(_REPORTS_ENV)
    if path and (report.when == "call" or report.outcome != "passed"):
        text = (report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple)
                else report.longreprtext)
        with open(path, "a") as f:
            f.write(json.dumps([report.nodeid, report.outcome, text]) + "\n")


def pytest_collection_modifyitems(config, items):
    if os.environ.get(EMITTERS_ENV) == "default":
        return
    grouped = [item for item in items if item.get_closest_marker("default_emitters")]
    budget: dict = {}  # per file: the sum of its default-emitters tests' time limits
    for item in grouped:
        limit = item.get_closest_marker("timeout")
        limit = limit.args[0] if limit and limit.args else float(config.getini("timeout") or 0)
        budget[item.path] = budget.get(item.path, 0) + limit
    for item in grouped:
        item.runtest = lambda item=item: _in_a_process_with_default_emitters(item)
        item.setup = lambda: None  # its fixtures are the subprocess's
        if budget[item.path]:  # the first to run waits for the group (each test keeps its
            item.add_marker(pytest.mark.timeout(budget[item.path]), append=False)  # own limit
