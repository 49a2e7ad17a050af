"""An algorithm one can read in one sitting (issue 67, must-show 1): the PPO reading
set the guide names is at most 4 files and 1,200 lines, no file under
``src/jaxtrainer/algorithms`` is over 500 lines, and no on-policy config's MRO holds
more than 3 classes."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).parents[2]
GUIDE = ROOT / "docs" / "guides" / "read-an-algorithm.md"
ALGORITHMS = ROOT / "src" / "jaxtrainer" / "algorithms"
MAX_FILES, MAX_SET_LINES, MAX_FILE_LINES = 4, 1200, 500

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
    assert not over, f"over {MAX_FILE_LINES} lines: {over}"


def _config_classes() -> list[type]:
    """Every dataclass named ``*Config`` defined in a module of ``jaxtrainer.algorithms``."""
    import dataclasses
    import importlib

    found = {}
    for path in sorted(ALGORITHMS.glob("*.py")):
        module = importlib.import_module(f"jaxtrainer.algorithms.{path.stem}".removesuffix(".__init__"))
        for value in vars(module).values():
            if isinstance(value, type) and value.__name__.endswith("Config") \
                    and dataclasses.is_dataclass(value) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def test_no_config_class_inherits_more_than_3_classes():
    """A config composes or declares its fields; its MRO (``object`` left out) holds at
    most 3 classes."""
    configs = _config_classes()
    assert {"PPOConfig", "DDPGConfig", "TD3Config", "CrossQConfig", "SACConfig"} <= \
        {c.__name__ for c in configs}
    deep = {c.__name__: [k.__name__ for k in c.__mro__[:-1]] for c in configs if len(c.__mro__) - 1 > 3}
    assert deep == {}
