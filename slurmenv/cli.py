"""``slurmenv`` command line: a thin layer over :func:`slurmenv.resolve`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from . import __version__, resolve
from ._compat import TYPE_CHECKING
from .errors import SlurmEnvError
from .resolution import OUTPUTS, Resolution

if TYPE_CHECKING:
    import argparse  # imported for real only when argparse parses (see _fast_args)
    from typing import Any


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
        "--bind-gpus", action="store_true", default=None,
        help="give each task of a node its share of the GPUs the node's tasks share, e.g. "
        "CUDA_VISIBLE_DEVICES=4,5,6,7 and 2 tasks: 4,5 and 6,7 (SLURMENV_BIND_GPUS=1)",
    )
    group.add_argument(
        "--no-bind-gpus", dest="bind_gpus", action="store_false",
        help="leave GPU lists alone (the default; overrides SLURMENV_BIND_GPUS=1)",
    )
    group.add_argument(
        "--threads", action="store_true", default=None,
        help="set OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS when unset, from "
        "SLURM_CPUS_PER_TASK or the task's CPU affinity (the default)",
    )
    group.add_argument(
        "--no-threads", dest="threads", action="store_false",
        help="do not set thread counts (SLURMENV_THREADS=0)",
    )
    group.add_argument(
        "--for", dest="for_", choices=sorted(OUTPUTS), default="all",
        help="which variables: torch (RANK, ..., MASTER_PORT), tf (TF_CONFIG), all (default: "
        "torch and tf) or torchrun (PET_NNODES, ...: options of one plain torchrun per node)",
    )


def add_export_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``export`` besides the resolution options."""
    from . import render  # the shells and formats are render's (export imports it anyway)

    parser.add_argument(
        "--shell", choices=render.SHELLS, default=None, help="shell syntax (default sh)",
    )
    parser.add_argument("--format", choices=render.FORMATS, default=None, help="data format")


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="slurmenv",
        description="Turn a Slurm job step into the environment torch.distributed and "
        "TensorFlow expect. Typical use: srun bash -c 'eval $(slurmenv export); python train.py'",
    )
    parser.add_argument("--version", action="version", version=f"slurmenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    export = sub.add_parser("export", help="print export lines for eval (default: POSIX sh)")
    add_export_options(export)
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
        bind_gpus=getattr(args, "bind_gpus", None),
        threads=getattr(args, "threads", None),
    )


def print_error(exc: SlurmEnvError) -> None:
    """Write a resolution error to stderr, prefixed like every slurmenv message."""
    sys.stderr.write(f"slurmenv: error: {exc}\n")


def cmd_export(args: argparse.Namespace) -> int:
    from . import render

    if args.shell and args.format:
        sys.stderr.write("slurmenv: error: give --shell or --format, not both\n")
        sys.stdout.write(render.FAILURE[args.shell])
        return 2
    fmt = args.format or args.shell or "sh"
    try:
        values = resolve_from_args(args).env(args.for_)
        text = render.render(values, fmt)  # csh refuses a value with a newline
    except SlurmEnvError as exc:
        print_error(exc)
        # Make `eval $(slurmenv export); python train.py` stop before python in a script.
        sys.stdout.write(render.FAILURE.get(fmt, ""))
        return 1
    except Exception:
        # A bug rather than bad input: still stop the script before it runs without a rank.
        sys.stdout.write(render.FAILURE.get(fmt, ""))
        raise
    sys.stdout.write(text)
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
    "doctor": ("slurmenv.doctor", "check this task for what makes training hang; a fix each"),
    "dump": ("slurmenv.dump", "write what slurmenv reads here to a file to replay elsewhere"),
    "torchrun": ("slurmenv.torchrun", "run torchrun once per node with its options filled in"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slurmenv`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in EXTERNAL:
        import importlib

        module = importlib.import_module(EXTERNAL[argv[0]][0])
        return int(module.main(argv[1:]))
    args = _fast_args(argv)
    if args is not None:
        return COMMANDS[args.command](args)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code and argv[:1] == ["export"]:  # a typo must not let the script go on
            sys.stdout.write(_export_failure_text(argv))
        raise
    if args.command is None:
        parser.print_help()
        return 2
    return COMMANDS[args.command](args)


def _export_failure_text(argv: Sequence[str]) -> str:
    """The FAILURE text of the shell an ``export`` command line asks for (sh by default)."""
    from . import render

    shell = "sh"
    for i, token in enumerate(argv):
        if token == "--format" or token.startswith("--format="):
            return ""
        if token == "--shell" and i + 1 < len(argv):
            shell = argv[i + 1]
        elif token.startswith("--shell="):
            shell = token.partition("=")[2]
    return render.FAILURE.get(shell, render.FAILURE["sh"])


# --- export and exec without argparse ------------------------------------------------------
# `srun ... slurmenv export` runs in every task of a step, and importing argparse, building
# the parser and parsing cost more than the rest of export. The common command lines
# (exact option names, `--opt value` or `--opt=value`) are parsed here from the same
# definitions (add_export_options, add_resolution_options, read through _Recorder), giving
# what argparse gives (tests/test_fast_path.py compares them); anything else (help,
# abbreviations, errors, options of a kind not handled here) goes to argparse.

_FAST_KEYWORDS = {"action", "choices", "default", "dest", "help", "metavar"}
_FAST_ACTIONS = {"store": None, "store_true": False, "store_false": True}


class _Recorder:
    """Stands in for an argparse parser: records add_argument calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def add_argument_group(self, *args: object, **kwargs: object) -> _Recorder:
        return self

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        self.calls.append((flags, kwargs))


def _fast_args(argv: Sequence[str]) -> argparse.Namespace | None:
    """argparse's result for a common ``export``/``exec`` command line, or None: use argparse."""
    if not argv or argv[0] not in ("export", "exec"):
        return None
    recorder = _Recorder()
    if argv[0] == "export":
        add_export_options(recorder)  # type: ignore[arg-type]
    add_resolution_options(recorder)  # type: ignore[arg-type]
    values: dict[str, Any] = {"command": argv[0]}
    options: dict[str, tuple[str, str, Any]] = {}
    for flags, kwargs in recorder.calls:
        action = kwargs.get("action", "store")
        if set(kwargs) - _FAST_KEYWORDS or action not in _FAST_ACTIONS:
            return None
        if not all(flag.startswith("--") for flag in flags):
            return None
        dest = kwargs.get("dest") or flags[0][2:].replace("-", "_")
        values.setdefault(dest, kwargs.get("default", _FAST_ACTIONS[action]))
        for flag in flags:
            options[flag] = (dest, action, kwargs.get("choices"))
    if argv[0] == "exec":
        values["argv"] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if argv[0] == "exec" and (token == "--" or not token.startswith("-")):
            values["argv"] = list(argv[i:])
            break
        name, equals, value = token.partition("=")
        if name not in options:
            return None
        dest, action, choices = options[name]
        i += 1
        if action != "store":
            if equals:
                return None
            values[dest] = action == "store_true"
            continue
        if not equals:
            if i == len(argv):
                return None
            value = argv[i]
            i += 1
        if not value or value.startswith("-") or (choices is not None and value not in choices):
            return None
        values[dest] = value
    from types import SimpleNamespace

    return SimpleNamespace(**values)  # type: ignore[return-value]
