"""Every path of the alias table: a module path or name that moved since 0.1.0 is
found, with a DeprecationWarning naming the new home, until 0.3.0; EvoRL's paths are
found without one; the old call form of ``checkpoint.resolve`` still works; the recipe
scripts are the generated ones."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from jaxtrainer import aliases
from jaxtrainer.checkpoint import resolve
from jaxtrainer.commands import script
from jaxtrainer.recipes._catalog import RECIPES
from tests._support.commands import ROOT

MOVED_MODULES = sorted((old, new) for old, new in aliases.ALIASES.items()
                       if ":" not in old and not isinstance(new, aliases.Kept))


@pytest.mark.parametrize("old,new", MOVED_MODULES)
def test_every_old_module_path_imports_the_new_module_with_a_warning(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"^{old} moved to {new}; .* 0\.3\.0\)$"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert not (ROOT / "src" / Path(*old.split("."))).with_suffix(".py").exists()


@pytest.mark.parametrize("old,new", sorted((o, n) for o, n in aliases.ALIASES.items() if ":" in o))
def test_every_aliased_name_is_the_object_at_its_new_home(old, new):
    module, name = old.split(":")
    new_module, new_name = new.split(":")
    want = getattr(importlib.import_module(new_module), new_name)
    here = importlib.import_module(module)
    if isinstance(new, aliases.Kept):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert getattr(here, name) is want
    else:
        with pytest.warns(DeprecationWarning, match=rf"^{module}\.{name} moved to {new_module}\.{new_name}; "):
            assert getattr(here, name) is want
    assert name in dir(here)


def test_evorls_module_paths_are_kept_without_a_warning(monkeypatch):
    kept = {o: n for o, n in aliases.ALIASES.items() if isinstance(n, aliases.Kept) and ":" not in o}
    assert sorted(kept) == [f"jaxtrainer.distributed.{m}" for m in ("comm", "gradients", "sharding")]
    for old, new in kept.items():
        monkeypatch.delitem(sys.modules, old, raising=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert importlib.import_module(old) is importlib.import_module(new)


def test_a_name_the_table_does_not_list_is_an_attribute_error():
    import jaxtrainer.distributed as jd

    with pytest.raises(AttributeError, match=r"module 'jaxtrainer.distributed' has no attribute 'nope'"):
        jd.nope  # noqa: B018
    with pytest.raises(ValueError, match=r"the table lists no name in 'jaxtrainer.trainer'"):
        aliases.attach("jaxtrainer.trainer")


def test_the_two_replaced_functions_of_jaxtrainer_runs(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "jaxtrainer.runs", raising=False)
    with pytest.warns(DeprecationWarning):
        runs = importlib.import_module("jaxtrainer.runs")
    assert runs.new_run_dir is importlib.import_module("jaxtrainer.rundir.runs").new_run_dir
    with pytest.warns(DeprecationWarning, match="resolve_ckpt_path"), \
            pytest.raises(FileNotFoundError, match="no checkpoint"):
        runs.resolve_checkpoint("last", tmp_path / "empty")
    step = tmp_path / "version_0" / "checkpoints" / "4"
    _fake_checkpoint(step)
    with pytest.warns(DeprecationWarning, match="resolve_ckpt_path"):
        assert runs.resolve_checkpoint("last", tmp_path) == step


def test_resolve_in_the_0_1_order_reads_as_the_new_one(tmp_path):
    step = tmp_path / "version_0" / "checkpoints" / "4"
    _fake_checkpoint(step)
    assert resolve(tmp_path / "version_0", "last") == step
    with pytest.warns(DeprecationWarning, match=r"resolve\('last', root\) is now written "
                                                r"resolve\(root, 'last'\)"):
        assert resolve("last", str(tmp_path / "version_0")) == step


def _fake_checkpoint(step: Path) -> None:
    """A complete checkpoint step directory as the resolver sees one."""
    from jaxtrainer.checkpoint import _files as files

    step.mkdir(parents=True)
    (step / files.META).mkdir()
    (step / files.META / "metadata").write_text("{}")
    (step / files.STATE).mkdir()
    (step / "_CHECKPOINT_METADATA").write_text("{}")


@pytest.mark.timeout(60)
def test_python_m_of_an_old_command_path_runs_the_new_command():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    out = subprocess.run([sys.executable, "-m", "jaxtrainer.cli", "--help"], env=env,
                         capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: jaxtrainer COMMAND")
    assert "jaxtrainer.cli moved to jaxtrainer.commands._cli" in out.stderr


def test_each_recipe_script_is_the_generated_one():
    scripts = sorted(p.stem for p in (ROOT / "recipes").glob("*.py"))
    assert scripts == sorted(RECIPES)
    for name in scripts:
        assert (ROOT / "recipes" / f"{name}.py").read_text() == script.source(name), (
            f"recipes/{name}.py differs from the catalog: run "
            "python -m jaxtrainer.commands.script recipes")
