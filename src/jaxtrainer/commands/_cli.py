"""The ``jaxtrainer`` command.

Subcommands live in their own modules and are listed in :data:`COMMANDS`
(``name -> "module:function"``); each function takes ``argv: list[str]`` and
returns an exit code. Run as the command (``argv`` from ``sys.argv``), its
first act is :func:`jaxtrainer.runtime._startup.begin`: a Ctrl-C while it starts ends
it in one line, and the current directory is on the import path; its last is
ending the process with the command's status
(:func:`jaxtrainer.runtime._startup.run_and_exit`), whichever the command.
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
    """Run ``jaxtrainer COMMAND ARGS...`` and return its exit status: ``argv`` is
    ``[COMMAND, *ARGS]`` (a test, a notebook: the process goes on). Without
    ``argv`` it is the console command: ``sys.argv[1:]``, started by
    :func:`jaxtrainer.runtime._startup.begin` (except ``launch``: each process it
    starts begins for itself), and the process ends with the command's status
    once it returns (:func:`jaxtrainer.runtime._startup.run_and_exit`)."""
    if argv is not None:
        return _dispatch(list(argv))
    from jaxtrainer.runtime import _startup as startup

    if sys.argv[1:2] != ["launch"]:
        startup.begin("jaxtrainer")
    startup.run_and_exit(lambda: _dispatch(sys.argv[1:]))


def _dispatch(argv: list[str]) -> int:
    """``jaxtrainer argv[0] argv[1:]``: the command's status (2: an unknown command
    or a platform that cannot start)."""
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
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
