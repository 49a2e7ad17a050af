"""An algorithm one can read in one sitting (issue 67, must-show 1): the PPO reading
set the guide names is at most 4 files and 1,200 lines, no file under
``src/jaxtrainer/algorithms`` is over 500 lines, and no on-policy config's MRO holds
more than 3 classes."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[1]
GUIDE = ROOT / "docs" / "guides" / "read-an-algorithm.md"
ALGORITHMS = ROOT / "src" / "jaxtrainer" / "algorithms"
MAX_FILES, MAX_SET_LINES, MAX_FILE_LINES = 4, 1200, 500

OVER_500_FOR_NOW = {
    "offpolicy.py": 768,
    "dqn.py": 577,
    "cem_rl.py": 625,
    "es.py": 601,
    "erl.py": 503,
}
"""Temporary: the off-policy files another branch is splitting, at their line counts
when this test was written (they may shrink, not grow). Empty it when that lands."""


def lines(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def reading_set() -> list[pathlib.Path]:
    """The files between the guide's ``reading set`` markers, in order."""
    text = GUIDE.read_text()
    block = text[text.index("<!-- reading set: start -->"):text.index("<!-- reading set: end -->")]
    return [ROOT / p for p in re.findall(r"`(src/jaxtrainer/[\w/]+\.py)`", block)]


def test_the_ppo_reading_set_is_at_most_4_files_and_1200_lines():
    files = reading_set()
    assert files and files[0].name == "ppo.py", files
    assert all(f.is_file() for f in files), [str(f) for f in files if not f.is_file()]
    counts = {f.name: lines(f) for f in files}
    assert len(files) <= MAX_FILES, counts
    assert sum(counts.values()) <= MAX_SET_LINES, counts


def test_no_algorithm_file_is_over_500_lines():
    over = {str(p.relative_to(ALGORITHMS)): lines(p) for p in sorted(ALGORITHMS.rglob("*.py"))
            if lines(p) > MAX_FILE_LINES}
    new = {name: n for name, n in over.items()
           if name not in OVER_500_FOR_NOW or n > OVER_500_FOR_NOW[name]}
    assert not new, f"over {MAX_FILE_LINES} lines (or grown past the allow-list): {new}"


@pytest.mark.parametrize("name", ["OnPolicyConfig", "PPOConfig", "A2CConfig", "IMPALAConfig",
                                  "PQNConfig"])
def test_on_policy_configs_inherit_at_most_one_config(name):
    import jaxtrainer.algorithms as algorithms
    from jaxtrainer.algorithms import onpolicy

    cls = getattr(onpolicy if name == "OnPolicyConfig" else algorithms, name)
    assert len(cls.__mro__) <= 3, [c.__name__ for c in cls.__mro__]
