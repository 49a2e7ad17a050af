"""``jaxtrainer eval``: evaluate a saved run's checkpoint on fresh episodes, and watch it.

::

    jaxtrainer eval runs/ppo/version_0 --episodes 16
    jaxtrainer eval runs/ppo/version_0 --ckpt best --seed 3 --strategy pmap
    jaxtrainer eval runs/ppo/version_0/checkpoints/976 --video cartpole.gif
    jaxtrainer eval runs/ppo_brax/version_0 --video ant.html   # or ant.gif, offline

The module is rebuilt from the run's ``config.yaml`` (written by the recipes)
and the checkpoint restored on the chosen strategy. The episodes are those of
``trainer.evaluate``: the module's own evaluation policy (greedy), episode
``e`` with the key ``fold_in(fold_in(fold_in(root, EVAL), step), e)`` with
``root`` the run's root key (``--seed S``: ``root_key(S)``, as a run with ``seed=S``
draws them), whatever device runs it. So the mean return printed is the one
``Trainer.evaluate`` returns for that checkpoint with ``eval_episodes =
--episodes``, and the one the run's own evaluation at that step logged, on any
strategy and device count (up to the order of float sums). ``--video`` without
``--episodes`` runs no evaluation: only the video's ``--video-episodes``
episodes (keys of their own), whose return and length it prints, labelled so.

The command says what it is doing, one line per phase on stderr (restoring,
compiling, recording, ``drawing frame i/n``), and stops on the first SIGINT or
SIGTERM, even during a compile, with status ``128 + signal``
(:class:`jaxtrainer.runtime._signals.StopOnSignal`). The numbers are printed once the
evaluation is done, before the video is drawn. The video's path is checked
before anything runs; the video is written to a temporary file in its directory
and replaces the file of that name only when complete, so a signal or an error
while writing (a full disk: one line naming the path, status 2) leaves a
previous file of that name intact. Brax's ``.html``
viewer needs internet access in the browser (:data:`jaxtrainer.commands._render.BRAX_HTML_NOTE`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

BEST = "best"
"""``--member best``: the member with the best current fitness (PBT, a search)."""


def member_arg(text: str) -> int | str:
    """``--member``'s value: an index, or ``best``."""
    try:
        return BEST if text == BEST else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an index or 'best'") from None


USAGE_EPILOG = """\
The module is rebuilt from RUN_DIR/config.yaml (written by the recipes). The episodes
and the mean return are those of Trainer.evaluate on that checkpoint (eval_episodes =
--episodes, the run's seed unless --seed). --video renders --video-episodes other fresh
episodes, and alone (without --episodes) runs no evaluation: the numbers are the video's
episodes' (said so). gymnax (CartPole-v1, Acrobot-v1, ...) as .gif (or .mp4 with ffmpeg), brax/<env>
as .html (brax's viewer: it loads three.js from public CDNs, so the browser needs internet
access) or as .gif (drawn here, offline, by MuJoCo's renderer: EGL without a display).
Each phase is a line on stderr; the first SIGINT/SIGTERM stops the command."""


def run_parser(prog: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """The parser of a command that reads a saved run (``eval``, ``export``): its
    usage text, then ``path`` (a run, checkpoints or step directory) and ``--ckpt``
    (which checkpoint of a run directory); the command adds its own options."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="RUN_DIR|CHECKPOINT_DIR",
                        help="a run directory (runs/ppo/version_0), its checkpoints directory "
                             "or a step directory (.../checkpoints/976)")
    parser.add_argument("--ckpt", default=None, metavar="best|last|STEP",
                        help="which checkpoint of a run directory (default: the newest; best: by "
                             "the metric its ModelCheckpoint monitored)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jaxtrainer eval", "Evaluate a saved run's checkpoint on fresh episodes: "
                        "mean, std, min and max of the episode return and length.", USAGE_EPILOG)
    parser.add_argument("--episodes", type=int, default=None, metavar="N",
                        help="episodes to run (default: the config's algorithm.eval_episodes; "
                             "with --video, none: the video's episodes alone)")
    parser.add_argument("--seed", type=int, default=None, metavar="S",
                        help="evaluation keys of a run with this seed (default: the run's)")
    parser.add_argument("--strategy", default=None,
                        help="single, pmap, shard_map or auto (default: single, or pmap when "
                             "--devices names more than one)")
    parser.add_argument("--devices", default="auto",
                        help="as Trainer(devices=...): auto, a count, or indices e.g. 0,1")
    parser.add_argument("--member", type=member_arg, default=None, metavar="I|best",
                        help="PBT, sweep and search runs: the member to evaluate, or best (PBT and "
                             "searches: the best current fitness, also the default; a sweep's "
                             "default is member 0)")
    parser.add_argument("--video", default=None, metavar="FILE",
                        help="also render episodes: .gif/.mp4 (gymnax), .html or .gif (brax)")
    parser.add_argument("--video-episodes", type=int, default=1, metavar="K",
                        help="episodes in the video (default 1)")
    args = parser.parse_args(argv)
    from jaxtrainer import _arguments as arguments
    from jaxtrainer.commands import _eval_run as eval_run  # JAX from here on
    from jaxtrainer.rundir.storage import StorageError
    from jaxtrainer.runtime import compilation_cache

    devices: Any = args.devices
    if isinstance(devices, str) and "," in devices:
        devices = [int(d) for d in devices.split(",") if d.strip().isdigit()]
    if args.strategy is None:  # --devices 2 alone means what it says: two devices
        args.strategy = "single" if str(args.devices).strip() in ("auto", "1") else "pmap"
    try:
        compilation_cache.enable()  # as the recipes: a second evaluation skips the compile
        result = eval_run.evaluate_stopping_on_signal(args, devices)
    except (FileNotFoundError, ValueError, TypeError, StorageError) as e:
        print(f"jaxtrainer eval: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if result["video_frames"] is not None:
        print(f"wrote {arguments.expand_path(args.video)} ({result['video_frames']} frames)")
        if str(args.video).lower().endswith(".html"):
            from jaxtrainer.commands._render import BRAX_HTML_NOTE

            print(f"note: {BRAX_HTML_NOTE}")
    return 0


def __getattr__(name: str) -> Any:
    """What the command runs (``evaluate_run``, ``format_result``, ...) lives in
    :mod:`jaxtrainer.commands._eval_run`, imported on first use (``--help`` imports no JAX)."""
    from jaxtrainer.commands import _eval_run as eval_run

    try:
        return getattr(eval_run, name)
    except AttributeError:
        raise AttributeError(f"module 'jaxtrainer.commands._eval_cli' has no attribute {name!r}") from None
