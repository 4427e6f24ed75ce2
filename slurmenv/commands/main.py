"""``slurmenv`` command line: a thin layer over :func:`slurmenv.resolve`.

``main`` dispatches: ``export``, ``exec`` and ``help`` are here; ``show``, ``doctor``, ``dump``,
``torchrun`` and ``completion`` live in their own modules, loaded by name when used (:data:`EXTERNAL`). What
the commands share (the resolution options, error messages, failing closed) is in
``console.py``, below all of them; ``main`` loads it first (every command ends through
it), so that a handler never has to import it after a failure such as a MemoryError.
"""

from __future__ import annotations

import os
import sys

from .. import __version__, options, render, resolve
from ..errors import SlurmEnvError
from ..lean import TYPE_CHECKING
from ..render import FORMATS, SHELLS

if TYPE_CHECKING:
    import argparse  # imported for real only when argparse parses (see _fast_args)
    from collections.abc import Sequence
    from types import ModuleType
    from typing import NoReturn

    from ..options import Arg


#: export's own options besides the resolution options (see options.Arg).
SHELL: Arg = ("--shell", {"dest": "shell", "default": None, "choices": SHELLS,
                          "help": "shell syntax (default sh)"})
FORMAT: Arg = ("--format", {"dest": "format", "default": None, "choices": FORMATS,
                            "help": "data format"})
VERBOSE: Arg = ("--verbose", {
    "dest": "verbose", "default": False, "action": "store_true",
    "help": "also say on stderr what slurmenv show notes: a value already set and kept (an "
    "inherited MASTER_PORT, thread counts) or replaced"})
#: exec's own options: the step check before the command (slurmenv.doctor.stepcheck, loaded only then).
PREFLIGHT: Arg = ("--preflight", {
    "dest": "preflight", "default": False, "action": "store_true",
    "help": "first check the whole step (every task runs it: srun -K slurmenv exec "
    "--preflight -- CMD): the command starts in no task unless every rank reaches rank 0 and all agree "
    "(slurmenv doctor --step)"})
STEP_TIMEOUT: Arg = ("--step-timeout", {
    "dest": "step_timeout", "default": None, "metavar": "SECONDS",
    "help": "how long --preflight waits for the other tasks (SLURMENV_STEP_TIMEOUT, "
    "default 30)"})
FAST_COMMANDS = ("export", "exec")  # parsed by _fast_args without argparse when they can be


def command_args(command: str) -> list[Arg]:
    """The options of ``export`` or ``exec``, as argparse gets them and _fast_args reads them."""
    own = [SHELL, FORMAT, VERBOSE] if command == "export" else [PREFLIGHT, STEP_TIMEOUT]
    return [*own, *options.arguments(), options.FOR]


def add_export_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``export`` besides the resolution options."""
    options.add_arguments(parser, [SHELL, FORMAT, VERBOSE])


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from .console import add_resolution_options, argument_parser

    parser = argument_parser(
        prog="slurmenv",
        description="Turn a Slurm job step into the environment torch.distributed and "
        "TensorFlow expect. Typical use: srun -K slurmenv exec -- python train.py (in a shell: "
        "srun -K sh -c 'env=$(slurmenv export) && eval \"$env\" && exec python train.py')",
    )
    parser.add_argument("--version", action="version", version=f"slurmenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    export = sub.add_parser("export", help="print export lines for eval (default: POSIX sh)")
    add_export_options(export)
    add_resolution_options(export)

    exec_ = sub.add_parser("exec", help="resolve, set the variables, and exec a command")
    options.add_arguments(exec_, [PREFLIGHT, STEP_TIMEOUT])
    add_resolution_options(exec_)
    exec_.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")

    for name, (_, helptext) in EXTERNAL.items():
        sub.add_parser(name, help=helptext, add_help=False)

    help_ = sub.add_parser("help", help="this help, or a command's: slurmenv help export")
    help_.add_argument("topic", nargs="?", choices=[*COMMANDS, *EXTERNAL], metavar="COMMAND")
    return parser


# export and exec resolve as console.resolve_from_args does, and import console only to
# refuse: the path of every task of a step loads no module for it.
def cmd_export(args: argparse.Namespace) -> int:
    if args.shell and args.format:
        from .console import usage_error

        usage_error("give --shell or --format, not both")
    fmt = args.format or args.shell or "sh"
    try:
        res = resolve(**options.given_in(args))
        values = res.env(options.outputs(os.environ, args.for_))
        text = render.render(values, fmt)  # csh refuses a value with a newline
    except SlurmEnvError as exc:
        from .console import fail_closed, print_error

        print_error(exc)
        # Make a script that evaluates the output stop before its next command.
        fail_closed(args.format or args.shell)
        return 1
    from .console import write_output

    if getattr(args, "verbose", False) and res.notes:
        from .console import say

        say("".join(f"slurmenv: note: {note}\n" for note in res.notes))
    return write_output(text)


def cmd_exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or not argv[0]:
        from .console import usage_error

        usage_error("exec needs a command: slurmenv exec -- python train.py")
    if args.step_timeout is not None and not args.preflight:
        from .console import usage_error

        usage_error("--step-timeout is the step check's: give it with --preflight "
                    "(slurmenv exec --preflight --step-timeout N -- CMD), or drop it")
    given = options.given_in(args)
    try:
        res = resolve(**given)
        values = res.env(options.outputs(os.environ, args.for_))
        if args.preflight:
            from ..doctor import stepcheck

            seconds = stepcheck.timeout_from(os.environ, args.step_timeout)
    except SlurmEnvError as exc:
        from .console import print_error

        print_error(exc)
        return 1
    if args.preflight and stepcheck.main_for(res, given, seconds, sys.stderr) != 0:
        from .console import say

        say(f"slurmenv: the step check failed: {argv[0]!r} was not started\n")
        return 1
    os.environ.update(values)
    try:
        os.execvp(argv[0], argv)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        from .console import say

        say(f"slurmenv: error: cannot run {argv[0]!r}: {why}\n")
        # the shell's convention: 127 not found, 126 found but not executable
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # pragma: no cover - execvp does not return


def cmd_help(args: argparse.Namespace) -> int:
    """``slurmenv help [COMMAND]``: the help of slurmenv or of one command, on stdout."""
    if args.topic is None:
        parser = build_parser()
        parser.print_help()
        return int(getattr(parser, "failed", False))  # help that could not be written: 1
    return main([args.topic, "--help"])


COMMANDS = {"export": cmd_export, "exec": cmd_exec, "help": cmd_help}
# Commands that live in their own module (imported only when used): name -> (the module with
# its main(argv), help).
EXTERNAL = {
    "show": ("slurmenv.commands.show", "every value with the variables it came from"),
    "doctor": ("slurmenv.commands.doctor",
               "check this task for what makes training hang; a fix each"),
    "dump": ("slurmenv.commands.dump",
             "write what slurmenv reads here to a file to replay elsewhere"),
    "torchrun": ("slurmenv.commands.torchrun",
                 "run torchrun once per node with its options filled in"),
    "completion": ("slurmenv.commands.completion", "print a completion script for bash, zsh or fish"),
}


def entry_point() -> NoReturn:
    """The ``slurmenv`` console script (and ``python -m slurmenv``): :func:`main` on
    ``sys.argv``, then the process ends without the interpreter's teardown
    (:func:`slurmenv.commands.console.run_script`)."""
    from .console import run_script

    run_script(main)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slurmenv`` command; returns the exit status.

    Whatever goes wrong, ``eval $(slurmenv ...)`` must not let a script go on: a refused
    command line (argparse's or our own SystemExit 2) and a bug (any other exception) print
    the shell's failure text on stdout besides the message on stderr (see fail_closed).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # Loaded before anything can fail (every command ends through it anyway): after a
    # MemoryError, importing it in the handlers below could fail again, with a traceback.
    from . import console

    for stream in (sys.stdout, sys.stderr):  # a value the locale cannot encode: escaped, not a
        reconfigure = getattr(stream, "reconfigure", None)  # traceback (export writes UTF-8)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        return _run(argv)
    except SystemExit as exc:
        if exc.code not in (0, None) and argv[:1] != ["completion"]:
            # (completion's stdout goes into a completion file, never to eval: no guard there)
            _fail_closed_quietly(console, _asked_format(argv))
        raise
    except KeyboardInterrupt:  # Ctrl-C or a SIGINT: stop, and no traceback
        _fail_closed_quietly(console, _asked_format(argv))
        console.say("slurmenv: interrupted. Nothing was exported.\n")
        return 130  # 128 + SIGINT, as a shell reports it
    except BrokenPipeError:
        # the reader went away (| head): nothing more to say to it, and no traceback
        console.silence_stdout()
        return 1
    except Exception as exc:
        _fail_closed_quietly(console, _asked_format(argv))
        if os.environ.get("SLURMENV_DEBUG", "") not in ("", "0"):
            raise
        status, message = console.unexpected(exc, "Nothing was exported.")
        console.say(message)
        return status


def _fail_closed_quietly(console: ModuleType, fmt: str | None) -> None:
    """``console.fail_closed``, when stdout can still be written to (the module is
    passed in, loaded before the failure: see :func:`main`)."""
    try:
        console.fail_closed(fmt)
    except (OSError, ValueError):
        console.silence_stdout()


def _run(argv: list[str]) -> int:
    if argv and argv[0] in EXTERNAL:
        import importlib

        module = importlib.import_module(EXTERNAL[argv[0]][0])
        return int(module.main(argv[1:]))
    args = _fast_args(argv)
    if args is not None:
        return COMMANDS[args.command](args)
    if argv and not argv[0].startswith("-") and argv[0] not in (*COMMANDS, *EXTERNAL):
        import difflib

        from .console import usage_error

        close = difflib.get_close_matches(argv[0], [*COMMANDS, *EXTERNAL], n=1, cutoff=0.6)
        usage_error(f"unknown command {argv[0]!r}"
                    + (f": did you mean '{close[0]}'?" if close else "")
                    + " (commands: export, exec, show, doctor, dump, torchrun, completion, help)")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("a command is needed: export, exec, show, doctor, dump, torchrun, completion "
                     "or help")
    return COMMANDS[args.command](args)


# --- the shell whose failure text main prints (console.fail_closed) -------------------
def _asked_format(argv: Sequence[str]) -> str | None:
    """The shell (``--shell``) or format (``--format``) a command line asks for, or None."""
    for i, token in enumerate(argv):
        name, equals, value = token.partition("=")
        if token == "--":
            break
        if name in ("--shell", "--format"):
            if not equals:
                value = argv[i + 1] if i + 1 < len(argv) else ""
            if value in SHELLS or value in FORMATS:
                return value
    return None


# --- export and exec without argparse ------------------------------------------------------
# `srun ... slurmenv export` runs in every task of a step, and importing argparse, building
# the parser and parsing cost more than the rest of export. The common command lines
# (exact option names, `--opt value` or `--opt=value`) are parsed by options.parse_leading
# from the same definitions argparse gets (command_args: the options table, --for, --shell,
# --format),
# giving what argparse gives (tests/test_fast_path.py compares them); anything else (help,
# abbreviations, errors) goes to argparse.


def _fast_args(argv: Sequence[str]) -> argparse.Namespace | None:
    """argparse's result for a common ``export``/``exec`` command line, or None: use argparse."""
    if not argv or argv[0] not in FAST_COMMANDS:
        return None
    parsed = options.parse_leading(argv[1:], command_args(argv[0]), rest=argv[0] == "exec")
    if parsed is None:
        return None
    values, command = parsed
    if argv[0] == "exec":
        values["argv"] = command
    values["command"] = argv[0]
    from types import SimpleNamespace

    return SimpleNamespace(**values)  # type: ignore[return-value]
