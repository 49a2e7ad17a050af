"""Griffe extension: Sphinx-style roles in docstrings become cross-references.

The package's docstrings write references the Sphinx way, e.g.
``:meth:`~jaxtrainer.Trainer.fit` ``, ``:class:`Module` `` or
``:func:`title <jaxtrainer.load_policy>` ``. mkdocstrings renders Markdown, where
those would show as raw text. Once the package is loaded (before anything is
rendered), this extension rewrites every role in every docstring:

* the target is resolved from the scope of the object that holds the docstring
  (its members, its imports, its parents'), as Python would find the name there,
  falling back to the package's top-level names;
* a target inside the documented package becomes an *optional* autorefs
  cross-reference, ``<autoref identifier="jaxtrainer.trainer.Trainer.fit"
  optional>`fit`</autoref>``: a link where the object is rendered on some page,
  inline code (no warning, so ``mkdocs build --strict`` passes) where it is not;
* anything else (``jax.lax.scan``, ``optax``, builtins, names that do not
  resolve) becomes inline code.

Display text follows Sphinx: ``~a.b.c`` shows ``c``, ``title <target>`` shows
``title``, a leading ``!`` suppresses the link. Configured in ``mkdocs.yml``::

    plugins:
      - mkdocstrings:
          handlers:
            python:
              options:
                extensions:
                  - docs/griffe_roles.py:RolesToLinks
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(
    r"(?<![\w`]):(?:py:)?(?P<role>meth|func|class|attr|mod|data|exc|obj|const):"
    r"`(?P<content>[^`]+)`"
)
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)

_logger = griffe.get_logger("griffe_roles")


class RolesToLinks(griffe.Extension):
    """Rewrite Sphinx roles in the docstrings of the packages named in ``packages``.

    Parameters:
        packages: Top-level packages whose objects may be linked (default: the
            loaded package itself).
    """

    def __init__(self, packages: list[str] | None = None) -> None:
        super().__init__()
        self.packages = tuple(packages or ())
        self.rewritten = 0
        self.linked = 0

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        packages = self.packages or (pkg.name,)
        if pkg.name not in packages:
            return
        self.collection = loader.modules_collection
        self.root = pkg
        self.linkable = packages
        seen: set[int] = set()
        for obj in _walk(pkg, seen):
            docstring = obj.docstring
            if docstring is not None and ":" in docstring.value:
                docstring.value = ROLE.sub(lambda m, o=obj: self._replace(m, o), docstring.value)
        _logger.debug("griffe_roles: %d roles in %s, %d linkable", self.rewritten, pkg.name,
                      self.linked)

    def _replace(self, match: re.Match, obj: griffe.Object) -> str:
        self.rewritten += 1
        content = " ".join(match["content"].split())
        titled = TITLED.match(content)
        if titled:
            title, target = titled["title"], titled["target"].strip()
        else:
            title = target = content
        no_link = target.startswith("!")
        target = target.lstrip("!")
        if target.startswith("~"):
            target = target[1:]
            if not titled:
                title = target.rstrip("()").rsplit(".", 1)[-1] + ("()" if target.endswith("()") else "")
        elif not titled:
            title = target
        code = "`" + title + "`"
        if no_link:
            return code
        identifier = self._resolve(obj, target.removesuffix("()"))
        if identifier is None:
            return code
        self.linked += 1
        return f'<autoref identifier="{html.escape(identifier)}" optional>{code}</autoref>'

    def _exists(self, path: str) -> bool:
        try:
            self.collection.get_member(path)
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return False
        return True

    def _resolve(self, obj: griffe.Object, target: str) -> str | None:
        """The path of ``target`` as seen from ``obj``'s docstring, or None when it is
        not inside a linkable package."""
        if not target or not re.fullmatch(r"[\w.]+", target):
            return None
        if target.startswith("."):  # relative to the docstring's module, then its package
            module = obj.module
            bases = [module.path, *([module.parent.path] if module.parent else [])]
            candidates = [base + target for base in bases]
            for path in candidates:
                if self._exists(path):
                    target = path
                    break
            else:
                target = candidates[0]
        first, _, rest = target.partition(".")
        path = None
        if first in self.linkable:
            path = target
        else:
            scope: griffe.Object | None = obj
            while scope is not None and path is None:
                try:
                    resolved = scope.resolve(first)  # this scope, then its parents'
                except (griffe.NameResolutionError, griffe.AliasResolutionError, KeyError):
                    break
                if "(" in resolved or "[" in resolved:  # a parameter: look past the function
                    scope = scope.parent
                else:
                    path = resolved
            if path is None and first in self.root.members:
                path = f"{self.root.path}.{first}"
            if path is None:
                return None
            if rest:
                path = f"{path}.{rest}"
        if path.split(".", 1)[0] not in self.linkable:
            return None
        try:
            found = self.collection.get_member(path)
            return found.canonical_path
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return path


def _walk(obj: griffe.Object, seen: set[int]):
    """Every object defined in the package (aliases, i.e. imports, left out)."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    for member in list(obj.members.values()):
        if member.is_alias:
            continue
        yield from _walk(member, seen)
