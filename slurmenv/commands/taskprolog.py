"""``slurmenv-task-prolog``: the environment of ``slurmenv export`` through Slurm's task prolog,
with no ``eval`` and no shell (``docs/task-prolog.md``)::

    srun --task-prolog="$(command -v slurmenv-task-prolog || echo /slurmenv-task-prolog-not-on-PATH)" python train.py

Slurm runs the prolog in each task's own environment before the task starts, and reads its
output (observed, Slurm 22.05): ``export NAME=value`` sets ``NAME`` for the task (the value is
the rest of the line, taken literally), ``print TEXT`` writes ``TEXT`` to the task's stdout,
and a non-zero exit kills the task before it starts (``srun`` fails). Since Slurm 22.05.1 its
stderr is parsed as its stdout is, so under Slurm (``SLURM_SCRIPT_CONTEXT=prolog_task``) the
prolog points its stderr at /dev/null: everything it says is a ``print`` line. Before 22.05
Slurm ignores the prolog's exit status, so a refusal also exports :data:`STOP_VALUE`, a value no
framework accepts (:func:`stop_names`; docs/task-prolog.md, "Slurm versions").

It resolves exactly as ``slurmenv export`` does (options from ``SLURMENV_*`` variables only, the
output set from ``SLURMENV_FOR``) and sets the same variables with the same values. A value
holding a newline cannot be carried by the protocol and is refused. In the batch, extern and
interactive steps it sets nothing and never fails.

A site enables it for every job with the shell shim ``slurmenv-site-prolog``
(``TaskProlog=`` in ``slurm.conf``): that shim acts only in jobs that set ``SLURMENV`` to a yes
(any value that is not a no: it starts this prolog with ``--site``, which reads ``SLURMENV`` as
slurmenv reads every yes/no variable and refuses a value that is neither).

Its values are followed by ``SLURMENV_SET_BY=<job>.<step>:NAME,...``: a ``srun`` started
inside a step whose values the prolog set (``srun --pty bash`` in an opted-in job) knows that
they are slurmenv's for another step, not the user's, and resolves them again
(:data:`slurmenv.worldguard.SET_BY`).
"""

from __future__ import annotations

import os
import sys

from ..lean import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

#: The job variable that opts a job in when the site-wide prolog is configured
#: (``sbatch --export=ALL,SLURMENV=1``); bin/slurmenv-site-prolog reads it before Python starts.
OPT_IN = "SLURMENV"
#: The argument slurmenv-site-prolog starts this prolog with: check the opt-in first.
SITE = "--site"
#: What a refusal exports besides its ``print`` lines, for the Slurm versions that start the
#: task whatever the prolog's exit status (before 22.05): every rank, size, address and port a
#: launcher or framework reads becomes a text that is not a number, a host or JSON, so that
#: torch (``int()`` of WORLD_SIZE/RANK in its env:// rendezvous), TensorFlow (``json.loads`` of
#: TF_CONFIG) and a script's own ``int(os.environ.get("RANK", 0))`` stop at once, naming the
#: value (tests/test_real_docs_prolog.py). bin/slurmenv-site-prolog prints the same
#: (tests/test_task_prolog.py).
STOP_VALUE = "slurmenv-refused-this-task"


def stop_names() -> tuple[str, ...]:
    """The names a refusal exports :data:`STOP_VALUE` for: every variable of every output set
    but the per-task bindings (GPU lists and thread counts stop nothing)."""
    from ..render import PET_NAMES, TF_NAMES, TORCH_NAMES

    return (*TORCH_NAMES, *TF_NAMES, *PET_NAMES)


def in_task_step(environ: Mapping[str, str]) -> bool:
    """A step of srun tasks (not the batch, extern or interactive step, where Slurm's
    ``TaskProlog`` runs too and this prolog sets nothing)."""
    from ..launchers.base import SPECIAL_STEPS, step_id

    step = step_id(environ) or ""
    return bool(step) and step not in SPECIAL_STEPS


#: Slurm before 22.05.1 reads the prolog's output with ``fgets(buf, 4095)``: a longer line is
#: cut every 4,094 bytes, each piece parsed as a line of its own (task.c,
#: ``_run_script_and_set_env``).
FGETS_PIECE = 4094
KEYWORDS = (b"export ", b"unset ", b"print ")


def protocol(values: Mapping[str, str]) -> str:
    """Slurm's task-prolog lines for ``values``; SlurmEnvError for a value with a line break,
    or one that a Slurm before 22.05.1 would cut where a piece reads as a protocol line."""
    from ..errors import SlurmEnvError

    fix = "start the task with eval or exec instead: srun slurmenv exec -- COMMAND"
    lines = []
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            raise SlurmEnvError(
                f"{name} contains a line break, which Slurm's task prolog cannot carry (each "
                "'export NAME=value' is one line)", variable=name, value=value, fix=fix,
            )
        line = f"export {name}={value}\n"
        encoded = line.encode("utf-8", "surrogateescape")
        for start in range(FGETS_PIECE, len(encoded), FGETS_PIECE):
            if encoded[start:].startswith(KEYWORDS):
                raise SlurmEnvError(
                    f"{name} is {len(encoded)} bytes long, and Slurm before 22.05.1 cuts a "
                    f"prolog's line every {FGETS_PIECE} bytes: the piece at byte {start} "
                    "would read as a line of its own", variable=name, value=value, fix=fix,
                )
        lines.append(line)
    return "".join(lines)


def refusal(text: str) -> str:
    """``print`` lines (the only output of a task prolog the user sees), then the
    :data:`STOP_VALUE` exports (:func:`stop_names`). It starts with a line break: after an
    interrupted write, the first ``print`` must not end a line already begun (an empty line
    means nothing to Slurm)."""
    lines = "".join(f"print {line}\n" for line in text.splitlines())
    return "\n" + lines + "".join(f"export {name}={STOP_VALUE}\n" for name in stop_names())


def marked(values: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """``values`` and, last, :data:`slurmenv.worldguard.SET_BY`: this step and the names set."""
    from ..worldguard import SET_BY, step_key

    return {**values, SET_BY: f"{step_key(environ)}:{','.join(values)}"}


def run(environ: Mapping[str, str], site: bool = False) -> tuple[int, str]:
    """(exit status, what to write on stdout) for a task whose environment is ``environ``;
    ``site``: started by slurmenv-site-prolog, which acts only in jobs that opted in."""
    if not in_task_step(environ):
        return 0, ""
    from .. import options, resolve
    from ..errors import SlurmEnvError

    try:
        if site and not options.parse_flag(environ.get(OPT_IN, ""), OPT_IN):
            return 0, ""
        values = resolve(environ).env(options.outputs(environ))
        return 0, protocol(marked(values, environ))
    except SlurmEnvError as exc:
        return 1, refusal(f"slurmenv: error: {exc}\nslurmenv: the task was not started")
    except Exception as exc:  # noqa: BLE001 - a bug must still stop the task, with a reason
        from .console import unexpected

        status, message = unexpected(exc, "The task was not started.", debug_hint=False)
        return status, refusal(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``slurmenv-task-prolog``: Slurm passes no argument; slurmenv-site-prolog
    passes ``--site``. Interrupted (Ctrl-C, SIGINT): ``print`` lines saying so, status 130."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args not in ([], [SITE]):
            status, text = 2, refusal(
                f"slurmenv: error: slurmenv-task-prolog takes no arguments (got {args!r}); "
                "give it to srun as --task-prolog=/absolute/path/slurmenv-task-prolog")
        else:
            status, text = run(os.environ, site=args == [SITE])
        if not text:
            return status
        from .console import write_output

        return write_output(text) or status
    except KeyboardInterrupt:
        from .console import write_output

        write_output(refusal("slurmenv: interrupted. The task was not started."))
        return 130  # 128 + SIGINT, as a shell reports it


def entry_point() -> NoReturn:
    """The ``slurmenv-task-prolog`` console script: :func:`main`, run and ended as ``slurmenv``
    is (:func:`slurmenv.commands.console.run_script`)."""
    from .console import run_script

    if os.environ.get("SLURM_SCRIPT_CONTEXT") == "prolog_task":
        quiet_stderr()
    run_script(main)


def quiet_stderr() -> None:
    """Point stderr (fd 2, and ``sys.stderr``) at /dev/null. Under Slurm since 22.05.1 the
    prolog's stderr is the pipe Slurm parses as its stdout, where a line that begins with
    ``export``, ``unset`` or ``print`` acts whoever wrote it (a warning, a site's
    ``sitecustomize``); before, Slurm closed it. Nothing written there reaches the user."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        if devnull != 2:
            os.close(devnull)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    except OSError:
        sys.stderr = None  # run_script then opens /dev/null


if __name__ == "__main__":
    entry_point()
