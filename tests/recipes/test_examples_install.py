"""Every documented example imports only what the install line of its page provides:
the distributions its modules come from are among the requirements (followed through
their own requirements) of that line's ``jaxtrainer[extras]``."""

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PAGES = {  # an example: the page that tells how to run it
    "examples/actor_critic.py": "README.md",
    "examples/purejaxrl/ppo.py": "docs/guides/porting-purejaxrl.md",
    "examples/purejaxrl/ppo_rnn.py": "docs/guides/porting-purejaxrl.md",
    "examples/purejaxrl/dqn.py": "docs/guides/porting-purejaxrl.md",
}
INSTALL = re.compile(r'pip install -e "?\.(?:\[([\w,-]+)\])?"?')


def _name(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _closure(dist: str, extras: set[str], seen: dict[str, set[str]]) -> None:
    """Every distribution ``dist[extras]`` needs, installed ones followed through."""
    key = _name(dist)
    if extras <= seen.get(key, set()) and key in seen:
        return
    seen.setdefault(key, set()).update(extras)
    try:
        requires = md.requires(dist) or []
    except md.PackageNotFoundError:
        return
    for line in requires:
        req = Requirement(line)
        wanted = [e for e in extras | {""} if req.marker is None or req.marker.evaluate({"extra": e})]
        if wanted:
            _closure(req.name, set(req.extras), seen)


def _imported_distributions(example: Path) -> dict[str, set[str]]:
    """Top-level module -> the distributions that provide it, for every import."""
    providers = md.packages_distributions()
    modules = set()
    for node in ast.walk(ast.parse(example.read_text())):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return {m: {_name(d) for d in providers.get(m, [])} for m in sorted(modules)
            if m not in sys.stdlib_module_names and m != "__future__"}


@pytest.mark.parametrize("example", sorted(PAGES))
def test_an_examples_imports_come_with_the_install_line_of_its_page(example):
    page = (ROOT / PAGES[example]).read_text()
    lines = INSTALL.findall(page)
    assert lines, f"{PAGES[example]} names no `pip install -e .` line for {example}"
    extras = set(lines[0].split(",")) if lines[0] else set()
    provided: dict[str, set[str]] = {}
    _closure("jaxtrainer", extras, provided)
    for module, dists in _imported_distributions(ROOT / example).items():
        assert dists, f"{example} imports {module}, which no installed distribution provides"
        assert dists & set(provided), (
            f"{example} imports {module} (from {sorted(dists)}), which "
            f"`pip install -e .{'[' + lines[0] + ']' if lines[0] else ''}` on {PAGES[example]} "
            "does not install")
