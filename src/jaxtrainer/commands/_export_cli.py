"""``jaxtrainer export``: a saved run's policy as a StableHLO or ONNX file, with a model card.

::

    jaxtrainer export runs/ppo/version_0 --format stablehlo -o cartpole.stablehlo
    jaxtrainer export runs/ppo/version_0 --format onnx -o cartpole.onnx
    jaxtrainer export runs/pbt_ppo/version_0 --member 3 -o member3.stablehlo

What is written is :mod:`jaxtrainer.inference.export`'s. The arguments (the
format, the output path, the checkpoint, ``--member``) are checked before
anything is restored; a bad one is one line on stderr and status 2.
"""

from __future__ import annotations

import argparse
import sys

from jaxtrainer.commands._eval_cli import run_parser

FORMATS = ("stablehlo", "onnx")  # jaxtrainer.inference.export.FORMATS, named without JAX

EPILOG = """\
The file holds the greedy policy as evaluation runs it: observation normalisation, the
network, then the argmax (discrete) or the squash or clip to the action bounds. Input
obs[batch, *observation_shape] (raw observations, the env's dtype), output actions[batch, ...];
batch is dynamic. A recurrent policy also takes its carry (zeros start an episode) and
returns the next one. The model card is written beside the file as FILE.json.
StableHLO reloads in any JAX program: jax.export.deserialize(bytearray(open(FILE, "rb").read())).
ONNX needs the converter: pip install 'jaxtrainer[onnx]'."""


def _format_of(args: argparse.Namespace) -> str:
    """``--format``, or the one ``-o``'s suffix names (``.onnx``, ``.stablehlo``)."""
    if args.format is not None:
        return args.format
    suffix = args.output.rpartition(".")[2].lower()
    if suffix in FORMATS:
        return suffix
    raise ValueError(f"--format not given and -o {args.output!r} names no format by its suffix: "
                     f"pass --format {'|'.join(FORMATS)} (or end the file in .onnx or .stablehlo)")


def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jaxtrainer export", "Export a saved run's policy as a StableHLO or ONNX "
                        "file that runs without jaxtrainer, with a model card (FILE.json).", EPILOG)
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="stablehlo (jax.export) or onnx (jax2onnx: the jaxtrainer[onnx] "
                             "extra); default: by -o's suffix")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the file to write (its model card goes to FILE.json)")
    parser.add_argument("--member", type=int, default=None, metavar="K",
                        help="PBT, sweep and search runs: the member to export (default: PBT's "
                             "and a search's best current fitness, a sweep's member 0)")
    args = parser.parse_args(argv)
    from jaxtrainer import _arguments as arguments
    from jaxtrainer.inference import export  # JAX from here on
    from jaxtrainer.inference.saved_run import load_policy
    from jaxtrainer.rundir.storage import StorageError

    try:
        format = export.check_format(_format_of(args))  # the arguments, then the checkpoint
        export.check_output(args.output)
        policy = load_policy(args.path, args.ckpt, member=args.member)  # --member checked first
        policy.export(args.output, format)
    except (FileNotFoundError, ValueError, TypeError, ImportError, StorageError) as e:
        message = " ".join(str(e).split())
        if args.member is not None:
            message = message.replace(f"member={args.member}:", f"--member {args.member}:")
        print(f"jaxtrainer export: error: {message}", file=sys.stderr)
        return 2
    path = arguments.expand_path(args.output)
    member = "" if policy.member is None else f", member {policy.member}"
    print(f"wrote {path} ({format}; {policy.env.name}, checkpoint {policy.checkpoint}{member})")
    print(f"wrote {export.card_path(path)} (model card)")
    return 0
