"""EvoRL's own tests on ``jaxtrainer.distributed``: only the import lines changed.

Usage::

    python benchmarks/evorl_suite.py PATH_TO_EVORL [--python PY] [--devices 1 4]

``PATH_TO_EVORL`` is a checkout of EvoRL (github.com/EMI-Group/evorl: its
``evorl`` package, ``tests`` and ``configs``). The script

1. finds every import statement of ``evorl.distributed`` (and its submodules
   ``comm``, ``gradients``, ``sharding``; relative ones such as ``from
   .distributed import pmean`` too) in EvoRL's package and tests, outside
   ``evorl/distributed`` itself;
2. imports each one, rewritten to ``jaxtrainer.distributed``, in a fresh
   process, and checks that every name EvoRL's ``evorl.distributed`` package and
   its submodules define is at the same path under ``jaxtrainer.distributed``;
3. copies EvoRL's package, tests and configs to a temporary directory twice:
   unmodified, and with only those import lines rewritten (the module name on
   the statement's first line, nothing else);
4. runs EvoRL's tests (``pytest --continue-on-collection-errors``, a timeout
   per test) in both copies on 1 and on 4 fake CPU devices
   (``XLA_FLAGS=--xla_force_host_platform_device_count=N``);
5. prints one row per test: its outcome unmodified and rewritten on each device
   count, then the import check.

It exits 1 if an import line does not resolve, an EvoRL name is missing, or a
test that passes unmodified does not pass rewritten on the same device count.

EvoRL's tests need EvoRL's dependencies. Those not already installed with
jaxtrainer's extras (brax, chex, distrax, tfp-nightly, gymnasium, optax,
orbax-checkpoint, pandas, wandb) pin versions jaxtrainer does not (``evox<1``
pins omegaconf 2.3), so they go into a venv that sees the global packages::

    python -m venv --system-site-packages /tmp/evorl-venv
    /tmp/evorl-venv/bin/pip install "evox<1.0.0" hydra-core hydra-joblib-launcher gym
    python benchmarks/evorl_suite.py /path/to/evorl --python /tmp/evorl-venv/bin/python

(``gym``: EvoRL's envpool wrapper imports it whenever envpool is installed.)
Both copies run on the jaxtrainer next to this script (it is put first on
``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THEIRS, OURS = "evorl.distributed", "jaxtrainer.distributed"
COPIED = ("evorl", "tests", "configs", "pyproject.toml")
PASSED = "passed"


@dataclass(frozen=True)
class ImportLine:
    """One import statement of ``evorl.distributed`` (or a submodule)."""

    path: str  # relative to the checkout
    line: int  # 1-based, the statement's first line
    module: str  # absolute, e.g. "evorl.distributed.comm"
    names: tuple[str, ...]
    source: str  # the statement as written


def _absolute(relpath: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names, relative ones resolved."""
    if not node.level:
        return node.module or ""
    package = list(relpath.with_suffix("").parts)
    package = package[:-1]  # the file's package (an __init__ is its own package's file)
    package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def import_lines(checkout: Path) -> list[ImportLine]:
    """Every import of ``evorl.distributed`` in EvoRL's package and tests.

    Raises:
      ValueError: a plain ``import evorl.distributed...`` statement (its uses
        would need rewriting too, which this script does not do).
    """
    found = []
    for top in ("evorl", "tests"):
        for file in sorted((checkout / top).rglob("*.py")):
            rel = file.relative_to(checkout)
            if rel.parts[:2] == ("evorl", "distributed"):
                continue
            text = file.read_text()
            for node in ast.walk(ast.parse(text, str(rel))):
                if isinstance(node, ast.Import) and any(
                        a.name == THEIRS or a.name.startswith(THEIRS + ".") for a in node.names):
                    raise ValueError(f"{rel}:{node.lineno}: `import {THEIRS}...` is not rewritten "
                                     "by this script; only `from ... import` statements are")
                if not isinstance(node, ast.ImportFrom):
                    continue
                module = _absolute(rel, node)
                if module == THEIRS or module.startswith(THEIRS + "."):
                    found.append(ImportLine(str(rel), node.lineno, module,
                                            tuple(a.name for a in node.names),
                                            ast.get_source_segment(text, node) or ""))
    return found


def rewritten(statement: ImportLine) -> str:
    """The statement with ``jaxtrainer.distributed`` for EvoRL's module, on one line."""
    return f"from {OURS}{statement.module[len(THEIRS):]} import {', '.join(statement.names)}"


_FROM = re.compile(r"^(\s*from\s+)(\.+distributed|evorl\.distributed)\b")


def rewrite_copy(copy: Path, statements: list[ImportLine]) -> None:
    """Change the module name on the first line of each statement in ``copy``."""
    for statement in statements:
        file = copy / statement.path
        lines = file.read_text().splitlines(keepends=True)
        first = lines[statement.line - 1]
        new, count = _FROM.subn(lambda m: m.group(1) + OURS, first)
        if count != 1:
            raise ValueError(f"{statement.path}:{statement.line}: cannot rewrite {first!r}")
        lines[statement.line - 1] = new
        file.write_text("".join(lines))


def _env(pythonpath: list[Path], devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("WANDB_MODE", "disabled")
    return env


def check_imports(statements: list[ImportLine], python: str) -> list[str]:
    """Each statement, rewritten, imported in a fresh process: the failures."""
    failures = []
    for statement in statements:
        done = subprocess.run([python, "-c", rewritten(statement)], capture_output=True,
                              text=True, env=_env([ROOT / "src"], 1), timeout=300)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            failures.append(f"{statement.path}:{statement.line}: {rewritten(statement)}: {last}")
    return failures


def evorl_names(checkout: Path) -> dict[str, list[str]]:
    """The public names EvoRL's ``evorl.distributed`` package and each of its
    submodules define: ``{"": [...], ".comm": [...], ...}``."""
    names: dict[str, list[str]] = {}
    for file in sorted((checkout / "evorl" / "distributed").glob("*.py")):
        sub = "" if file.stem == "__init__" else "." + file.stem
        tree = ast.parse(file.read_text())
        defined = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.ImportFrom) and node.level == 1:  # the package's re-exports
                defined.update(a.asname or a.name for a in node.names)
        names[sub] = sorted(n for n in defined if not n.startswith("_") and n != "__all__")
    return names


def check_names(names: dict[str, list[str]], python: str) -> list[str]:
    """The EvoRL names missing at their path under ``jaxtrainer.distributed``."""
    code = ("import importlib, json, sys\nmissing = []\n"
            f"for sub, names in {names!r}.items():\n"
            f"    module = importlib.import_module({OURS!r} + sub)\n"
            "    missing += [f'{module.__name__}.{n}' for n in names if not hasattr(module, n)]\n"
            "print(json.dumps(missing))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                          env=_env([ROOT / "src"], 1), timeout=300)
    if done.returncode:
        return [f"names check failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"]
    return __import__("json").loads(done.stdout.strip().splitlines()[-1])


def run_tests(copy: Path, devices: int, python: str, per_test: int) -> dict[str, str]:
    """EvoRL's tests in ``copy`` on ``devices`` fake CPU devices: ``{test id: outcome}``
    (``passed``, ``failed``, ``error``, ``skipped``)."""
    report = copy / f"junit-{devices}.xml"
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--continue-on-collection-errors", f"--timeout={per_test}",
                           f"--junitxml={report}", "tests"],
                          cwd=copy, env=_env([copy, ROOT / "src"], devices), capture_output=True,
                          text=True)
    if not report.exists():
        return {"(pytest)": f"crashed, exit {done.returncode}"}
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".removeprefix("tests.")
        kinds = {child.tag for child in case}
        outcomes[name] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                          else "skipped" if "skipped" in kinds else PASSED)
    return outcomes


def make_copy(checkout: Path, copy: Path, statements: list[ImportLine]) -> Path:
    """EvoRL's package, tests and configs copied to ``copy``, with ``statements``
    rewritten there (none: the unmodified copy)."""
    copy.mkdir()
    for part in COPIED:
        source = checkout / part
        if source.is_dir():
            shutil.copytree(source, copy / part)
        else:
            shutil.copy2(source, copy / part)
    rewrite_copy(copy, statements)
    return copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evorl", type=Path, help="a checkout of EvoRL (evorl/, tests/, configs/)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter with EvoRL's dependencies (default: this one)")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--jobs", type=int, default=1,
                        help="test runs (variant x device count) at once; each is one pytest")
    parser.add_argument("--per-test-timeout", type=int, default=1200, help="seconds")
    args = parser.parse_args(argv)
    checkout = args.evorl.resolve()
    missing = [p for p in COPIED if not (checkout / p).exists()]
    if missing:
        parser.error(f"{checkout}: no {', '.join(missing)}; expected a checkout of EvoRL")

    statements = import_lines(checkout)
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, EvoRL at {checkout}: "
          f"{len(statements)} import statements of {THEIRS} in {len({s.path for s in statements})} "
          "files", flush=True)
    import_failures = check_imports(statements, args.python)
    name_failures = check_names(evorl_names(checkout), args.python)
    print(f"import lines resolving under {OURS}: {len(statements) - len(import_failures)}/"
          f"{len(statements)}; EvoRL names missing at their path: {len(name_failures)}",
          flush=True)

    runs = [(variant, devices) for devices in args.devices for variant in ("unmodified", "rewritten")]
    with tempfile.TemporaryDirectory(prefix="evorl-suite-") as tmp:
        copies = {run: make_copy(checkout, Path(tmp) / f"{run[0]}-{run[1]}",
                                 statements if run[0] == "rewritten" else [])
                  for run in runs}

        def one(run: tuple[str, int]) -> dict[str, str]:
            start = time.perf_counter()
            outcomes = run_tests(copies[run], run[1], args.python, args.per_test_timeout)
            counts = collections.Counter(outcomes.values())
            print(f"  ran {run[0]} on {run[1]} device(s) in {time.perf_counter() - start:.0f} s: "
                  f"{dict(counts)}", flush=True)
            return outcomes

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = dict(zip(runs, pool.map(one, runs), strict=True))

    tests = sorted(set().union(*(r.keys() for r in results.values())))
    columns = runs
    header = ["test"] + [f"{d} dev {v}" for v, d in columns]
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    regressions = []
    for test in tests:
        row = [results[c].get(test, "absent") for c in columns]
        print(f"| {test} | " + " | ".join(row) + " |")
        for devices in args.devices:
            before = results["unmodified", devices].get(test)
            after = results["rewritten", devices].get(test)
            if before == PASSED and after != PASSED:
                regressions.append(f"{test} on {devices} device(s): {after}")
    for devices in args.devices:
        for variant in ("unmodified", "rewritten"):
            passed = sum(o == PASSED for o in results[variant, devices].values())
            print(f"{devices} device(s) {variant}: {passed}/{len(results[variant, devices])} passed")
    print(f"import lines resolving under {OURS}: {len(statements) - len(import_failures)}/"
          f"{len(statements)}; EvoRL names missing at their path: {len(name_failures)}")
    for line in import_failures + name_failures:
        print(f"  NOT RESOLVED {line}")
    for line in regressions:
        print(f"  REGRESSION {line}")
    return 1 if import_failures or name_failures or regressions else 0


if __name__ == "__main__":
    sys.exit(main())
