"""What the command lines of slurmenv's commands share, below all of them.

* the resolution options every resolving command takes (the options table and ``--for``:
  :func:`add_resolution_options`) and resolving with what they parsed
  (:func:`resolve_from_args`);
* how a command refuses: a resolution error (:func:`print_error`), a command line
  (:func:`usage_error`), and the failure text that makes ``eval $(slurmenv ...)`` stop a
  script (:func:`fail_closed`).

``show``, ``doctor``, ``dump``, ``torchrun`` and ``cli`` (which loads those commands by name)
import this module; it imports no command. ``slurmenv export`` loads it only when it fails or
goes through argparse: its common path stays as lean as it was (``cli._fast_args``).
"""

from __future__ import annotations

import sys

from . import options, render, resolve
from ._compat import TYPE_CHECKING
from .errors import SlurmEnvError, printable

if TYPE_CHECKING:
    import argparse
    from typing import NoReturn

    from .resolution import Resolution


def add_resolution_options(parser: argparse.ArgumentParser) -> None:
    """The options every resolving command takes (the options table, and --for)."""
    group = parser.add_argument_group("resolution options (also SLURMENV_* variables)")
    options.add_arguments(group, [*options.arguments(), options.FOR])


def resolve_from_args(args: argparse.Namespace) -> Resolution:
    """Resolve with the options parsed by ``add_resolution_options``."""
    return resolve(**options.given_in(args))


def print_error(exc: SlurmEnvError) -> None:
    """Write a resolution error to stderr, prefixed like every slurmenv message."""
    sys.stderr.write(printable(f"slurmenv: error: {exc}") + "\n")


def usage_error(message: str) -> NoReturn:
    """Refuse a command line the way argparse does (main then makes ``eval`` stop)."""
    sys.stderr.write(f"slurmenv: error: {message}\n")
    raise SystemExit(2)


# --- failing closed -------------------------------------------------------------------------
def fail_closed(fmt: str | None) -> None:
    """Print the failure text of shell ``fmt`` (None: the calling shell's, else sh's), which
    ``eval`` turns into an exit from a script but not from an interactive shell. Nothing for
    a data format (``--format``) or when stdout is a terminal: then nobody evaluates it."""
    isatty = getattr(sys.stdout, "isatty", None)
    if fmt in render.FORMATS or (isatty is not None and isatty()):  # not for eval
        return
    sys.stdout.write(render.FAILURE.get(fmt or _calling_shell(), render.FAILURE["sh"]))
    sys.stdout.flush()


def _calling_shell() -> str:
    """``fish``, ``csh`` or ``tcsh`` when the parent process is that shell, else ``sh``.

    Only for the failure text of a command line that names no shell (``eval (slurmenv)``
    in fish): sh's text is a mere syntax error there, after which fish and csh go on.
    """
    import os

    try:
        with open(f"/proc/{os.getppid()}/comm", encoding="utf-8", errors="replace") as handle:
            name = handle.read().strip()
    except OSError:
        return "sh"
    return name if name in ("fish", "csh", "tcsh") else "sh"
