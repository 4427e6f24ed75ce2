"""``slurmenv-task-prolog``: the environment of ``slurmenv export`` through Slurm's task prolog,
with no ``eval`` and no shell (``docs/task-prolog.md``)::

    srun --task-prolog=$(command -v slurmenv-task-prolog) python train.py

Slurm runs the prolog in each task's own environment before the task starts, and reads its
stdout (observed, Slurm 22.05): ``export NAME=value`` sets ``NAME`` for the task (the value is
the rest of the line, taken literally), ``print TEXT`` writes ``TEXT`` to the task's stdout,
and a non-zero exit kills the task before it starts (``srun`` fails). Its stderr reaches only
slurmd's log, so a refusal is written as ``print`` lines.

It resolves exactly as ``slurmenv export`` does (options from ``SLURMENV_*`` variables only, the
output set from ``SLURMENV_FOR``) and sets the same variables with the same values. A value
holding a newline cannot be carried by the protocol and is refused. In the batch, extern and
interactive steps it sets nothing and never fails.

A site enables it for every job with the shell shim ``slurmenv-site-prolog``
(``TaskProlog=`` in ``slurm.conf``): that shim acts only in jobs that set ``SLURMENV=1``.
"""

from __future__ import annotations

import os

from ._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import NoReturn

#: The job variable that opts a job in when the site-wide prolog is configured
#: (``sbatch --export=ALL,SLURMENV=1``); bin/slurmenv-site-prolog reads it before Python starts.
OPT_IN = "SLURMENV"
OPT_IN_VALUES = ("1", "yes", "true", "on")


def in_task_step(environ: Mapping[str, str]) -> bool:
    """A step of srun tasks (not the batch, extern or interactive step, where Slurm's
    ``TaskProlog`` runs too and this prolog sets nothing)."""
    from .launchers.base import SPECIAL_STEPS, step_id

    step = step_id(environ) or ""
    return bool(step) and step not in SPECIAL_STEPS


def protocol(values: Mapping[str, str]) -> str:
    """Slurm's task-prolog lines for ``values``; SlurmEnvError for a value with a newline."""
    from .errors import SlurmEnvError

    lines = []
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            raise SlurmEnvError(
                f"{name} contains a line break, which Slurm's task prolog cannot carry (each "
                "'export NAME=value' is one line)", variable=name, value=value,
                fix="start the task with eval or exec instead: srun slurmenv exec -- COMMAND",
            )
        lines.append(f"export {name}={value}\n")
    return "".join(lines)


def refusal(text: str) -> str:
    """``print`` lines: the only output of a task prolog the user sees."""
    return "".join(f"print {line}\n" for line in text.splitlines())


def run(environ: Mapping[str, str]) -> tuple[int, str]:
    """(exit status, what to write on stdout) for a task whose environment is ``environ``."""
    if not in_task_step(environ):
        return 0, ""
    from . import options, resolve
    from .errors import SlurmEnvError

    try:
        values = resolve(environ).env(options.outputs(environ))
        return 0, protocol(values)
    except SlurmEnvError as exc:
        return 1, refusal(f"slurmenv: error: {exc}\nslurmenv: the task was not started")
    except Exception as exc:  # noqa: BLE001 - a bug must still stop the task, with a reason
        from .commandline import unexpected

        status, message = unexpected(exc, "The task was not started.", debug_hint=False)
        return status, refusal(message)


def main() -> int:
    """Entry point of ``slurmenv-task-prolog`` (it takes no arguments: Slurm passes none)."""
    status, text = run(os.environ)
    if not text:
        return status
    from .commandline import write_output

    return write_output(text) or status


def entry_point() -> NoReturn:
    """The ``slurmenv-task-prolog`` console script: :func:`main`, run and ended as ``slurmenv``
    is (:func:`slurmenv.commandline.run_script`)."""
    from .commandline import run_script

    run_script(main)


if __name__ == "__main__":
    entry_point()
