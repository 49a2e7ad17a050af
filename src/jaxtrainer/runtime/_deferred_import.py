"""Import a library without the modules it imports only for later use.

Some libraries import heavy modules at module level for one rarely called
function: gymnax's environment package imports ``matplotlib.pyplot`` and
``seaborn`` (which imports ``scipy.stats``) for ``render`` alone, about 1.5-2 s
of a 5 s start-up on 2 CPU cores. Within :func:`deferred_imports` an ``import``
of one of the named modules binds a stand-in that imports the real module on
its first attribute access (``plt.subplots``) and forwards to it from then on.

When the block ends, the stand-ins leave ``sys.modules``: every later
``import matplotlib`` in the process (yours, a logger's) gets the real module,
imported as usual. Only the names bound inside the block hold stand-ins.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator


class DeferredModule(types.ModuleType):
    """Stands in for module ``__name__`` until an attribute it lacks is read.

    It has the real module's ``__spec__`` (and ``__path__`` for a package), so the
    import system can bind it and its named submodules without running any of
    them. Reading any other attribute imports the real module (see the module
    docstring) and returns the real attribute.
    """

    def __init__(self, name: str, spec: importlib.machinery.ModuleSpec) -> None:
        super().__init__(name)
        self.__spec__ = spec
        self.__loader__ = spec.loader
        if spec.submodule_search_locations is not None:
            self.__path__ = list(spec.submodule_search_locations)

    def __getattr__(self, attr: str) -> object:
        return getattr(_real(self.__name__), attr)

    def __repr__(self) -> str:
        return f"<deferred module {self.__name__!r}>"


def _real(name: str) -> types.ModuleType:
    """The real module ``name``, imported now if it is not yet; stand-ins still in
    ``sys.modules`` (the block has not ended) are removed first, so the real
    package and its submodules import one another as usual."""
    for key, module in list(sys.modules.items()):
        if isinstance(module, DeferredModule):
            del sys.modules[key]
    return importlib.import_module(name)


def _spec(name: str, specs: dict[str, importlib.machinery.ModuleSpec]):
    """``name``'s spec, found without importing it or its parent package."""
    parent = name.rpartition(".")[0]
    if not parent:
        return importlib.util.find_spec(name)
    outer = specs.get(parent)
    if outer is None or outer.submodule_search_locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(outer.submodule_search_locations))


@contextlib.contextmanager
def deferred_imports(*names: str) -> Iterator[None]:
    """Within the block, importing any of ``names`` binds a :class:`DeferredModule`.

    Args:
      names: absolute module names, parents before their submodules (e.g.
        ``"matplotlib", "matplotlib.pyplot"``). A submodule's parent must be
        among them.

    Nothing is deferred (the block imports as usual) when any of ``names`` is
    already imported or one of them cannot be found: deferring then would mix
    real modules with stand-ins, or hide an import error until first use.
    """
    if any(name in sys.modules for name in names):
        yield
        return
    specs: dict[str, importlib.machinery.ModuleSpec] = {}
    for name in names:
        spec = _spec(name, specs)
        if spec is None:
            yield
            return
        specs[name] = spec
    stand_ins = {name: DeferredModule(name, spec) for name, spec in specs.items()}
    for name, module in stand_ins.items():
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(stand_ins[parent], child, module)  # as the import system binds a submodule
    try:
        yield
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
