"""What a run directory holds: its recipe (or module class), environment and kind.

Runs of different recipes, environments or kinds (one agent, or a sweep of many)
are not comparable: ``jaxtrainer plot ROOT`` draws each group of its own, and
``ckpt_path="last"`` resumes only a run of the kind the command trains. A run's
identity (:class:`RunKind`) is read from its files:

* ``config.yaml`` (a run a recipe started): ``recipe:``, ``env.name`` and the
  ``sweep:`` section;
* ``module.yaml`` (a module started from Python): the class's name, and its
  ``env`` argument where that is a string;
* ``sweep_members.csv`` (a sweep, whoever started it): its configurations and seeds.

Runs of one identity whose settings differ beyond the seed (:func:`settings`:
another budget, schedule or hyperparameter) are not comparable either: ``plot``
draws them apart too (:attr:`RunKind.settings` names what sets each apart).
A run's headline metric (:func:`headline_metric`) is what ``plot`` draws by default.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from jaxtrainer.module import SweepModule
from jaxtrainer.rundir import module_record, run_layout, storage

CONFIG_FILE = run_layout.CONFIG_FILE
MODULE_FILE = run_layout.MODULE_FILE
MEMBERS_FILE = run_layout.SWEEP_MEMBERS_FILE
SINGLE = "single run"
"""The kind of a run that trains one agent."""


class RunKind(NamedTuple):
    """A run's identity.

    Attributes:
      recipe: the recipe's name (``config.yaml``), else the module class's name
        (``module.yaml``), else ``None``.
      env: the environment's name, or ``None`` where the run's files do not say.
      kind: :data:`SINGLE`, or a sweep's shape (:func:`sweep_kind`).
      members: agents trained (1 for a single run).
      settings: ``((name, value), ...)``: the settings that set these runs
        apart from other runs of the same recipe, environment and kind
        (empty: none do, or no other runs are compared).
    """

    recipe: str | None
    env: str | None
    kind: str
    members: int
    settings: tuple[tuple[str, str], ...] = ()

    def label(self) -> str:
        """``"ppo CartPole-v1"``, ``"ppo CartPole-v1, sweep of 4 seeds"``,
        ``"Regression"`` (a module started from Python, no env recorded),
        ``"ppo CartPole-v1 (trainer/max_env_steps=500000)"``."""
        head = " ".join(p for p in (self.recipe, self.env) if p) or \
            "runs without config.yaml or module.yaml"
        head = head if self.kind == SINGLE else f"{head}, {self.kind}"
        shown = ", ".join(f"{k}={v}" for k, v in self.settings[:SETTINGS_SHOWN])
        more = len(self.settings) - SETTINGS_SHOWN
        return f"{head} ({shown}{f', {more} more' if more > 0 else ''})" if shown else head


SETTINGS_SHOWN = 3
"""Settings a group's label names (:meth:`RunKind.label`); the rest are counted."""

UNCOMPARED_CONFIG = ("trainer.seed", "trainer.default_root_dir", "trainer.ckpt_path",
                     "trainer.enable_progress_bar", "trainer.compilation_cache",
                     "trainer.requeue", "trainer.log_every_n_steps", "trainer.eval_every_n_steps",
                     "trainer.strategy", "trainer.devices", "trainer.num_devices", "trainer.jit",
                     "trainer.run_ahead", "trainer.sync_every_n_seconds", "trainer.deterministic",
                     "trainer.compile_evaluation_ahead", "trainer.enable_checkpointing",
                     "trainer.resume_overrides", "algorithm.eval_episodes", "logger",
                     "callbacks.checkpoint", "callbacks.lr_monitor", "callbacks.throughput",
                     "callbacks.video", "callbacks.profiler")
"""``config.yaml`` keys (and sections) that :func:`settings` leaves out: the
seed, and what changes how a run is logged, evaluated, saved, shown or
computed (the strategy and devices: the same algorithm), not what it trains.
The budget, the algorithm's settings and the callbacks that end training
(early stopping, a timer, the NaN guard) are compared."""

HPARAMS_SECTIONS = {"trainer": "trainer", "module": "algorithm"}
"""``hparams.csv``'s sections (``trainer/<key>``, ``module/<key>``) as
``config.yaml``'s, so that :data:`UNCOMPARED_CONFIG` names their keys too."""


def _compared(name: str) -> bool:
    """Whether an ``hparams.csv`` row (``trainer/eval_every_n_steps``) or a
    flattened ``config.yaml`` key (``trainer.eval_every_n_steps``) tells runs apart."""
    dotted = name
    if "/" in name:
        section, _, key = name.partition("/")
        if key.rsplit("/", 1)[-1] == "seed":
            return False
        dotted = f"{HPARAMS_SECTIONS.get(section, section)}.{key.replace('/', '.')}"
    return not any(dotted == k or dotted.startswith(f"{k}.") for k in UNCOMPARED_CONFIG)


def settings(run_dir: str | os.PathLike) -> dict[str, str] | None:
    """What a run was set to beyond its seed, to tell comparable runs apart:
    ``hparams.csv``'s rows (what the CSVLogger recorded: the Trainer's budget
    and schedule, the module's hyperparameters), else the flattened
    ``config.yaml``, each but every ``seed`` and :data:`UNCOMPARED_CONFIG`
    (how a run is logged, evaluated or computed); None where the run has
    neither (nothing says how it differs)."""
    run_dir = Path(run_dir)
    try:
        with open(run_dir / run_layout.HPARAMS_FILE, newline="") as f:
            rows = list(csv.reader(f))[1:]
        return {r[0]: r[1] for r in rows if len(r) == 2 and _compared(r[0])}
    except OSError:
        pass
    cfg = _read_yaml(run_dir / CONFIG_FILE)
    if cfg is None:
        return None
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif _compared(prefix):
            flat[prefix] = str(value)

    walk("", cfg)
    return flat


def headline_metric(columns: Collection[str]) -> str | None:
    """The metric a run's ``metrics.csv`` (its ``columns``) is judged by, as
    :attr:`jaxtrainer.Module.headline_metric` names it while it trains:
    ``fitness/max`` where members report ``member/<i>/fitness`` (PBT, a
    search: the population's best member), else ``train/episode_return`` (an
    RL agent, a sweep), else ``fitness/mean`` (an evolution strategy: the
    members' mean fitness); a module of neither kind (a regression) by its
    loss: ``train/loss``, ``loss``, else the first column naming a loss, else
    the first naming a fitness; None where none is logged."""
    names = set(columns)
    if "member/0/fitness" in names and "fitness/max" in names:
        return "fitness/max"
    for m in ("train/episode_return", "fitness/mean", "train/loss", "loss"):
        if m in names:
            return m
    return next((c for word in ("loss", "fitness") for c in columns
                 if word in c.rsplit("/", 1)[-1]), None)


def sweep_kind(configs: int, seeds: int) -> str:
    """``"sweep of 4 seeds"`` or ``"sweep of 2 configurations x 2 seeds"``."""
    if configs <= 1:
        return f"sweep of {seeds} seed{'s' * (seeds != 1)}"
    return f"sweep of {configs} configurations x {seeds} seed{'s' * (seeds != 1)}"


def _sweep_shape(section: Any) -> tuple[int, int] | None:
    """``(configurations, seeds)`` of a config's ``sweep:`` section, or None (no sweep)."""
    if not isinstance(section, Mapping):
        return None
    seeds, grid = section.get("seeds"), section.get("hyperparams") or {}
    if seeds is None and not grid:
        return None
    sizes = [len(v) if isinstance(v, list | tuple) else 1 for v in grid.values()]
    return math.prod(sizes), int(seeds) if isinstance(seeds, int) else 1


def _search_members(section: Any) -> int | None:
    """The member count of a config's ``search:`` section, or None (no search)."""
    if not isinstance(section, Mapping) or section.get("method") is None:
        return None
    return int(section.get("members") or 1) * int(section.get("seeds") or 1)


def of_config(cfg: Mapping[str, Any]) -> RunKind:
    """The identity of a recipe config (a run's ``config.yaml`` as a dict, or the
    config a command is about to run, with or without its ``recipe`` key)."""
    env = cfg.get("env")
    name = env.get("name") if isinstance(env, Mapping) else None
    searched = _search_members(cfg.get("search"))
    if searched is not None:
        method = cfg["search"]["method"]
        return RunKind(cfg.get("recipe"), name, f"search ({method}) of {searched} members", searched)
    shape = _sweep_shape(cfg.get("sweep"))
    return RunKind(cfg.get("recipe"), name, SINGLE if shape is None else sweep_kind(*shape),
                   1 if shape is None else shape[0] * shape[1])


def _read_yaml(path: Path) -> dict[str, Any] | None:
    try:
        return _parsed(path.read_text())
    except OSError:
        return None


def _parsed(text: str | None) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def _members_shape(run_dir: Path) -> tuple[int, int, int] | None:
    """``(members, configurations, seeds)`` of ``sweep_members.csv``, or None."""
    try:
        with open(run_dir / MEMBERS_FILE, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return None
    if not rows:
        return None
    return len(rows), len({r.get("config") for r in rows}), len({r.get("seed") for r in rows})


def of_run(run_dir: str | os.PathLike) -> RunKind:
    """The identity of the run in ``run_dir`` (read from its files; a run
    without ``config.yaml`` or ``module.yaml`` has ``recipe`` and ``env`` None)."""
    run_dir = Path(run_dir)
    members = _members_shape(run_dir)
    cfg = _read_yaml(run_dir / CONFIG_FILE)
    if cfg is not None:
        found = of_config(cfg)
    else:
        record = _read_yaml(run_dir / MODULE_FILE) or {}
        args = record.get("init_args") if isinstance(record.get("init_args"), dict) else {}
        env = args.get("env")
        found = RunKind(str(record["class_path"]).rsplit(".", 1)[-1]
                        if record.get("class_path") else None,
                        env if isinstance(env, str) else None, SINGLE, 1)
    if members is not None:
        found = found._replace(kind=sweep_kind(members[1], members[2]), members=members[0])
    return found


RUN_SECTIONS = ("recipe", "trainer", "logger", "callbacks", "sweep", "search")
"""Sections of a recipe config that say nothing about which recipe it is."""


def other_recipe(run_cfg: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why a run's saved config is another recipe's than ``current``, or None:
    by their ``recipe:`` keys where both have one, else by their sections
    (``pbt:``, ...) and by algorithm keys the run has and ``current`` lacks (a
    key added to the recipe since the run started is no difference)."""
    named = run_cfg.get("recipe")
    if named and current.get("recipe"):
        return None if named == current["recipe"] else f"it is a run of the {named!r} recipe"
    sections = {k for k in run_cfg if k not in RUN_SECTIONS}
    if sections != {k for k in current if k not in RUN_SECTIONS}:
        return (f"it is a run of {'the ' + repr(named) if named else 'another'} recipe (sections "
                f"{', '.join(sorted(sections))})")
    algorithm, now = run_cfg.get("algorithm"), current.get("algorithm")
    extra = sorted(set(algorithm) - set(now)) if isinstance(algorithm, Mapping) and \
        isinstance(now, Mapping) else []
    if extra:
        return (f"it is a run of {'the ' + repr(named) if named else 'another'} recipe (algorithm "
                f"keys this command does not have: {', '.join(map(str, extra[:4]))})")
    return None


def config_refusal(run_cfg: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why a command running the config ``current`` cannot resume the run that
    saved ``run_cfg`` (another recipe, environment or kind), or None when it can.
    Other settings may differ: a resume takes the run's saved config."""
    run, now = of_config(run_cfg), of_config(current)
    other = other_recipe(run_cfg, current)
    if other:
        return other
    if run.env != now.env:
        return f"it trained env.name={run.env}, this command env.name={now.env}"
    if run.kind != now.kind:
        return f"it is a {run.kind}, this command trains a {now.kind}"
    return None


def config_acceptor(current: Mapping[str, Any], read: dict[Path, str | None] | None = None
                    ) -> Callable[[Path], str | None]:
    """``accept(run_dir)``: None where a command running the config ``current``
    can resume that run, else why not (:func:`config_refusal`; a run without a
    ``config.yaml`` is taken: the Trainer checks it against the module).
    ``read``: where given, ``accept`` keeps each ``config.yaml``'s text it read
    there, by run directory (None for a run without one), so that the caller
    need not read the chosen run's again."""
    def accept(run_dir: Path) -> str | None:
        try:
            text = (Path(run_dir) / CONFIG_FILE).read_text()
        except OSError:
            text = None
        if read is not None:
            read[Path(run_dir)] = text
        saved = _parsed(text)
        return None if saved is None else config_refusal(saved, current)
    return accept


def same_class(recorded: str, current: str) -> bool:
    """Whether two recorded class paths name the same class: equal, or the same
    class name where one of them was defined in a script run as ``__main__``
    (``python train.py`` records ``__main__.Toy``; the same file imported, as
    ``jaxtrainer launch`` workers or a notebook do, records ``train.Toy``)."""
    if recorded == current:
        return True
    (a_module, _, a_name), (b_module, _, b_name) = recorded.rpartition("."), current.rpartition(".")
    return a_name == b_name and "__main__" in (a_module, b_module)


def module_acceptor(class_path: str | None, members: int | None) -> Callable[[Path], str | None]:
    """``accept(run_dir)`` for ``Trainer.fit(module, ckpt_path="last")``: None
    where the run could hold ``module``'s state, else why not: a run whose
    ``module.yaml`` records another class than ``class_path``, or a sweep
    whose member count is not ``members`` (``None``: ``module`` is no sweep)."""
    def accept(run_dir: Path) -> str | None:
        record = _read_yaml(Path(run_dir) / MODULE_FILE) or {}
        if class_path and record.get("class_path") and not same_class(record["class_path"],
                                                                        class_path):
            return f"it trained {record['class_path']}, this fit {class_path}"
        shape = _members_shape(Path(run_dir))
        if (shape is None) != (members is None) or (shape and shape[0] != members):
            kind = sweep_kind(shape[1], shape[2]) if shape else SINGLE
            want = f"a sweep of {members} members" if members else f"a {SINGLE}"
            return f"it is a {kind}, this fit trains {want}"
        return None
    return accept


def write_members(run_dir: str | os.PathLike, module: Any) -> None:
    """Write ``<run_dir>/sweep_members.csv`` (member, config, seed,
    hyperparameters) when ``module`` is a :class:`~jaxtrainer.population.Sweep`
    (a sweep started from Python is then told apart from a single run, as a
    recipe's is); nothing for any other module."""
    if isinstance(module, SweepModule):
        os.makedirs(run_dir, exist_ok=True)
        storage.write_csv(os.path.join(os.fspath(run_dir), MEMBERS_FILE), module.members())


def acceptor_of(module: Any) -> Callable[[Path], str | None]:
    """:func:`module_acceptor` for ``module`` (its recorded class, and its
    member count where it is a :class:`~jaxtrainer.population.Sweep`)."""
    record = module_record.record(module)
    return module_acceptor(record["class_path"] if record else None,
                           module.population_size if isinstance(module, SweepModule) else None)
