"""The ``jaxtrainer`` command.

Subcommands live in their own modules and are listed in :data:`COMMANDS`
(``name -> "module:function"``); each function takes ``argv: list[str]`` and
returns an exit code. Run as the command (``argv`` from ``sys.argv``), its
first act is :func:`jaxtrainer.runtime._startup.begin`: a Ctrl-C while it starts ends
it in one line, and the current directory is on the import path.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "envs": ("jaxtrainer.commands._envs_cli:main", "the environment names env.name takes (a prefix filters)"),
    "eval": ("jaxtrainer.commands._eval_cli:main", "evaluate a saved run's checkpoint on fresh episodes; "
                                         "--video to watch it"),
    "export": ("jaxtrainer.commands._export_cli:main", "a saved run's policy as a StableHLO or ONNX "
                                                      "file, with a model card"),
    "fit": ("jaxtrainer.commands.fit:main", "train a shipped recipe (ppo, sac, openes, ...); "
                                           "--list names them"),
    "launch": ("jaxtrainer.commands._launch:main", "start N processes of one multi-node run on this machine"),
    "plot": ("jaxtrainer.commands._plot:main", "learning curves (mean and spread over runs) from metrics.csv; "
                                     "run directories or roots of runs"),
}


def _usage() -> str:
    lines = ["usage: jaxtrainer COMMAND [ARGS...]  (jaxtrainer --version: the installed version)",
             "", "commands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in sorted(COMMANDS.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] != ["launch"]:  # the command (each launched process starts its own)
        from jaxtrainer.runtime import _startup as startup

        startup.begin("jaxtrainer")
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from jaxtrainer import __version__

        print(f"jaxtrainer {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        from jaxtrainer._arguments import did_you_mean

        print(f"jaxtrainer: unknown command {name!r}{did_you_mean(name, COMMANDS) or ';'} "
              f"choose one of: {', '.join(sorted(COMMANDS))}", file=sys.stderr)
        return 2
    module, func = COMMANDS[name][0].split(":")
    if name != "launch":  # the launcher starts other processes; each checks for itself
        from jaxtrainer._arguments import check_collectives, check_platforms

        try:  # before the environment libraries make arrays at import
            check_platforms()
            check_collectives()
        except ValueError as e:
            print(f"jaxtrainer {name}: error: {e}", file=sys.stderr)
            return 2
    command = getattr(importlib.import_module(module), func)
    if name == "fit" and from_command_line:  # a finished run ends the process at once
        return int(command(rest, exit_when_done=True) or 0)
    return int(command(rest) or 0)  # called in a process that goes on (tests, notebooks)


if __name__ == "__main__":
    sys.exit(main())
