"""Griffe extension: names a package exports through ``lazy_loader.attach``.

A package ``__init__.py`` such as::

    __getattr__, __dir__, __all__ = lazy_loader.attach(
        __name__, submod_attrs={"trainer": ["PopulationTrainer"], "pbt": ["PBT"]})

imports nothing until a name is used, so static analysis sees no
``PopulationTrainer`` in the package and every alias to it
(``from jaxtrainer.population import PopulationTrainer`` elsewhere) fails to
resolve. This extension reads the ``attach`` call's literal ``submod_attrs`` and
adds each name to the package as an alias of ``<package>.<submodule>.<name>``,
exported (``__all__``) as ``lazy_loader`` exports it. Packages that ship a
``__init__.pyi`` stub for ``lazy_loader.attach_stub`` need nothing: griffe reads
the stub. Configured in ``mkdocs.yml`` beside ``griffe_roles.py``.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


class LazyLoaderAttach(griffe.Extension):
    """Aliases for the names of ``lazy_loader.attach(__name__, submod_attrs=...)``."""

    def on_module_members(self, *, node: ast.AST | griffe.ObjectNode, mod: griffe.Module,
                          agent: Any, **kwargs: Any) -> None:
        if not isinstance(node, ast.Module):
            return
        names: list[str] = []
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and _is_attach(call.func)):
                continue
            for keyword in call.keywords:
                if keyword.arg != "submod_attrs" or not isinstance(keyword.value, ast.Dict):
                    continue
                for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                    if not (isinstance(key, ast.Constant) and isinstance(value, (ast.List, ast.Tuple))):
                        continue
                    for element in value.elts:
                        if isinstance(element, ast.Constant) and isinstance(element.value, str):
                            name = element.value
                            names.append(name)
                            if name not in mod.members:
                                mod.set_member(name, griffe.Alias(
                                    name, f"{mod.path}.{key.value}.{name}", parent=mod))
        if names:
            mod.exports = [*(mod.exports or []), *(n for n in names if n not in (mod.exports or []))]


def _is_attach(func: ast.expr) -> bool:
    """``lazy_loader.attach`` or ``attach`` (not ``attach_stub``)."""
    if isinstance(func, ast.Attribute):
        return func.attr == "attach"
    return isinstance(func, ast.Name) and func.id == "attach"
