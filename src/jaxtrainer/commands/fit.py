"""``jaxtrainer fit <recipe>``: train a shipped recipe from the installed package.

    jaxtrainer fit --list                              # the recipes, a line each
    jaxtrainer fit ppo                                 # PPO on CartPole-v1
    jaxtrainer fit ppo --help                          # every key with its value and doc
    jaxtrainer fit ppo --print-config > mine.yaml      # start one's own config
    jaxtrainer fit ppo --config mine.yaml trainer.seed=3

The configs ship inside the package (:data:`jaxtrainer.recipes._catalog.CONFIGS`);
``--config NAME`` also finds a shipped one by file name (``--config ars.yaml``).
A bad key or value prints one line and exits with status 2, as the scripts in
``recipes/`` (thin wrappers over :func:`run`) do.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from jaxtrainer._arguments import check_platforms
from jaxtrainer.recipes._catalog import CONFIGS, RECIPES, about, config_file

PROG = "jaxtrainer fit"


def fast_cpu_compile() -> None:
    """Add ``--xla_backend_optimization_level=0`` to ``XLA_FLAGS`` on machines
    without an NVIDIA GPU, unless ``JAXTRAINER_FAST_COMPILE=0``. Must run before
    JAX's backend starts (before the first array is made)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if (os.environ.get("JAXTRAINER_FAST_COMPILE", "1") != "0" and shutil.which("nvidia-smi") is None
            and "xla_backend_optimization_level" not in flags):
        os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()


def _asks_determinism(recipe: str, argv: list[str]) -> bool:
    """Whether ``trainer.deterministic`` is true for ``recipe`` run with ``argv``: in its
    YAML, its ``--config`` file, then its overrides, read with omegaconf alone (before
    JAX starts: importing the environment libraries starts it, and XLA reads ``XLA_FLAGS``
    then). A file that cannot be read counts as not asking; loading the config reports it."""
    from omegaconf import OmegaConf

    def asked(cfg: Any, default: Any) -> Any:
        return OmegaConf.select(cfg, "trainer.deterministic", default=default)

    files = [config_file(recipe)] + [
        _shipped(a.split("=", 1)[1] if a.startswith("--config=") else argv[i + 1])
        for i, a in enumerate(argv) if a.startswith("--config=") or (a == "--config" and i + 1 < len(argv))]
    value: Any = False
    for file in files:
        try:
            value = asked(OmegaConf.load(file), value)
        except Exception:  # a missing or broken file: load_run names it
            pass
    for item in argv:
        if item.split("=", 1)[0].lstrip("+") == "trainer.deterministic" and "=" in item:
            value = asked(OmegaConf.from_dotlist([item.lstrip("+")]), value)
    return value is True


def _shipped(path: str | os.PathLike) -> str | os.PathLike:
    """``path``, or the shipped config of that file name when ``path`` does not exist."""
    shipped = CONFIGS / Path(path).name
    return shipped if not Path(path).exists() and shipped.is_file() else path


def _shipped_arg(argv: list[str], i: int) -> str:
    """``argv[i]`` with a ``--config`` file name (``--config NAME`` or
    ``--config=NAME``) that does not exist replaced by the shipped config of that name."""
    item = argv[i]
    if item.startswith("--config="):
        return f"--config={_shipped(item.split('=', 1)[1])}" if item != "--config=" else item
    return str(_shipped(item)) if i > 0 and argv[i - 1] == "--config" else item


def run(argv: list[str], recipe: str, prog: str | None = None) -> dict[str, float]:
    """Train ``recipe`` with ``argv`` (``--config FILE``, ``--help``,
    ``--print-config``, ``section.key=value`` overrides): load its config, build
    its Trainer (or PopulationTrainer) and module, fit, evaluate once and print
    ``eval/episode_return=<value> run_dir=<dir>``; returns the final metrics.

    Raises:
      ValueError, TypeError, FileNotFoundError: a bad config, key or value
        (``jaxtrainer fit`` and the scripts print it on one line, status 2).
      SystemExit: after ``--help`` or ``--print-config`` (status 0).
    """
    from jaxtrainer.distributed._process import cluster_detected
    from jaxtrainer.recipes import _modules as modules
    from jaxtrainer.recipes import _search as search
    from jaxtrainer.recipes import config

    modules.check_recipe(recipe)
    default = config_file(recipe)
    prog = prog or f"{PROG} {recipe}"
    hint = config.resume_hint(prog, argv, one_process=not cluster_detected())
    path, argv = config.config_arg([_shipped_arg(argv, i) for i in range(len(argv))], default,
                                   about=about(recipe, prog), prog=prog,
                                   classes=lambda: modules.documenting_classes(recipe))
    run = config.load_run(path, argv, defaults=default, prog=prog)  # config, recipe, resume: made once
    cfg = run.config
    chosen = None if config.ckpt_path(cfg) else config.preset_of(recipe, path, default,
                                                                 cfg.env.get("name"))
    if chosen is not None:
        print(f"jaxtrainer: {chosen.describe()}; a key given on the command line wins", flush=True)
    make = config.make_population_trainer if RECIPES[recipe].population else config.make_trainer
    if recipe in search.ES_RECIPES and search.active(cfg):  # members are ES runs: a Trainer's
        make = search.make_trainer
    trainer = make(cfg, resume_hint=hint)
    module = modules.build_module(recipe, cfg)
    return config.fit_and_report(trainer, module, run)


def script(recipe: str, argv: list[str], prog: str | None = None) -> None:
    """Run ``recipe`` as a command: the body of ``recipes/<recipe>.py``'s
    ``__main__`` and of ``jaxtrainer fit <recipe>``. A config error prints one
    line and raises ``SystemExit(2)``; a finished run returns (the command ends
    the process: :func:`jaxtrainer.runtime._startup.run_and_exit`)."""
    if recipe in RECIPES and RECIPES[recipe].fast_compile:
        fast_cpu_compile()
    try:  # before the environment libraries make arrays at import
        check_platforms()
    except ValueError as e:
        print(f"{prog or f'{PROG} {recipe}'}: error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if _asks_determinism(recipe, argv):  # XLA reads XLA_FLAGS when JAX's backend starts
        from jaxtrainer.runtime import _determinism as determinism

        determinism.add_gpu_flag()
    from jaxtrainer.distributed._process import join_detected_cluster

    try:  # one process of several (mpirun, srun, a Kubernetes indexed Job): join before
        join_detected_cluster()  # anything uses JAX (importing gymnax does)
    except (RuntimeError, ValueError) as e:
        print(f"{prog or f'{PROG} {recipe}'}: error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    from jaxtrainer.recipes import config  # after the XLA flags are set
    from jaxtrainer.runtime import _startup as startup

    startup.freeze_imports()  # the command's libraries are imported: nothing of them is garbage

    shown = f"python {prog}" if prog and prog.endswith(".py") else prog  # a script's examples
    config.cli(lambda rest: run(rest, recipe, shown), argv, prog=prog or f"{PROG} {recipe}")


def listing() -> str:
    """``jaxtrainer fit --list``: every recipe with its one-line summary and its
    presets, then what a preset is, with a command that takes one."""
    width = max(map(len, RECIPES))
    from jaxtrainer.recipes import _presets as presets

    lines = [f"  {name:<{width}}  {entry.summary}"
             + (f" ({presets.listing(name)})" if presets.listing(name) else "")
             for name, entry in RECIPES.items()]
    example = next((name, next(iter(presets.of(name)))) for name in RECIPES if presets.of(name))
    return "\n".join([
        "recipes (jaxtrainer fit RECIPE --help for every key):", *lines,
        "presets: a recipe's settings tuned for one environment, taken when it trains that env "
        f"(jaxtrainer fit {example[0]} env.name={example[1]}); a key given on the command line "
        "wins; with --config FILE none applies"]) + "\n"


USAGE = (f"usage: {PROG} RECIPE [--config FILE] [--print-config] [-h] [section.key=value ...]\n"
         f"       {PROG} --list\n")


def main(argv: list[str]) -> int:
    """``jaxtrainer fit``: ``--list``, or a recipe's name and its arguments. A
    finished run returns 0; a config error raises ``SystemExit(2)``."""
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE + "\n" + listing())
        return 0 if argv else 2
    if argv[0] == "--list":
        sys.stdout.write(listing())
        return 0
    if argv[0] not in RECIPES:
        from jaxtrainer.recipes._modules import check_recipe

        try:
            check_recipe(argv[0])
        except ValueError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 2
    script(argv[0], argv[1:])
    return 0
