"""``slurmenv`` command line: a thin layer over :func:`slurmenv.resolve`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import __version__, resolve
from .errors import SlurmEnvError
from .resolution import OUTPUTS, Resolution


def add_resolution_options(parser: argparse.ArgumentParser) -> None:
    """The options every resolving command takes (each also has a SLURMENV_* variable)."""
    group = parser.add_argument_group("resolution options (also SLURMENV_* variables)")
    group.add_argument("--port", help="force MASTER_PORT (SLURMENV_PORT)")
    group.add_argument(
        "--port-range", metavar="LO-HI", help="range for the job/step port formula "
        "(SLURMENV_PORT_RANGE, default 10000-32767)"
    )
    group.add_argument(
        "--addr-template", metavar="TEMPLATE",
        help="host name template for addresses, e.g. '{host}-ib' (SLURMENV_ADDR_TEMPLATE)",
    )
    group.add_argument(
        "--resolve-addr", action="store_true", default=None,
        help="turn MASTER_ADDR into an IP address (one DNS lookup; SLURMENV_RESOLVE_ADDR=1)",
    )
    group.add_argument(
        "--tf-chief", action="store_true", default=None,
        help="make rank 0 TensorFlow's chief (SLURMENV_TF_CHIEF=1)",
    )
    group.add_argument(
        "--for", dest="for_", choices=sorted(OUTPUTS), default="all",
        help="which variables: torch (RANK, ..., MASTER_PORT), tf (TF_CONFIG) or all (default)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurmenv",
        description="Turn a Slurm job step into the environment torch.distributed and "
        "TensorFlow expect. Typical use: srun bash -c 'eval $(slurmenv export); python train.py'",
    )
    parser.add_argument("--version", action="version", version=f"slurmenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    export = sub.add_parser("export", help="print export lines for eval (default: POSIX sh)")
    export.add_argument(
        "--shell", choices=("sh", "bash", "zsh", "fish", "csh", "tcsh"), default=None,
        help="shell syntax (default sh)",
    )
    export.add_argument("--format", choices=("json", "dotenv"), default=None, help="data format")
    add_resolution_options(export)

    exec_ = sub.add_parser("exec", help="resolve, set the variables, and exec a command")
    add_resolution_options(exec_)
    exec_.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")

    for name, (_, helptext) in EXTERNAL.items():
        sub.add_parser(name, help=helptext, add_help=False)
    return parser


def resolve_from_args(args: argparse.Namespace) -> Resolution:
    """Resolve with the options parsed by ``add_resolution_options``."""
    return resolve(
        port=args.port,
        port_range=args.port_range,
        addr_template=args.addr_template,
        resolve_addr=args.resolve_addr,
        tf_chief=args.tf_chief,
    )


def print_error(exc: SlurmEnvError) -> None:
    """Write a resolution error to stderr, prefixed like every slurmenv message."""
    sys.stderr.write(f"slurmenv: error: {exc}\n")


def cmd_export(args: argparse.Namespace) -> int:
    from . import render

    if args.shell and args.format:
        sys.stderr.write("slurmenv: error: give --shell or --format, not both\n")
        return 2
    fmt = args.format or args.shell or "sh"
    try:
        values = resolve_from_args(args).env(args.for_)
    except SlurmEnvError as exc:
        print_error(exc)
        # Make `eval $(slurmenv export); python train.py` stop before python in a script.
        sys.stdout.write(render.FAILURE.get(fmt, ""))
        return 1
    sys.stdout.write(render.render(values, fmt))
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("slurmenv: error: exec needs a command: slurmenv exec -- python train.py\n")
        return 2
    try:
        values = resolve_from_args(args).env(args.for_)
    except SlurmEnvError as exc:
        print_error(exc)
        return 1
    os.environ.update(values)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"slurmenv: error: cannot run {argv[0]!r}: {exc.strerror}\n")
        return 127
    return 0  # pragma: no cover - execvp does not return


COMMANDS = {"export": cmd_export, "exec": cmd_exec}
# Commands that live in their own module (imported only when used): name -> (module, help).
EXTERNAL = {
    "show": ("slurmenv.show", "every value with the variables it came from"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slurmenv`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in EXTERNAL:
        import importlib

        module = importlib.import_module(EXTERNAL[argv[0]][0])
        return int(module.main(argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return COMMANDS[args.command](args)
