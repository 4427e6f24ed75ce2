"""``slurmenv-task-prolog``: the environment of ``slurmenv export`` through Slurm's task prolog,
with no ``eval`` and no shell (docs/task-prolog.md, which says what Slurm reads of its output
in each release)::

    srun --task-prolog="$(command -v slurmenv-task-prolog || echo /slurmenv-task-prolog-not-on-PATH)" python train.py

It resolves as ``export`` does (options from ``SLURMENV_*`` only, outputs from
``SLURMENV_FOR``) and prints ``export NAME=value`` lines, then ``SLURMENV_SET_BY`` (so an
``srun`` inside such a step re-resolves them: ``worldguard.SET_BY``); a refusal prints
``print`` lines, exits non-zero and, for Slurm before 22.05, which starts the task anyway,
exports :data:`STOP_VALUE`. Nothing in the batch, extern and interactive steps. The site shim
``slurmenv-site-prolog`` (``TaskProlog=``) starts it with ``--site`` in jobs whose
``SLURMENV`` is a yes.
"""

from __future__ import annotations

import os
import sys

from ..lean import TYPE_CHECKING
from .console import run_script, unexpected, write_output  # run_script starts every run

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

#: The job variable that opts a job in when the site-wide prolog is configured
#: (``sbatch --export=ALL,SLURMENV=1``); bin/slurmenv-site-prolog reads it before Python starts.
OPT_IN = "SLURMENV"
#: The argument slurmenv-site-prolog starts this prolog with: check the opt-in first.
SITE = "--site"
#: What a refusal exports for every rank, size, address and port (:func:`stop_names`), for
#: the Slurm versions that start the task whatever the prolog's exit status (before 22.05): no
#: number, host or JSON, so torch, TensorFlow and a script's ``int(os.environ["RANK"])`` stop
#: at once, naming it (tests/test_real_docs_prolog.py; bin/slurmenv-site-prolog prints it too).
STOP_VALUE = "slurmenv-refused-this-task"


def stop_names() -> tuple[str, ...]:
    """The names a refusal exports :data:`STOP_VALUE` for: every variable of every output set
    but the per-task bindings (GPU lists and thread counts stop nothing)."""
    from ..render import PET_NAMES, TF_NAMES, TORCH_NAMES

    return (*TORCH_NAMES, *TF_NAMES, *PET_NAMES)


def in_task_step(environ: Mapping[str, str]) -> bool:
    """A step of srun tasks (not the batch, extern or interactive step, where it sets nothing)."""
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

    fix = "start the task with exec instead: srun -K slurmenv exec -- COMMAND"
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
    """``print`` lines, then the :data:`STOP_VALUE` exports; first a line break, so that after
    an interrupted write the first ``print`` ends no line already begun."""
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
        return write_output(text) or status
    except KeyboardInterrupt:
        write_output(refusal("slurmenv: interrupted. The task was not started."))
        return 130  # 128 + SIGINT, as a shell reports it


def entry_point() -> NoReturn:
    """The ``slurmenv-task-prolog`` console script (``console.run_script``, as ``slurmenv``)."""
    if os.environ.get("SLURM_SCRIPT_CONTEXT") == "prolog_task":
        quiet_stderr()
    run_script(main)


def quiet_stderr() -> None:
    """Point stderr (fd 2, ``sys.stderr``) at /dev/null: since Slurm 22.05.1 it is the pipe
    Slurm parses as the prolog's stdout, where any ``export``/``print`` line acts (a warning, a
    site's ``sitecustomize``); before, Slurm closed it. Nothing there reaches the user."""
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
