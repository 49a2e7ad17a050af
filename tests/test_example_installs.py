"""Every documented example runs with the install its page names: each package an
example imports is provided by the page's ``pip install`` line (the base install when
the page names none), read from the installed package metadata (requirements and
extras, followed transitively)."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {  # example: the page that documents it
    "examples/actor_critic.py": "docs/guides/writing-modules.md",
    "examples/purejaxrl/ppo.py": "docs/guides/porting-purejaxrl.md",
    "examples/purejaxrl/ppo_rnn.py": "docs/guides/porting-purejaxrl.md",
    "examples/purejaxrl/dqn.py": "docs/guides/porting-purejaxrl.md",
}


def _extras_on(page: str) -> set[str]:
    """The extras of the page's ``pip install -e ".[...]"`` lines (none: the base)."""
    text = (ROOT / page).read_text()
    return {extra for group in re.findall(r'pip install -e "\.\[([\w,\-]+)\]"', text)
            for extra in group.split(",")}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _provided(extras: set[str]) -> set[str]:
    """The distributions ``pip install -e ".[extras]"`` installs: jaxtrainer's base
    requirements and those of ``extras``, each followed through its own requirements."""
    todo = [("jaxtrainer", frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    found: set[str] = set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        found.add(_norm(name))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (a platform's own): nothing to follow
        for line in requires:
            req = Requirement(line)
            envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return found


def _imported_distributions(example: str) -> dict[str, set[str]]:
    """``{top-level module: distributions that provide it}`` of the example's imports
    (the standard library and jaxtrainer left out)."""
    tree = ast.parse((ROOT / example).read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    providers = metadata.packages_distributions()
    return {m: {_norm(d) for d in providers.get(m, [m])} for m in sorted(modules)
            if m not in sys.stdlib_module_names and m not in ("jaxtrainer", "__future__")}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_each_example_imports_only_what_its_page_installs(example):
    page = EXAMPLES[example]
    assert Path(example).name in (ROOT / page).read_text(), f"{page} no longer names {example}"
    provided = _provided(_extras_on(page))
    missing = {m: d for m, d in _imported_distributions(example).items() if not d & provided}
    assert missing == {}, (f"{example} imports {sorted(missing)}, which the install line of {page} "
                           f"({sorted(_extras_on(page)) or 'the base install'}) does not provide")


def test_the_check_sees_a_missing_extra():
    """The PureJaxRL port needs distrax, which only the ``[examples]`` extra brings."""
    assert "distrax" in _imported_distributions("examples/purejaxrl/ppo.py")["distrax"]
    assert "distrax" not in _provided(set())
    assert "distrax" in _provided({"examples"})
    assert "brax" not in _provided(set()) and "brax" in _provided({"brax"})
