"""Run directories written by the previous release restore and continue bit for bit.

``tests/_support/fixtures/release_runs`` holds runs the release before this code wrote
(``tests/_support/fixtures/make_release_runs.py``, with that release's code): a recipe's
run (``config.yaml``) and two runs started from Python (``module.yaml``, off-default
config values), each saved at step 2 on one device. Each is resumed here to step 4
and must reach the state digest, the logged metrics and (the recipe's) the output
lines the old release reached from the same files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "_support" / "fixtures"
RUNS = FIXTURES / "release_runs"
EXPECTED = json.loads((RUNS / "expected.json").read_text())

_spec = importlib.util.spec_from_file_location("make_release_runs", FIXTURES / "make_release_runs.py")
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)


def _without_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.endswith("per_second")} for row in rows]


def _check_resumed(run: Path, name: str) -> None:
    from jaxtrainer.inference import saved_run

    expected = EXPECTED["runs"][name]
    restored = saved_run.restore(run, "last", strategy="single", devices=1)
    assert int(restored.trainer.global_step) == expected["global_step"] == EXPECTED["last"]
    assert make.digest(restored.trainer.state) == expected["state"]
    assert _without_timings(make.metric_rows(run)) == _without_timings(expected["metrics"])


@pytest.mark.timeout(300)
def test_a_recipe_run_of_the_last_release_resumes_bit_for_bit_and_prints_the_same(tmp_path):
    root = tmp_path / "ppo_recipe"
    shutil.copytree(RUNS / "ppo_recipe", root)
    out = subprocess.run([sys.executable, "-m", "jaxtrainer", "fit", "ppo", *EXPECTED["recipe_args"],
                          f"trainer.default_root_dir={root}", f"trainer.max_steps={EXPECTED['last']}",
                          "trainer.ckpt_path=last"], capture_output=True, text=True, timeout=280,
                         env={k: v for k, v in os.environ.items() if k != "JAXTRAINER_COMPILATION_CACHE"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (out.stdout + out.stderr).replace(str(root), "ROOT").splitlines() == EXPECTED["recipe_output"]
    _check_resumed(root / "version_0", "ppo_recipe")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(make.python_modules()))
def test_a_python_run_of_the_last_release_resumes_bit_for_bit(tmp_path, name):
    root = tmp_path / name
    shutil.copytree(RUNS / name, root)
    make.python_fit(make.python_modules()[name], root, EXPECTED["last"], "last")
    _check_resumed(root / "version_0", name)
