"""Recipe configs: a YAML file plus ``key=value`` command-line overrides (omegaconf).

A recipe config has a ``trainer:`` section whose keys are the
:class:`~jaxtrainer.Trainer` arguments plus ``ckpt_path``, and sections of its
own (``env:``, ``algorithm:``). The accepted trainer keys are read from the
Trainer's (or PopulationTrainer's) signature, so a new Trainer argument is a
config key with nothing to update here. Overrides use omegaconf's dotlist syntax::

    python recipes/ppo.py trainer.strategy=pmap env.name=Acrobot-v1 algorithm.lr=1e-3

The ``logger:`` and ``callbacks:`` sections choose the loggers and callbacks
(:mod:`jaxtrainer.recipes._components`; their keys are read from the classes'
signatures too)::

    python recipes/ppo.py callbacks.checkpoint.every_n_steps=100 logger.wandb.mode=offline

Every recipe takes ``--help`` (every key with its value and a one-line doc,
:mod:`jaxtrainer.recipes._usage`), ``--print-config`` and ``--config FILE``
(:func:`config_arg`); run through :func:`cli`, a bad config prints one line and
exits with status 2. A run a recipe starts holds ``config.yaml``, the resolved
config plus ``recipe: <name>`` (:class:`~jaxtrainer.recipes._command.RunRecord`),
which is also a valid ``--config`` file of that recipe.
"""

from __future__ import annotations

import difflib
import inspect
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from jaxtrainer import envs
from jaxtrainer._arguments import ArgumentError, did_you_mean, expand_path
from jaxtrainer._formatting import fixed
from jaxtrainer.envs.registry import unknown as unknown_env
from jaxtrainer.module import Module
from jaxtrainer.population import PopulationTrainer
from jaxtrainer.recipes import _catalog as catalog
from jaxtrainer.recipes import _components as components
from jaxtrainer.recipes import _presets as presets
from jaxtrainer.recipes import _resume as resume
from jaxtrainer.recipes import _search as search
from jaxtrainer.recipes import _sweep as sweep
from jaxtrainer.recipes._command import CONFIG_FILE, RecipeRun, RunRecord, cli  # noqa: F401 (re-exported)
from jaxtrainer.rundir import run_layout, runs
from jaxtrainer.trainer import Trainer
from jaxtrainer.trainer.budget import Budget

_NOT_FROM_YAML = ("self", "callbacks", "budget", "resume_hint")
"""Trainer arguments that a YAML file cannot give: callbacks are Python objects
(a recipe passes them as keyword overrides of :func:`make_trainer`); the budget is
``max_steps`` and ``max_env_steps``, each member's in a sweep or a search
(:func:`make_trainer` builds the ``Budget``); the resume advice is the recipes'
(:data:`_RESUME_HINT`)."""


def accepted_keys(cls: type) -> tuple[str, ...]:
    """The keyword arguments of ``cls.__init__`` that a ``trainer:`` section may
    set, in signature order: all but :data:`_NOT_FROM_YAML` and ``*args``/``**kwargs``."""
    return tuple(name for name, p in inspect.signature(cls.__init__).parameters.items()
                 if name not in _NOT_FROM_YAML
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


_TRAINER_KEYS = accepted_keys(Trainer)
_POPULATION_TRAINER_KEYS = accepted_keys(PopulationTrainer)


_OPEN_SECTIONS = ("env",)
"""Sections to which a ``--config`` file or a command-line override may add keys
that the recipe's YAML lacks: an environment's keyword arguments differ by
environment (e.g. brax's ``backend``); :func:`make_env` rejects the ones the
environment does not take."""


_OPEN_KEYS = ("network.torso.",)
"""Key prefixes a ``--config`` file or an override may use that the recipe's
YAML lacks: a torso given as ``class_path``/``init_args`` (its arguments are
the user's module's; the algorithm's config checks them)."""


def _open_key(dotted: str) -> bool:
    return sweep.is_open_key(dotted) or search.is_open_key(dotted) or dotted.startswith(_OPEN_KEYS)


def _sections_checked(file: Any, schema: DictConfig, path: str) -> DictConfig:
    """A ``--config`` file's contents checked for shape: a mapping whose sections
    (``trainer:``, ``algorithm:``, ...) are mappings (a section left empty, null,
    is dropped).

    Raises:
      ValueError: naming the file, the section and what it holds instead.
    """
    if not isinstance(file, DictConfig):
        raise ValueError(f"{path}: expected a mapping of sections (trainer:, algorithm:, ...), "
                         f"got a {type(file).__name__.removesuffix('Config').lower()}")
    for name in list(file.keys()):
        if file.get(name) is None:
            del file[name]
        elif isinstance(schema.get(name), DictConfig) and not isinstance(file[name], DictConfig):
            first = next(iter(schema[name]), "key")
            shown = OmegaConf.to_container(file[name]) if isinstance(file[name], ListConfig) \
                else file[name]
            raise ValueError(f"{path}: section {name}: expected a mapping of its keys (e.g. "
                             f"'{name}: {{{first}: ...}}'), got {shown!r}")
    return file


def _check_key(base: DictConfig, dotted: str, source: str = "") -> None:
    """Raise ValueError unless ``dotted`` is a key of ``base`` (or of a
    ``logger:``/``callbacks:`` entry's class); the message lists the keys where
    the path ends and the closest known key."""
    if dotted.split(".", 1)[0] in components.SECTIONS:
        return components.check_key(dotted, source)
    node: Any = base
    walked: list[str] = []
    for part in dotted.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            where = ".".join(walked) or "<top level>"
            taken_before = [resume.KEY.split(".", 1)[1]] if where == "trainer" else []  # not in the YAML
            choices = (", ".join(sorted([*(str(k) for k in node), *taken_before]))
                       if isinstance(node, DictConfig) else "none")
            section = ".".join(walked) + "." if walked else ""
            known = [k for k in _leaf_keys(base) + [str(k) for k in base] + components.known_keys()
                     if not dotted.startswith(k + ".")  # never the section the key is in
                     and not (section and k.startswith(section))]  # nor its keys: listed above
            raise ValueError(f"{source}unknown config key {dotted!r}: {where} has keys: {choices}"
                             + (_near_in_section(walked, part, node) or _same_name(dotted, known)
                                or did_you_mean(dotted, known)))
        node = node[part]
        walked.append(part)


def _near_in_section(walked: list[str], part: str, node: Any) -> str:
    """``"; did you mean 'sweep.seeds'?"`` for ``sweep.seed``: a key of the same
    section spelled nearly alike (a close typo wins over another section's key
    of the same name), else ``""``."""
    if not walked or not isinstance(node, DictConfig):
        return ""
    close = difflib.get_close_matches(part, [str(k) for k in node], n=1, cutoff=0.8)
    return f"; did you mean {'.'.join([*walked, close[0]])!r}?" if close else ""


def _dashed(item: str, base: DictConfig) -> str:
    """The message for an override written as an option (``--lr=1e-3``)."""
    key, _, value = item[2:].partition("=")
    known = _leaf_keys(base) + components.known_keys()
    guess = key if key in known else next(
        (k for k in known if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]), None)
    hint = f"; did you mean {guess}={value or '...'}?" if guess else ""
    return (f"bad override {item!r}: overrides are section.key=value without dashes (the "
            f"options are --config FILE, --print-config and --help){hint}")


def _same_name(dotted: str, known: Sequence[str]) -> str:
    """``"; did you mean 'algorithm.lr'?"`` for ``lr`` (or ``trainer.lr``): the
    known keys ending in the same name, when some section has it (at most
    three listed), else ``""``."""
    name = dotted.rsplit(".", 1)[-1]
    found = list(dict.fromkeys(k for k in known if k != dotted and k.rsplit(".", 1)[-1] == name))
    if not found:
        return ""
    if len(found) == 1:
        return f"; did you mean {found[0]!r}?"
    return f"; did you mean one of {', '.join(map(repr, found[:3]))}?"


def _leaf_keys(node: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items_ex(resolve=False):
        dotted = f"{prefix}{key}"
        keys.extend(_leaf_keys(value, dotted + ".") if isinstance(value, DictConfig) else [dotted])
    return keys


def _a_file(path: str | os.PathLike, recipe: str | None = None) -> str | os.PathLike:
    """``path``, when it is a file.

    Raises:
      ValueError: a directory (naming the run's config file where it has one).
      FileNotFoundError: nothing there: one line naming the path, where it was
        looked for and the configs shipped with ``recipe`` (or all of them).
    """
    if os.path.isdir(path):
        saved = os.path.join(path, run_layout.CONFIG_FILE)
        hint = f": --config {saved} reruns that run's config" if os.path.isfile(saved) else ""
        raise ValueError(f"--config {path} is a directory, expected a YAML file{hint}")
    if not os.path.exists(path):
        shipped = sorted(p.name for p in catalog.CONFIGS.glob("*.yaml"))
        own = [n for n in shipped if recipe and (n == f"{recipe}.yaml" or n.startswith(f"{recipe}_"))]
        close = difflib.get_close_matches(Path(path).stem.lower(), [Path(n).stem for n in shipped], n=1,
                                            cutoff=0.75)
        raise FileNotFoundError(
            f"--config {os.fspath(path)}: no such file ({os.path.abspath(path)})"
            f"{f'; did you mean {close[0]}.yaml?' if close else ';'} expected a YAML file: a path "
            f"(relative to {os.getcwd()}) or the file name of a config shipped with jaxtrainer "
            f"({', '.join(own or shipped)}); jaxtrainer fit {recipe or 'RECIPE'} --print-config "
            "> mine.yaml writes one to edit")
    return path


def load(path: str | os.PathLike, overrides: Sequence[str] = (),
         defaults: str | os.PathLike | None = None) -> DictConfig:
    """The config of :func:`load_run` (``load_run(...).config``)."""
    return load_run(path, overrides, defaults).config


def load_run(path: str | os.PathLike, overrides: Sequence[str] = (),
             defaults: str | os.PathLike | None = None, prog: str | None = None) -> RecipeRun:
    """Load ``path`` and apply ``overrides`` (``"a.b=value"`` strings): the
    run a recipe command makes once and hands on, its config, recipe and resume.

    With ``defaults`` (the recipe's own YAML file) and a different ``path`` (a
    ``--config`` file), ``path`` is merged over ``defaults``: it need only hold
    what differs, and each of its keys must exist in ``defaults`` (except under
    the sections in :data:`_OPEN_SECTIONS`). The keys of the ``logger:`` and
    ``callbacks:`` sections are checked against their classes' signatures
    (:mod:`jaxtrainer.recipes._components`) instead, in every file and override;
    ``<entry>=true`` over an entry the file gives as a mapping keeps the mapping.

    Loaded from the recipe's own YAML (``path`` is ``defaults``), the recipe's
    preset for the env it trains is applied over it, under the overrides
    (:mod:`jaxtrainer.recipes._presets`; :func:`preset_of`).

    A top-level ``recipe:`` key (as in a run's ``config.yaml``) is taken out of
    the config into :attr:`RecipeRun.recipe` (else the stem of ``defaults``, or
    of ``path``: ``ppo`` for ``recipes/configs/ppo.yaml``). With
    ``trainer.ckpt_path``, the checkpoint is resolved here, once, and the run
    resumes with its saved config (:mod:`jaxtrainer.recipes._resume`):
    :attr:`RecipeRun.resume`. ``prog`` is the command running the recipe
    (``jaxtrainer fit sac``, ``python recipes/sac.py``): a config of another recipe
    is answered with the same kind of command for that one.

    Raises:
      ValueError: an override that is not ``key=value``, or a key (in an
        override or in the ``--config`` file) that is not in the defaults (the
        message names the file, lists the keys that exist there and the closest
        one), a ``logger:``/``callbacks:`` entry that is not true, false, null
        or a mapping of its class's keys, a ``recipe:`` other than the
        recipe of ``defaults``, or a ``path`` that is a directory.
      FileNotFoundError: no file at ``path`` (naming where configs are looked up).
    """
    setting, overrides = resume.take_setting(overrides)
    recipe = Path(defaults if defaults is not None else path).stem
    base = OmegaConf.load(_a_file(path, recipe))
    named = base.pop("recipe", None) if isinstance(base, DictConfig) else None
    if named is not None and defaults is not None and str(named) != recipe:
        raise ValueError(f"{os.fspath(path)} is a config of the {named!r} recipe (recipe: {named}), "
                         f"not of {recipe!r}: run {_command_of(str(named), recipe, prog)} "
                         f"--config {os.fspath(path)}")
    recipe = str(named) if named is not None else recipe
    if defaults is not None and os.path.realpath(defaults) != os.path.realpath(path):
        schema = search.with_section(sweep.with_section(OmegaConf.load(defaults), recipe), recipe)
        base = _sections_checked(base, schema, os.fspath(path))
        for dotted in _leaf_keys(base):
            if dotted.split(".", 1)[0] not in _OPEN_SECTIONS and not _open_key(dotted):
                _check_key(schema, dotted, source=f"{os.fspath(path)}: ")
        base = OmegaConf.merge(schema, base)
    base = search.with_section(sweep.with_section(base, recipe), recipe)  # sweep:, search: sections
    chosen = preset_of(recipe, path, defaults, presets.env_of(overrides, base.get("env", {}).get("name")))
    for dotted, value in (chosen.settings if chosen else {}).items():
        _check_key(base, dotted, source=f"{presets.file_of(recipe)} ({chosen.env}): ")
        OmegaConf.update(base, dotted, value, merge=False)
    _check_overrides(base, overrides, recipe)
    given = OmegaConf.from_dotlist(_keep_entry_mappings(base, overrides))
    cfg = OmegaConf.merge(base, given)
    _check_root(OmegaConf.select(cfg, "trainer.default_root_dir"))
    found = resume.find(cfg)  # the checkpoint and its run's saved config, looked up once
    if found is not None:  # resume with the run's saved config
        from_file = (_sections_checked(OmegaConf.load(path), base, os.fspath(path))
                     if defaults is not None
                     and os.path.realpath(defaults) != os.path.realpath(path) else {})
        if isinstance(from_file, DictConfig):
            from_file.pop("recipe", None)
        cfg = resume.resumed(cfg, OmegaConf.merge(from_file, given), setting, found)
    components.check_entries(cfg)
    OmegaConf.set_struct(cfg, True)
    return RecipeRun(cfg, recipe, found)


def _check_root(root: Any) -> None:
    """``trainer.default_root_dir`` is not a run directory (its runs would go inside it).

    Raises:
      ValueError: naming the value, a root of runs and how that run is resumed.
    """
    if not isinstance(root, str) or not runs.run_files(expand_path(root)):
        return
    parent = os.path.dirname(os.path.normpath(root)) or "."
    raise ValueError(f"trainer.default_root_dir={root}: is a run directory (it holds "
                     f"{', '.join(runs.run_files(expand_path(root)))}); expected a root of runs, e.g. "
                     f"{parent}, where each run goes to version_<n>; to resume that run: "
                     f"trainer.ckpt_path={root}")


def _command_of(named: str, recipe: str, prog: str | None) -> str:
    """The command that runs recipe ``named`` as ``prog`` runs ``recipe``: the script
    beside it (``python recipes/sac.py`` -> ``python recipes/ppo.py``), else
    ``jaxtrainer fit <named>``."""
    if prog is not None and prog.endswith(f"{recipe}.py"):
        return f"{prog[:-len(recipe) - 3]}{named}.py"
    return f"jaxtrainer fit {named}"


def _check_overrides(base: DictConfig, overrides: Sequence[str], recipe: str) -> None:
    """Each override is ``key=value`` of a key ``base`` has (or of an open section or an
    entry of ``logger:``/``callbacks:``), not a whole section.

    Raises:
      ValueError: naming the override and what was expected.
    """
    for item in overrides:
        if item.startswith("--"):
            raise ValueError(_dashed(item, base))
        if "=" not in item or item.startswith("="):
            raise ValueError(f"bad override {item!r}: expected key=value, e.g. trainer.seed=1")
        key = item.split("=", 1)[0].lstrip("+")
        _check_population_section(base, key, recipe)
        if (key.split(".", 1)[0] not in _OPEN_SECTIONS or "." not in key) \
                and not _open_key(key):
            _check_key(base, key)
        if key.split(".", 1)[0] in components.SECTIONS and "." in key:
            continue  # an entry (true, false, null or keys) or one of its keys
        if isinstance(OmegaConf.select(base, key), DictConfig) and key + "." not in _OPEN_KEYS:
            raise ValueError(f"bad override {item!r}: {key} is a section; set one of its keys, "
                             f"e.g. {key}.{next(iter(OmegaConf.select(base, key)), 'name')}=...")


def preset_of(recipe: str, path: str | os.PathLike, defaults: str | os.PathLike | None,
              env: str | None) -> presets.Preset | None:
    """The preset :func:`load` applies to a config of ``recipe`` loaded from
    ``path`` over ``defaults`` that trains ``env`` (:mod:`jaxtrainer.recipes._presets`:
    none with a ``--config`` file)."""
    return presets.pick(recipe, env) if presets.applies(path, defaults) else None


def _check_population_section(base: DictConfig, key: str, recipe: str) -> None:
    """Refuse ``sweep.*``/``search.*`` for a recipe without that section,
    naming the recipes that have it."""
    section = key.split(".", 1)[0]
    if section in (sweep.SECTION, search.SECTION) and section not in base:
        can = sweep.SWEEP_RECIPES if section == sweep.SECTION else search.SEARCH_RECIPES
        catalog.refuse_recipe(recipe, section, can, prefix=f"unknown config key {key!r}: ")


def _keep_entry_mappings(base: DictConfig, overrides: Sequence[str]) -> list[str]:
    """``overrides`` without those setting a ``logger:``/``callbacks:`` entry
    that ``base`` gives as a mapping to ``true`` (it is on already, with its keys)."""
    kept = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+")
        parts = key.split(".")
        if len(parts) == 2 and parts[0] in components.SECTIONS \
                and isinstance(base.get(parts[0]), DictConfig) \
                and isinstance(base[parts[0]].get(parts[1]), DictConfig) \
                and OmegaConf.from_dotlist([item]).get(parts[0], {}).get(parts[1]) is True:
            continue
        kept.append(item)
    return kept


def trainer_kwargs(cfg: DictConfig, keys: Sequence[str] = _TRAINER_KEYS,
                   accepts: str = "Trainer") -> dict[str, Any]:
    """The ``trainer:`` section as keyword arguments of ``accepts`` (without
    ``ckpt_path``): plain Python values, interpolations resolved (a
    ``ListConfig`` such as ``trainer.devices=[0]`` becomes a list, a
    ``DictConfig`` a dict), so the Trainer checks what the user wrote: an
    on/off key that is not ``true``/``false`` (``trainer.logger=flase``) or a
    malformed ``devices`` raises a ValueError naming it before anything runs.

    Raises:
      ValueError: keys other than ``keys`` and ``ckpt_path``.
    """
    section = OmegaConf.to_container(cfg.trainer, resolve=True)
    unknown = set(section) - set(keys) - {"ckpt_path"}
    if unknown:
        first = sorted(unknown)[0]
        raise ValueError(f"unknown trainer keys {sorted(unknown)}; {accepts} accepts: "
                         f"{', '.join(keys)}, ckpt_path" + did_you_mean(first, [*keys, "ckpt_path"]))
    return {k: v for k, v in section.items() if k != "ckpt_path"}


_RESUME_HINT = "the same command plus trainer.ckpt_path={checkpoint}"
"""The preemption message's resume advice for a recipe user (see ``Trainer.resume_hint``)."""


def resume_hint(prog: str, argv: Sequence[str], one_process: bool = True) -> str:
    """The preemption message's resume advice (a ``Trainer(resume_hint=...)``
    template) for the command ``prog argv``: that command, shell-quoted, with
    ``trainer.ckpt_path={checkpoint}`` (the checkpoint just written) once, in
    place of any ``trainer.ckpt_path`` it had. Never ``last``: it resumes the
    newest run under the root, which is another run once anything else has run
    there since. ``one_process`` False (one process of several, whose
    launcher's command is not this one): the same advice in words."""
    given = [a for a in argv if a.split("=", 1)[0].lstrip("+") == "trainer.ckpt_path"]
    if not one_process:
        if not given:
            return _RESUME_HINT
        return (f"the same command with trainer.ckpt_path={{checkpoint}} in place of its "
                f"{_escaped(given[-1])}")
    kept = [a for a in argv if a not in given]
    command = " ".join([prog, *(shlex.quote(a) for a in kept)])
    return f"{_escaped(command)} trainer.ckpt_path={{checkpoint}}"


def _escaped(text: str) -> str:
    """``text`` with its braces doubled: ``str.format`` prints it as it is."""
    return text.replace("{", "{{").replace("}", "}}")


def make_trainer(cfg: DictConfig, **overrides: Any) -> Trainer:
    """A Trainer from ``cfg.trainer`` (keyword ``overrides`` win), with the
    loggers and callbacks of the ``logger:`` and ``callbacks:`` sections
    (:func:`jaxtrainer.recipes._components.trainer_arguments`; ``callbacks`` in
    ``overrides`` are added to them), whose preemption message names the
    command-line form (:data:`_RESUME_HINT`).

    Raises:
      ValueError: a bad trainer key or value, or a logger or callback entry its
        class rejects (naming the entry), before anything runs.
    """
    kwargs = {**trainer_kwargs(cfg), **overrides}
    if sweep.active(cfg) or search.active(cfg):  # the budget is each member's: its Budget says so
        share = search.budget_share(cfg[search.SECTION]) if search.active(cfg) else 1
        kwargs["budget"] = _member_budget(kwargs.pop("max_steps", None),
                                          kwargs.pop("max_env_steps", None), share,
                                          search.host_rounds(cfg))
    return _built(Trainer, components.trainer_arguments(cfg, {"resume_hint": _RESUME_HINT, **kwargs}))


def _member_budget(max_steps: Any, max_env_steps: Any, share: Any, rounds: int | None) -> Budget:
    """A sweep's or a search's ``Budget``: each member's, each slot training ``share``
    of it, spent in ``rounds`` (an Optuna search's); a bad value is named by its
    config key, ``trainer.max_steps=...``."""
    try:
        return Budget(max_steps, max_env_steps, per_member=True, share=share, rounds=rounds)
    except ValueError as e:
        raise ValueError(f"trainer.{e}") from None


def _built(cls: type[Trainer], arguments: dict[str, Any]) -> Trainer:
    """``cls(**arguments)``; an :class:`ArgumentError` naming one of the
    arguments names it by its config key, ``trainer.name=...``."""
    try:
        return cls(**arguments)
    except ArgumentError as e:
        if e.owner or e.key not in arguments:
            raise
        raise e.typed(f"trainer.{e.key}") from None


def make_population_trainer(cfg: DictConfig, **overrides: Any) -> PopulationTrainer:
    """A :class:`~jaxtrainer.PopulationTrainer` from ``cfg.trainer`` (keyword
    ``overrides`` win), converted and checked as in :func:`trainer_kwargs`, with
    the loggers and callbacks of the config as in :func:`make_trainer`."""
    kwargs = trainer_kwargs(cfg, _POPULATION_TRAINER_KEYS, "PopulationTrainer")
    return _built(PopulationTrainer, components.trainer_arguments(
        cfg, {"resume_hint": _RESUME_HINT, **kwargs, **overrides}))


def ckpt_path(cfg: DictConfig) -> str | None:
    return cfg.trainer.get("ckpt_path")


def config_arg(argv: Sequence[str], default: str | os.PathLike, *, about: str | None = None,
               prog: str | None = None, classes: Callable[[], Sequence[type]] = tuple,
               ) -> tuple[str | os.PathLike, list[str]]:
    """``--config PATH`` (or ``--config=PATH``) anywhere in ``argv`` picks another
    YAML file; returns ``(path, the other arguments)``.

    ``-h``/``--help`` prints every key of the config with its value and a
    one-line doc (:func:`jaxtrainer.recipes._usage.help_text`; the classes that
    document the recipe's own sections are ``classes()``, then those of
    :mod:`jaxtrainer.algorithms`); ``--print-config`` prints the resolved
    config (after ``--config`` and the overrides) as YAML with ``recipe:
    <name>`` first (what the run's ``config.yaml`` will hold). Both exit with
    status 0. ``about`` is the recipe's description in ``--help`` (default: the
    docstring of the script run as ``__main__`` where it is named after the
    recipe, ``recipes/ppo.py`` for ``ppo``) and ``prog`` its command (default
    ``sys.argv[0]``); ``classes()`` gives the classes that document the
    recipe's sections, looked at first (called only for ``--help``).

    Raises:
      ValueError: ``--config`` without a path, or given twice; with ``--help``
        or ``--print-config``, what :func:`load` raises.
      SystemExit: after ``--help`` or ``--print-config`` (status 0).
    """
    argv = list(argv)
    wants = [a for a in argv if a in ("-h", "--help", "--print-config")]
    path, rest = _split_config(argv, default)
    rest = [a for a in rest if a not in wants]
    if wants:
        from jaxtrainer.recipes import _usage as usage

        run = load_run(path, rest, defaults=default, prog=prog)
        cfg = run.config
        chosen = None if ckpt_path(cfg) else preset_of(run.recipe, path, default,
                                                       cfg.env.get("name"))
        if any(a in ("-h", "--help") for a in wants):
            main = sys.modules.get("__main__")
            if about is None and Path(getattr(main, "__file__", "") or "").stem == run.recipe:
                about = main.__doc__
            sources = [default] + ([path] if os.path.realpath(path) != os.path.realpath(default) else [])
            prog = prog or (sys.argv[0] if main is not None else "recipe")
            print(usage.help_text(cfg, prog, sources,
                                  usage.candidate_classes([{c.__name__: c for c in classes()}]),
                                  about, preset=chosen), end="")
        else:
            if chosen is not None:
                print(f"# {chosen.describe()}")
            print(usage.config_text(cfg, run.recipe), end="")
        sys.stdout.flush()
        raise SystemExit(0)
    return path, rest


def _split_config(argv: list[str], default: str | os.PathLike) -> tuple[str | os.PathLike, list[str]]:
    path, rest = None, []
    i = 0
    while i < len(argv):
        item = argv[i]
        if item == "--config" or item.startswith("--config="):
            if path is not None:
                raise ValueError("--config given twice")
            if item == "--config":
                if i + 1 >= len(argv):
                    raise ValueError("--config needs a path: --config FILE")
                path, i = argv[i + 1], i + 2
                continue
            path = item.split("=", 1)[1]
            if not path:
                raise ValueError("--config needs a path: --config=FILE")
        else:
            rest.append(item)
        i += 1
    return (path if path is not None else default), rest


def section(cfg: DictConfig, name: str) -> dict[str, Any]:
    """``cfg.<name>`` as a plain dict with interpolations resolved, e.g.
    ``section(cfg, "algorithm")`` as an algorithm config's keyword arguments.

    Raises:
      ValueError: ``cfg`` has no section ``name`` (the message lists the
        sections it has).
    """
    node = cfg[name] if name in cfg else None
    if not isinstance(node, DictConfig):
        sections = ", ".join(sorted(str(k) for k, v in cfg.items_ex(resolve=False)
                                    if isinstance(v, DictConfig)))
        raise ValueError(f"config has no section {name!r}; its sections: {sections}")
    return OmegaConf.to_container(node, resolve=True)


def make_env(cfg: DictConfig) -> envs.Env:
    """The environment of the ``env:`` section: ``env.name`` (a gymnax id such
    as ``CartPole-v1``, or ``brax/<env>``) built by :func:`jaxtrainer.envs.make`
    with the section's other keys as its keyword arguments (for brax e.g.
    ``episode_length``, ``backend``).

    Raises:
      ValueError: no ``env:`` section, no ``env.name``, or an unknown name (the
        message names the closest five and how to list them all).
      TypeError: a key that the environment's constructor does not take.
    """
    kwargs = section(cfg, "env")
    if "name" not in kwargs:
        raise ValueError("config section 'env' has no name: set env.name, e.g. "
                         "env.name=CartPole-v1 or env.name=brax/ant")
    name = kwargs.pop("name")
    available = envs.available()
    if name not in available and not envs.in_family(str(name)):
        raise unknown_env(str(name), "env.name")
    try:
        return envs.make(name, **kwargs)
    except TypeError as e:
        keys = ", ".join(f"env.{k}" for k in kwargs)
        typo = [k for k in kwargs if difflib.get_close_matches(str(k), ["name"], n=1, cutoff=0.75)]
        hint = f"; did you mean env.name={kwargs[typo[0]]}?" if typo else ""
        raise TypeError(f"config keys {keys}: not all are keyword arguments of the "
                        f"environment {name!r} ({e}){hint}") from e


def fit_and_report(trainer: Trainer, module: Module, run: RecipeRun) -> dict[str, float]:
    """Train ``module`` (from the checkpoint ``run`` resumes, resolved by
    :func:`load_run`), evaluate it once and print (process 0) the recipes' last line,
    ``eval/episode_return=<value with 2 decimals> run_dir=<trainer.log_dir>``
    (another metric where the recipe's ``final_metric`` in the catalog
    names one: ``eval/qd_score`` for ``map_elites``),
    whatever the run (a sweep's or search's line before it says what the value
    averages: ``jaxtrainer: eval/episode_return on the next line (mean over 4
    members (seeds 0-3))``).

    ``trainer`` is a :class:`Trainer` or a :class:`~jaxtrainer.PopulationTrainer`.
    During ``fit`` a :class:`~jaxtrainer.recipes._command.RunRecord` writes
    ``<run_dir>/config.yaml`` (:data:`CONFIG_FILE`: ``run.config`` resolved, plus
    ``recipe:``; a resume keeps the run's) and runs the evaluation at the last
    step while the loggers are open, so ``metrics.csv`` and TensorBoard hold it
    at that step. A resume whose checkpoint already spent the budget evaluates
    after ``fit`` (nothing is logged then).

    Returns:
      The evaluation metrics, equal to ``trainer.evaluate(module)`` after
      ``fit`` (Python floats, with ``step`` and ``env_steps``).

    Raises:
      KeyError: the evaluation has no ``eval/episode_return`` (or the recipe's
        final metric; raised after
        training and evaluating; the message lists the metrics it has).
      FileNotFoundError: the checkpoint ``run`` resumes is gone (from
        :meth:`Trainer.fit`, as do the module's size checks' ``ValueError``).
    """
    cfg, found = run.config, run.resume
    sweep.before_fit(trainer, module, run.recipe)  # a Sweep: budget per member, summary
    search.before_fit(trainer, module, cfg)  # a Search: budget per member, search.csv
    _front_report(trainer, module)  # NSGA-II: front.csv and front.png
    changed = resume.hyperparameter_changes(cfg, found)  # confirmed changes of a resumed run
    if changed:
        trainer.add_callback(resume.ApplyHyperparameters(changed))
    record = RunRecord(cfg, run.recipe, found.saved if found is not None else None)
    trainer.add_callback(record)
    try:
        trainer.fit(module, ckpt_path=run.ckpt_path)
    finally:
        trainer.remove_callback(record)
    result = record.evaluated_at(trainer.global_step) or trainer.evaluate(module)
    entry = catalog.RECIPES.get(run.recipe)
    final = entry.final_metric if entry is not None else catalog.FINAL_METRIC
    if final not in result:
        raise KeyError(f"the evaluation of {type(module).__name__} has no {final}; "
                       f"its metrics: {', '.join(sorted(result))}")
    if trainer.is_global_zero:  # one line for the run, as its logs (every process has it)
        print("\n".join(last_lines(result[final], module, trainer.log_dir, final)))
    return result


def _front_report(trainer: Trainer, module: Any) -> None:
    """Add a :class:`~jaxtrainer.population.FrontReport` to ``trainer`` for an
    :class:`~jaxtrainer.population.NSGA2` ``module`` (unless it has one)."""
    from jaxtrainer.population import NSGA2, FrontReport

    if isinstance(module, NSGA2) and not any(isinstance(c, FrontReport) for c in trainer.callbacks):
        trainer.add_callback(FrontReport())


def last_lines(value: float, module: Module, run_dir: Any,
               metric: str = "eval/episode_return") -> list[str]:
    """The lines a recipe ends with: ``eval/episode_return=<value with 2
    decimals> run_dir=<run_dir>`` last, whatever the run; for a sweep or a
    search, the line before it says what the value averages (``jaxtrainer:
    eval/episode_return on the next line (mean over 4 members (seeds 0-3))``)."""
    note = f"{sweep.final_note(module)}{search.final_note(module)}"
    return ([f"jaxtrainer: {metric} on the next line{note}"] if note else []) + \
        [f"{metric}={fixed(value)} run_dir={run_dir}"]
