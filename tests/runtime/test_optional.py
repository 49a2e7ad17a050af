"""The packages of the optional extras: a missing one is one line naming the extra that
installs it, at the first place that needs it (before any training)."""

from __future__ import annotations

import json
import sys

import pytest

from jaxtrainer.runtime._optional import import_optional


def _uninstall(monkeypatch, package: str) -> None:
    """``package`` as if not installed, for this test: its modules already imported
    (by an earlier test in this process) leave ``sys.modules`` too."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)


def test_an_installed_module_is_imported():
    assert import_optional("json", "none", "reading") is json


@pytest.mark.parametrize("module,extra,purpose", [
    ("wandb", "wandb", "WandbLogger"),
    ("brax.envs", "brax", "make('brax/ant')"),
    ("rliable.library", "sweeps", "a sweep's summary"),
])
def test_a_missing_extra_names_its_install_line(monkeypatch, module, extra, purpose):
    _uninstall(monkeypatch, module.split(".")[0])
    with pytest.raises(ModuleNotFoundError, match=rf"^{purpose.replace('(', '[(]').replace(')', '[)]')} "
                                                  rf"needs {module.split('.')[0]}, which is not installed: "
                                                  rf"pip install 'jaxtrainer\[{extra}\]'$"):
        import_optional(module, extra, purpose)


def test_make_of_a_brax_name_without_brax_says_which_extra(monkeypatch):
    from jaxtrainer import envs

    _uninstall(monkeypatch, "brax")
    with pytest.raises(ModuleNotFoundError, match=r"make\('brax/ant'\) needs brax, .* "
                                                  r"pip install 'jaxtrainer\[brax\]'"):
        envs.make("brax/ant")


def test_a_sweep_without_rliable_stops_when_its_summary_is_made(monkeypatch):
    """``jaxtrainer fit ppo sweep.seeds=2`` without ``[sweeps]``: one line before any
    training (the summary is made with the Trainer, not at the sweep's end)."""
    from jaxtrainer.population import SweepSummary

    _uninstall(monkeypatch, "rliable")
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'jaxtrainer\[sweeps\]'"):
        SweepSummary()
