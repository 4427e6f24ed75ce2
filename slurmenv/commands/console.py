"""What the command lines of slurmenv's commands share, below all of them.

* the resolution options every resolving command takes (the options table and ``--for``:
  :func:`add_resolution_options`) and resolving with what they parsed
  (:func:`resolve_from_args`);
* how a command refuses: a resolution error (:func:`print_error`), a command line
  (:func:`usage_error`), any other exception (:func:`unexpected`), and the failure text that makes ``eval $(slurmenv ...)`` stop a
  script (:func:`fail_closed`);
* writing a command's output whatever the locale and whatever stdout is
  (:func:`write_output`), and how a console script runs and its process ends once it is
  written (:func:`run_script`, :func:`end`).

``show``, ``doctor``, ``dump``, ``torchrun`` and ``main`` (which loads those commands by name)
import this module; it imports no command. ``slurmenv export`` loads it only when it fails or
goes through argparse, and to write its output and end (``main._fast_args``).
"""

from __future__ import annotations

import os
import sys

from .. import __version__, options, render, resolve
from ..errors import SlurmEnvError, printable
from ..lean import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import BinaryIO, NoReturn

    from ..resolution import Resolution


def add_resolution_options(parser: argparse.ArgumentParser, outputs: bool = True) -> None:
    """The options every resolving command takes (the options table, and --for). With
    ``outputs`` False (a command that records every output, as ``dump`` does), ``--for`` is
    still parsed, so that argparse never reads it as an abbreviation (``--force``), but left
    out of the help: the command refuses it."""
    import argparse

    name, spec = options.FOR
    for_ = options.FOR if outputs else (name, {**spec, "help": argparse.SUPPRESS})
    group = parser.add_argument_group("resolution options (also SLURMENV_* variables)")
    options.add_arguments(group, [*options.arguments(), for_])


def argument_parser(**kwargs: object) -> argparse.ArgumentParser:
    """An ``argparse.ArgumentParser`` whose help and version (what it writes on stdout) go
    through :func:`write_output`: argparse itself ignores a failed write, so ``slurmenv --help
    >/dev/full`` said nothing and exited 0 (with ``PYTHONUNBUFFERED``, or help longer than the
    buffer). Now the reason is on stderr and the status 1. Its subparsers are of its class."""
    import argparse

    class Parser(argparse.ArgumentParser):
        failed = False

        def _print_message(self, message: str, file: object = None) -> None:
            if message and file is sys.stdout and sys.stdout is not None:
                if write_output(message):
                    Parser.failed = True
                return
            super()._print_message(message, file)  # type: ignore[arg-type]

        def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
            super().exit(status or int(Parser.failed), message)

    return Parser(**kwargs)  # type: ignore[arg-type]


def resolve_from_args(args: argparse.Namespace) -> Resolution:
    """Resolve with the options parsed by ``add_resolution_options``."""
    return resolve(**options.given_in(args))


def print_error(exc: SlurmEnvError) -> None:
    """Write a resolution error to stderr, prefixed like every slurmenv message."""
    say(printable(f"slurmenv: error: {exc}") + "\n")


def usage_error(message: str) -> NoReturn:
    """Refuse a command line the way argparse does (main then makes ``eval`` stop)."""
    say(f"slurmenv: error: {message}\n")
    raise SystemExit(2)


def unexpected(exc: Exception, outcome: str, debug_hint: bool = True) -> tuple[int, str]:
    """The exit status and message for an exception that is not a SlurmEnvError; ``outcome``
    says what did not happen ("Nothing was exported.").

    Running out of memory is a limit of the job, not a bug: status 1 and how to raise it.
    Anything else is a bug in slurmenv: status 70 (EX_SOFTWARE) and where to report it."""
    if isinstance(exc, MemoryError):
        return 1, ("slurmenv: error: out of memory: this process may not use the memory that "
                   f"resolving this step needs. {outcome}\n"
                   "  fix: raise the memory limit of the job or the shell (sbatch --mem, "
                   "ulimit -v)\n")
    hint = " (SLURMENV_DEBUG=1 shows the traceback)" if debug_hint else ""
    return 70, (f"slurmenv: internal error: {type(exc).__name__}: {str(exc)[:300]}\n"
                f"  this is a bug in slurmenv {__version__}, not a problem of your job: please "
                f"report it on the slurmenv issue tracker with this message{hint}. {outcome}\n")


# --- failing closed -------------------------------------------------------------------------
def fail_closed(fmt: str | None) -> None:
    """Print the failure text of shell ``fmt`` (None: the calling shell's, else sh's), which
    ``eval`` turns into an exit from a script but not from an interactive shell. Nothing for
    a data format (``--format``) or when stdout is a terminal: then nobody evaluates it."""
    if sys.stdout is None:  # started with stdout closed (>&-): nobody evaluates anything
        return
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
    try:
        with open(f"/proc/{os.getppid()}/comm", encoding="utf-8", errors="replace") as handle:
            name = handle.read().strip()
    except OSError:
        return "sh"
    if name == "bsd-csh":  # Debian's BSD csh, run by that name rather than as csh
        return "csh"
    return name if name in ("fish", "csh", "tcsh") else "sh"


# --- writing the output and ending the process -----------------------------------------------
def write_output(text: str) -> int:
    """Write ``text`` to stdout as UTF-8 whatever the locale (``PYTHONIOENCODING=ascii``), so
    that the shell evaluating it gets back the bytes the variables held; the exit status: 0, or
    1 when it could not be written (a full disk: the reason on stderr; a reader that went away,
    ``| head``: nothing more to say), never a traceback."""
    if sys.stdout is None:  # started with stdout closed (>&-)
        say("slurmenv: error: cannot write the output: stdout is closed\n")
        return 1
    buffer = getattr(sys.stdout, "buffer", None)
    try:
        if buffer is None:  # a replaced sys.stdout (tests): text as it is
            sys.stdout.write(text)
            return 0
        sys.stdout.flush()
        _write_all(buffer, text.encode("utf-8"))
    except OSError as exc:
        if not isinstance(exc, BrokenPipeError):
            say(f"slurmenv: error: cannot write the output: {exc.strerror or exc}\n")
        silence_stdout()
        return 1
    return 0


def _write_all(buffer: BinaryIO, data: bytes) -> None:
    """Write all of ``data``, then flush. Under ``PYTHONUNBUFFERED`` stdout's buffer is the raw
    file, whose write may write part of it and say so (a full file system, a file size limit,
    a reader that went away): the rest is written again, until it is written or the write
    fails. A stdout some other process made non-blocking (a shared pipe or terminal) that is
    full makes the write stop early: then it waits until stdout takes more."""
    view = memoryview(data)
    while view:
        try:
            written = buffer.write(view)
        except BlockingIOError as exc:  # buffered: what it took, before it would block
            written = exc.characters_written
            _wait_writable(buffer)
        if written is None:  # raw: nothing taken, it would block
            written = 0
            _wait_writable(buffer)
        view = view[written:]
    while True:
        try:
            buffer.flush()
            return
        except BlockingIOError:
            _wait_writable(buffer)


def _wait_writable(stream: BinaryIO) -> None:
    import select

    select.select([], [stream], [])


# --- running a console script -----------------------------------------------------------------
def run_script(main: Callable[[], object]) -> NoReturn:
    """What a console script does: ``main()`` (a SystemExit it raises gives the status), then
    :func:`end`. Started with stderr closed (``2>&-``), its messages go to /dev/null, so that
    no command's exit status depends on whether it had somewhere to write them."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - the process's
    try:
        status: object = main()
    except SystemExit as exc:
        status = exc.code
    end(status)


# --- ending the process --------------------------------------------------------------------
def end(status: object) -> NoReturn:
    """End a console script's process with ``status`` (what ``main`` returned or raised in
    SystemExit) once stdout and stderr are written, without the interpreter's teardown.

    The teardown frees every module and object one by one: about 4 ms of ``slurmenv export``'s
    45 ms at 4,096 nodes (docs/performance.md), paid by every task of a step for nothing. The
    process ends the usual way (``sys.exit``) when something may still need the teardown: an
    ``atexit`` handler (a site's, coverage's), another running thread, a tracer or a profiler. Output that cannot be
    written makes the status 1 (a reader that went away, ``| head``: silently), as ``main``
    does, never a traceback.
    """
    if status is None or isinstance(status, int):
        code = int(status or 0)
    else:  # sys.exit("text"): the text on stderr, status 1
        say(f"{status}\n")
        code = 1
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with it closed
            continue
        try:
            stream.flush()
        except (OSError, ValueError) as exc:  # ValueError: a stream closed by the command
            code = code or 1
            if stream is sys.stdout:
                if not isinstance(exc, BrokenPipeError):
                    say(f"slurmenv: error: cannot write the output: {exc}\n")
                silence_stdout()
    if not _needs_teardown():
        os._exit(code & 0xFF)
    sys.exit(code)


def _needs_teardown() -> bool:
    """Whether ending without the interpreter's teardown could lose something: an atexit
    handler, another thread, or a tracer or profiler (coverage, pdb, ``python -m cProfile``,
    which reports after the command returns)."""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return True
    # A handler is registered through the atexit module: when no one imported it, there is
    # none (and export's path does not pay for importing it).
    atexit = sys.modules.get("atexit")
    if atexit is not None:
        ncallbacks = getattr(atexit, "_ncallbacks", None)  # CPython's; elsewhere: assume some
        if ncallbacks is None or ncallbacks():
            return True
    threading = sys.modules.get("threading")
    return threading is not None and threading.active_count() > 1


def say(text: str) -> None:
    """Write a message to stderr, if there is one to write to (not when the command was started
    with stderr closed, ``2>&-``, or it cannot be written)."""
    if sys.stderr is None:
        return
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush cannot fail again (and
    print its "Exception ignored" message)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # AttributeError: no stdout at all
        pass
