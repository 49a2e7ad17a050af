"""The packages of the optional extras: a missing one is one line naming the extra that
installs it, at the first place that needs it (before any training)."""

from __future__ import annotations

import json

import pytest

from jaxtrainer.runtime._optional import import_optional


def test_an_installed_module_is_imported():
    assert import_optional("json", "none", "reading") is json


@pytest.mark.parametrize("module,extra,purpose", [
    ("wandb", "wandb", "WandbLogger"),
    ("brax.envs", "brax", "make('brax/ant')"),
    ("rliable.library", "sweeps", "a sweep's summary"),
])
def test_a_missing_extra_names_its_install_line(monkeypatch, module, extra, purpose):
    monkeypatch.setitem(__import__("sys").modules, module.split(".")[0], None)
    with pytest.raises(ModuleNotFoundError, match=rf"^{purpose.replace('(', '[(]').replace(')', '[)]')} "
                                                  rf"needs {module.split('.')[0]}, which is not installed: "
                                                  rf"pip install 'jaxtrainer\[{extra}\]'$"):
        import_optional(module, extra, purpose)


def test_make_of_a_brax_name_without_brax_says_which_extra(monkeypatch):
    from jaxtrainer import envs

    monkeypatch.setitem(__import__("sys").modules, "brax", None)
    monkeypatch.delitem(__import__("sys").modules, "brax.envs", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r"make\('brax/ant'\) needs brax, .* "
                                                  r"pip install 'jaxtrainer\[brax\]'"):
        envs.make("brax/ant")


def test_a_sweep_without_rliable_stops_when_its_summary_is_made(monkeypatch):
    """``jaxtrainer fit ppo sweep.seeds=2`` without ``[sweeps]``: one line before any
    training (the summary is made with the Trainer, not at the sweep's end)."""
    from jaxtrainer.population import SweepSummary

    monkeypatch.setitem(__import__("sys").modules, "rliable", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'jaxtrainer\[sweeps\]'"):
        SweepSummary()
