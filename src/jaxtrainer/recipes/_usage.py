"""``--help`` and ``--print-config`` of the recipes.

``--help`` lists every key of a recipe's config as ``key=value`` (the value
after the recipe's YAML file, ``--config`` and the overrides) with a one-line
doc read from the class the key goes to: the Trainer's (or PopulationTrainer's)
``Args:`` docstring section for ``trainer:``, the algorithm's config dataclass
``Attributes:`` (or the module class's ``Args:``) for ``algorithm:`` and the
recipe's other sections, :class:`~jaxtrainer.algorithms.torsos.NetworkConfig`
for ``network:``, :func:`jaxtrainer.envs.make` for ``env.name``, and
each logger's and callback's ``Args:`` for ``logger:`` and ``callbacks:``
(:mod:`jaxtrainer.recipes._components`). A key without such a doc shows the
comment at the end of its line in the YAML file.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from jaxtrainer import aliases
from jaxtrainer.recipes import _components as components
from jaxtrainer.recipes._command import TRACEBACK_VARIABLE

SECTION_HEADERS = ("Args:", "Arguments:", "Attributes:")
"""Google-style docstring sections whose ``name: text`` entries document keys."""

HELP_WIDTH = 120
"""Columns of ``--help`` when the terminal's width is unknown (output to a pipe
or file, no ``COLUMNS``): a key's doc wraps onto lines of this width."""

KEY_COLUMN = 42
"""Width of the ``key=value`` column."""


def _parse_entries(doc: str | None) -> dict[str, str]:
    entries: dict[str, str] = {}
    current: list[str] = []
    indent = None
    inside = False
    for line in inspect.cleandoc(doc or "").splitlines():
        stripped = line.strip()
        if stripped in SECTION_HEADERS:
            inside, indent, current = True, None, []
            continue
        if not inside:
            continue
        depth = len(line) - len(line.lstrip())
        if not stripped or depth == 0:
            inside, current = False, []
            continue
        indent = depth if indent is None else indent
        if depth == indent:
            m = re.match(r"^([\w*][\w*, ]*?)(?:\s*\([^)]*\))?:(?:\s+(.*))?$", stripped)
            current = [n.strip().lstrip("*") for n in m.group(1).split(",")] if m else []
            for name in current:
                entries.setdefault(name, m.group(2) or "")
        elif current:
            for name in current:
                entries[name] = f"{entries[name]} {stripped}".strip()
    return entries


def doc_entries(obj: Any) -> dict[str, str]:
    """The ``Args:``/``Attributes:`` entries documenting ``obj``: for a class,
    those of its docstring and its ``__init__``'s, then its composed parts'
    (an algorithm config's ``composed_parts``), then its bases' (a subclass's
    entry wins); for a function, its docstring's. ``"a, b: text"`` documents
    both names; ``**kwargs`` is ``kwargs``."""
    docs = []
    if isinstance(obj, type):
        for cls in obj.__mro__:
            docs.append(cls.__doc__)
            init = cls.__dict__.get("__init__")
            docs.append(getattr(init, "__doc__", None))
            docs.extend(part.__doc__ for part in cls.__dict__.get("composed_parts", ()))
    else:
        docs.append(getattr(obj, "__doc__", None))
    entries: dict[str, str] = {}
    for doc in docs:
        for name, text in _parse_entries(doc).items():
            entries.setdefault(name, text)
    return entries


def one_sentence(text: str, width: int | None = None) -> str:
    """``text``'s first sentence without reST markup, whole (``width``: cut to
    that many characters, ending ``...``)."""
    text = re.sub(r":\w+:`~([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    text = re.sub(r":\w+:`([^`]+)`", r"\1", text)
    text = text.replace("``", "")
    text = re.split(r"(?<=\.)\s+(?=[A-Z(])", " ".join(text.split()), maxsplit=1)[0]
    return text if width is None or len(text) <= width else text[:width - 3].rstrip() + "..."


def yaml_comments(path: str | os.PathLike) -> dict[str, str]:
    """The end-of-line comments of a YAML file of nested mappings, by dotted key."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in Path(path).read_text().splitlines():
        m = re.match(r"^(\s*)([\w.-]+):(.*)$", line)
        if not m:
            continue
        depth = len(m.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        stack.append((depth, m.group(2)))
        if "#" in m.group(3):
            comments[".".join(k for _, k in stack)] = m.group(3).split("#", 1)[1].strip()
    return comments


def show(value: Any) -> str:
    """A value as YAML writes it inline (``null``, ``true``, ``[64, 64]``, ``.inf``)."""
    if value == "{...}":
        return value
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=False)
    if value is inspect.Parameter.empty:
        return "???"
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text[:-4].strip() if text.endswith("\n...") else text


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return {}


def _documented(cls: type) -> set[str]:
    return set(doc_entries(cls)) | set(_parameters(cls))


def pick_class(keys: Iterable[str], candidates: Iterable[type]) -> type | None:
    """The first of ``candidates`` that documents or takes the most of ``keys``
    (``None`` when none takes any)."""
    keys = set(keys)
    best, score = None, 0
    for cls in candidates:
        covered = len(keys & _documented(cls))
        if covered > score:
            best, score = cls, covered
        if score == len(keys):  # none later can do better: stop importing
            break
    return best


def _columns() -> int:
    return shutil.get_terminal_size((HELP_WIDTH, 24)).columns


def _paragraph(text: str) -> str:
    """``text`` wrapped to the terminal's width, continuation lines indented."""
    return "\n".join(textwrap.wrap(text, width=max(_columns() - 1, 40), subsequent_indent="    ",
                                   break_on_hyphens=False)) or text


def _line(key: str, value: Any, doc: str) -> str:
    """``  key=value`` then ``doc`` from :data:`KEY_COLUMN`, wrapped to the
    terminal's width (continuation lines start at :data:`KEY_COLUMN`)."""
    return _beside(f"  {key}={show(value)}", doc)


def _beside(left: str, doc: str) -> str:
    """``left`` then ``doc`` wrapped in the column from :data:`KEY_COLUMN` (on
    the next line when ``left`` reaches into it)."""
    wrapped = textwrap.wrap(doc, width=max(_columns() - 1 - KEY_COLUMN, 30),
                            break_on_hyphens=False)
    if not wrapped:
        return left
    indent = " " * KEY_COLUMN
    if len(left) + 2 > KEY_COLUMN:
        return "\n".join([left, *(indent + line for line in wrapped)])
    return "\n".join([left.ljust(KEY_COLUMN) + wrapped[0], *(indent + line for line in wrapped[1:])])


def _leaves(node: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(node, DictConfig):
        out = []
        for k, v in node.items_ex(resolve=False):
            out += _leaves(v, f"{prefix}.{k}")
        return out or [(prefix, {})]
    return [(prefix, node)]


def _trainer_docs(keys: Iterable[str]) -> tuple[str, dict[str, str]]:
    from jaxtrainer.population import PopulationTrainer
    from jaxtrainer.trainer import Trainer

    plain = {k: one_sentence(v) for k, v in doc_entries(Trainer).items()}
    plain["ckpt_path"] = one_sentence(doc_entries(Trainer.fit).get("ckpt_path", ""))
    if "population_size" not in set(keys):
        return "jaxtrainer.Trainer's arguments, plus ckpt_path (of fit)", plain
    own = {k: one_sentence(v) for k, v in doc_entries(PopulationTrainer).items()}
    docs = {**plain, **{k: v for k, v in own.items() if not v.startswith("as in")}}
    return "jaxtrainer.PopulationTrainer's arguments, plus ckpt_path (of fit)", docs


def _component_lines(section: str, node: Any) -> list[str]:
    registry = components.SECTIONS[section]
    lines = []
    for name, cls in registry.items():
        value = node.get(name) if isinstance(node, DictConfig) else None
        about = one_sentence(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0])
        lines.append(_line(f"{section}.{name}", "{...}" if isinstance(value, DictConfig) else value,
                           f"{cls.__name__}: {about}"))
        docs = {k: one_sentence(v) for k, v in doc_entries(cls).items()}
        given = value if isinstance(value, DictConfig) else {}
        params = _parameters(cls)
        for key in components.own_keys(cls):
            shown = given[key] if key in given else params[key].default
            lines.append(_line(f"{section}.{name}.{key}", shown, docs.get(key, "")))
        extra = [k for k in given if k not in params]
        for key in extra:
            lines.append(_line(f"{section}.{name}.{key}", given[key], "passed on"))
        if cls in components.PASSED_ON:  # named, not listed: listing imports that package
            target = components.PASSED_ON[cls][0]
            lines.append(_beside(f"  {section}.{name}.<key>=...",
                                 f"also {target}'s keyword arguments (a wrong one is named "
                                 "with the closest)"))
    return lines


SECTION_ABOUT = {
    "logger": ("where metrics go: each entry true (its defaults), false/null (off) or its keys "
               "(setting one turns it on); trainer.logger=false turns every one off"),
    "callbacks": ("each entry true (its defaults), false/null (off) or its keys (setting one "
                  "turns it on); trainer.enable_checkpointing=false turns the checkpoint off"),
    "env": "the environment: jaxtrainer.envs.make(name, **the other keys); keys may be added",
    "sweep": ("many seeds and a hyperparameter grid trained side by side in one compiled "
              "program (jaxtrainer.population.Sweep); budgets are per member"),
    "search": ("a hyperparameter search in one compiled program "
               "(jaxtrainer.population.Search); budgets are per run"),
    "network": ("what the observation goes through before the algorithm's hidden layers "
                "(jaxtrainer.algorithms.torsos.NetworkConfig)"),
}
"""One-line descriptions of the sections whose keys come from no single class."""

RESUME_DOC = ("with trainer.ckpt_path, what to do with settings given now that change what "
              "the saved run learns (env:, algorithm:, sweep:, ...): refuse (one line, exit "
              "status 2) or apply; trainer:, logger: and callbacks: changes always apply.")
"""The doc of ``trainer.resume_overrides`` (a key no YAML file lists)."""


def bullet_docs(doc: str | None, section: str) -> dict[str, str]:
    """The ``* ``section.key``: text`` bullets of a module docstring, by key
    (``* ``sweep.hyperparams.<name>=[...]``: ...`` documents ``hyperparams``)."""
    pattern = rf"^\* ``{re.escape(section)}\.(\w+)[^`]*``: (.+?)(?=^\* |^\s*$|\Z)"
    return {m.group(1): one_sentence(m.group(2).strip().rstrip(";"))
            for m in re.finditer(pattern, inspect.cleandoc(doc or ""), re.M | re.S)}


def _section_docs(section: str, keys: list[str], candidates: Iterable[type]
                  ) -> tuple[str, dict[str, str]]:
    """``(what documents the section, {key: one-line doc})``."""
    from jaxtrainer import envs
    from jaxtrainer.recipes import _search as search
    from jaxtrainer.recipes import _sweep as sweep

    if section == "trainer":
        return _trainer_docs(keys)
    if section == "env":  # the recipe's own classes only: the library's need no import for it
        own = candidates.given() if isinstance(candidates, _Candidates) else candidates
        task = next((c for c in own if getattr(c, "ENV_SECTION", None)), None)
        if task is not None:  # the section names a task, not an environment
            return task.ENV_SECTION, {}
        return SECTION_ABOUT["env"], {"name": one_sentence(doc_entries(envs.make).get("name", ""))}
    if section in (sweep.SECTION, search.SECTION):
        source = sweep if section == sweep.SECTION else search
        return SECTION_ABOUT[section], bullet_docs(source.__doc__, section)
    if section == "network":
        from jaxtrainer.algorithms.torsos import NetworkConfig

        return SECTION_ABOUT["network"], {k: one_sentence(v)
                                          for k, v in doc_entries(NetworkConfig).items()}
    cls = pick_class(keys, candidates)
    docs = {k: one_sentence(v) for k, v in doc_entries(cls).items()} if cls else {}
    return (f"{cls.__module__}.{cls.__qualname__}" if cls else ""), docs


def help_text(cfg: DictConfig, prog: str, sources: Sequence[str | os.PathLike],
              candidates: Iterable[type], about: str | None = None,
              preset: Any = None) -> str:
    """The text of ``--help``: usage, ``about`` (the recipe's docstring), then
    every key of ``cfg`` (and every ``logger:``/``callbacks:`` entry) as
    ``key=value`` with its one-line doc. ``sources`` are the YAML files (the
    recipe's and a ``--config`` one) whose end-of-line comments document keys
    the classes do not; ``candidates`` are the classes that may document the
    recipe's own sections (``algorithm:``, ...), best first; ``preset`` the
    :class:`~jaxtrainer.recipes._presets.Preset` applied over the recipe's YAML, if any."""
    from jaxtrainer.recipes import _resume as resume

    comments: dict[str, str] = {}
    for path in sources:
        for k, v in yaml_comments(path).items():
            comments.setdefault(k, v)
    out = [f"usage: {prog} [--config FILE] [--print-config] [-h] [section.key=value ...]", ""]
    if about:
        out += [inspect.cleandoc(about), ""]
    preset = (f", then its preset for {preset.env} (jaxtrainer/recipes/presets/{preset.recipe}.yaml)"
              if preset is not None else "")
    shown = ", ".join(os.path.relpath(p) if not os.path.relpath(p).startswith("..") else os.fspath(p)
                      for p in sources)
    out += [_paragraph(text) for text in (
        f"Keys with their values ({shown}{preset}, then the overrides); set any as "
        "section.key=value.",
        "--config FILE merges FILE (only what differs) over the recipe's YAML file; "
        "--print-config prints the resolved config and exits.",
        "A bad key or value prints one line and exits with status 2 "
        f"(set {TRACEBACK_VARIABLE}=1 for the traceback).")] + [""]
    sections = [str(k) for k in cfg]
    sections += [s for s in components.SECTIONS if s not in sections]
    for section in sections:
        node = cfg.get(section)
        if section in components.SECTIONS:
            out.append(_paragraph(f"{section}: {SECTION_ABOUT[section]}"))
            out += _component_lines(section, node)
            out.append("")
            continue
        if not isinstance(node, DictConfig):
            out += [_line(section, node, comments.get(section, "")), ""]
            continue
        keys = [str(k) for k in node]
        about_section, docs = _section_docs(section, keys, candidates)
        out.append(_paragraph(f"{section}: {about_section}") if about_section else f"{section}:")
        for key in keys:
            for i, (dotted, value) in enumerate(_leaves(node[key] if key in node else None,
                                                        f"{section}.{key}")):
                doc = docs.get(key) or comments.get(dotted) or comments.get(f"{section}.{key}", "")
                out.append(_line(dotted, value, doc if i == 0 or dotted in comments else ""))
        if section == "trainer":
            out.append(_line(resume.KEY, "refuse", RESUME_DOC))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def config_text(cfg: DictConfig, recipe: str | None) -> str:
    """The resolved config as YAML, with ``recipe: <recipe>`` first when given
    (what ``<run_dir>/config.yaml`` holds; a valid ``--config`` file)."""
    body = OmegaConf.to_container(cfg, resolve=True)
    return OmegaConf.to_yaml(OmegaConf.create({"recipe": recipe, **body} if recipe else body))


def candidate_classes(namespaces: Iterable[dict[str, Any]]) -> Iterable[type]:
    """Classes that may document a recipe's sections: those in ``namespaces``
    (the recipe's names, first) defined in jaxtrainer, then the public classes
    of :mod:`jaxtrainer.algorithms`. Lazy and re-iterable: a class of the
    library is imported only when the ones before it left a section's keys
    undocumented (``--help`` stays fast; evosax loads only for an ES recipe)."""
    return _Candidates([*namespaces])


class _Candidates:
    """The iterable :func:`candidate_classes` returns (classes found so far are kept)."""

    def __init__(self, namespaces: list[dict[str, Any]]):
        self._found: list[type] = []
        self._namespaces = namespaces
        self._pending = self._walk(namespaces)

    def given(self) -> list[type]:
        """The classes of the namespaces given (the recipe's), none of the library's."""
        return [v for pool in self._namespaces for v in list(pool.values()) if isinstance(v, type)]

    @staticmethod
    def _walk(namespaces: list[dict[str, Any]]) -> Iterator[type]:
        import jaxtrainer.algorithms as algorithms

        for pool in namespaces:
            yield from (v for v in list(pool.values()) if isinstance(v, type))
        moved = aliases.names_of(algorithms.__name__)  # moved names: looked up where they live
        for name in algorithms.__all__:
            if name not in moved:
                yield getattr(algorithms, name)

    def __iter__(self) -> Iterator[type]:
        yield from list(self._found)
        for value in self._pending:
            if isinstance(value, type) and value.__module__.startswith("jaxtrainer") \
                    and value not in self._found:
                self._found.append(value)
                yield value
